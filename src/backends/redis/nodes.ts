/**
 * The Redis store's circuits, one per node (circuit.ts is the state machine): a single or
 * sentinel instance is one node, a cluster has one per master address (`host:port`), so that a
 * dead or hanging shard fails only the requests with keys on it while the others go on.
 *
 * - A node's circuit opens after BACKEND_CIRCUIT_FAILURES transient failures in a row of the
 *   pipelines sent to it (a timeout, a lost connection), or at once when the connection to a
 *   cluster node that was ready is lost (the state is followed, not inferred from timeouts); its
 *   first probe is then due at once, so a connection that only dropped costs one request.
 * - While it is open, a request with a key on that node fails at once (before anything of it is
 *   sent), with a transient StoreError naming the node; after BACKEND_CIRCUIT_OPEN_DURATION one
 *   request is let through as the probe. A cluster node whose connection is ready again closes
 *   its circuit at once.
 * - Shown as `ratelimit.redis.circuit_open` (how many circuits are open now: 0 or 1 for a single
 *   Redis, the number of open shards for a cluster), `ratelimit.redis.circuit_opened` (each
 *   opening), and one log line per change.
 */
import type { Counter, Gauge } from '../../stats/store';
import type { Logger } from '../../telemetry/logger';
import type { Clock } from '../../platform/clock';
import { Circuit } from '../circuit';

/** BACKEND_CIRCUIT_FAILURES, BACKEND_CIRCUIT_OPEN_DURATION and the clock they run on. */
export interface CircuitSettings {
  failures: number;
  openMs: number;
  clock: Clock;
}

/** What the circuits of one store show together (both instances with REDIS_PERSECOND). */
export class CircuitStats {
  /** Circuits open now; the store's fast path looks at nothing else while it is 0. */
  open = 0;

  constructor(
    private readonly gauge?: Gauge,
    private readonly opened?: Counter,
  ) {}

  changed(open: boolean): void {
    this.open += open ? 1 : -1;
    if (open) this.opened?.inc();
    this.gauge?.set(this.open);
  }
}

/** The circuits of one instance (main or per-second), by node address ('' for a single or sentinel instance). */
export class NodeCircuits {
  private readonly byAddress = new Map<string, Circuit>();

  constructor(
    private readonly settings: CircuitSettings,
    private readonly stats: CircuitStats,
    private readonly logger: Logger,
    /** `redis` or `redis per-second`. */
    private readonly label: string,
  ) {}

  /** The circuit of the node at `address` ('' for the instance), created on first use. */
  of(address: string): Circuit {
    let c = this.byAddress.get(address);
    if (c === undefined) {
      const name = this.name(address);
      const openMs = this.settings.openMs;
      c = new Circuit({
        failures: this.settings.failures,
        openMs,
        clock: this.settings.clock,
        onChange: (open, reason) => {
          this.stats.changed(open);
          if (open) {
            const which = address === '' ? 'requests' : 'requests with a key on it';
            this.logger.warn(`${name} circuit opened: ${which} fail at once for ${openMs} ms at a time (${reason})`);
          } else {
            this.logger.info(`${name} circuit closed: ${reason}`);
          }
        },
      });
      this.byAddress.set(address, c);
    }
    return c;
  }

  /** The circuit of `address` if one was made. */
  get(address: string): Circuit | undefined {
    return this.byAddress.get(address);
  }

  /** `redis` for the instance, `redis node 10.0.0.1:6379` for a cluster node. */
  name(address: string): string {
    return address === '' ? this.label : `${this.label} node ${address}`;
  }
}
