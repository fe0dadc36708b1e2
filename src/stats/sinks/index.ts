/**
 * `createStatsSink(settings.stats, logger)`: the one sink the settings ask for (the "at most one
 * sink" rule is checked by the settings). Throws at start-up for a bad PROMETHEUS_MAPPER_YAML or
 * PROMETHEUS_ADDR; call `await sink.start()` before serving (it opens the Prometheus listener).
 */
import { readFileSync } from 'node:fs';
import type http from 'node:http';
import type { StatsSettings } from '../../settings/settings';
import type { Logger } from '../../telemetry/logger';
import { LoggingSink, NullSink } from './basic';
import { DogStatsdSink } from './dogstatsd';
import { MapperConfigError, MetricMapper, defaultMapperConfig } from './prom-mapper';
import { PrometheusSink } from './prometheus';
import { StatsdSink } from './statsd';
import type { StatsSink } from './types';
import { errorMessage } from '../../platform/errors';

export type { StatsSink, StatsSinkKind } from './types';
export { LoggingSink, NullSink } from './basic';
export { DogStatsdSink, DogNamer } from './dogstatsd';
export { MapperConfigError, MetricMapper, defaultMapperConfig, escapeMetricName } from './prom-mapper';
export { PrometheusSink, parseListenAddr } from './prometheus';
export { StatsdSink } from './statsd';
export { IpcStatsSink, type StatsBatch, type TimerBatch } from './ipc';

/** Loads the Prometheus mapper: PROMETHEUS_MAPPER_YAML when set, else upstream's built-in one. */
export function loadPrometheusMapper(prometheus: StatsSettings['prometheus']): MetricMapper {
  if (prometheus.mapperYaml === '') return new MetricMapper(defaultMapperConfig(prometheus.responseTimeAsMilliseconds), 'built-in mapper');
  let text: string;
  try {
    text = readFileSync(prometheus.mapperYaml, 'utf8');
  } catch (err) {
    throw new MapperConfigError(`PROMETHEUS_MAPPER_YAML: cannot read ${prometheus.mapperYaml}: ${errorMessage(err)}`);
  }
  return MetricMapper.fromYaml(text, `PROMETHEUS_MAPPER_YAML (${prometheus.mapperYaml})`);
}

/** What the process wraps around a sink's own listener (the Prometheus port). */
export interface SinkHooks {
  /** Takes the Prometheus server's connections through the process's admission. */
  readonly admitMetricsConnections?: (server: http.Server) => void;
}

export function createStatsSink(settings: StatsSettings, logger: Logger, hooks: SinkHooks = {}): StatsSink {
  switch (settings.sink) {
    case 'disabled':
      return new NullSink();
    case 'logging':
      return new LoggingSink(logger, settings.extraTags);
    case 'statsd':
      return new StatsdSink({
        host: settings.statsdHost,
        port: settings.statsdPort,
        protocol: 'tcp',
        extraTags: settings.extraTags,
        logger,
      });
    case 'dogstatsd':
      return new DogStatsdSink({
        host: settings.statsdHost,
        port: settings.statsdPort,
        extraTags: settings.extraTags,
        mogrifiers: settings.dogStatsdMogrifiers,
        logger,
      });
    case 'prometheus':
      return new PrometheusSink({
        addr: settings.prometheus.addr,
        path: settings.prometheus.path,
        mapper: loadPrometheusMapper(settings.prometheus),
        extraTags: settings.extraTags,
        logger,
        admitConnections: hooks.admitMetricsConnections,
      });
  }
}
