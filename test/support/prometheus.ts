/**
 * A real Prometheus for tests (Debian's `prometheus`, installed by scripts/test-servers.sh): it
 * listens on 127.0.0.1 on a free port, scrapes the given targets every second into a temporary
 * directory, is ready once `/-/ready` answers, answers PromQL through its HTTP API, and is stopped
 * by the test (the directory removed). `promtool` runs the same way. A missing binary is an error
 * with the fix in its text, never a skip. Every wait is bounded.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { freePort } from './ports';
import { waitFor } from './wait';

const PROMETHEUS_BIN = process.env.PROMETHEUS_BIN ?? 'prometheus';
const PROMTOOL_BIN = process.env.PROMTOOL_BIN ?? 'promtool';
const INSTALL = 'install it with `bash scripts/test-servers.sh` (Debian package prometheus)';

/** Children still alive, killed when the test process exits whatever happened to the test. */
const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const c of live) c.kill('SIGKILL');
});

/** `promtool` with `args` in `cwd`: its exit code and output (ENOENT is an error naming the fix). */
export function promtool(args: string[], cwd: string): { code: number | null; out: string } {
  const r = spawnSync(PROMTOOL_BIN, args, { cwd, encoding: 'utf8', timeout: 60_000 });
  if (r.error !== undefined) throw new Error(`cannot run ${PROMTOOL_BIN}: ${r.error.message}; ${INSTALL}`);
  return { code: r.status, out: r.stdout + r.stderr };
}

/** One PromQL answer: each series' labels and its value (an instant query). */
export interface Sample {
  readonly metric: Record<string, string>;
  readonly value: number;
}

export class PrometheusServer {
  private stderr = '';

  private constructor(
    private readonly child: ChildProcess,
    private readonly dir: string,
    readonly address: string,
  ) {}

  /** Starts one scraping `targets` (host:port, path /metrics) every second as job "ratelimit". */
  static async start(targets: string[], opts: { ruleFiles?: string[] } = {}): Promise<PrometheusServer> {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rl-prom-'));
    const config = [
      'global:',
      '  scrape_interval: 1s',
      '  evaluation_interval: 1s',
      ...(opts.ruleFiles !== undefined ? ['rule_files:', ...opts.ruleFiles.map((f) => `  - ${JSON.stringify(f)}`)] : []),
      'scrape_configs:',
      '  - job_name: ratelimit',
      '    static_configs:',
      `      - targets: ${JSON.stringify(targets)}`,
      '',
    ].join('\n');
    fs.writeFileSync(path.join(dir, 'prometheus.yml'), config);
    const port = await freePort();
    const address = `127.0.0.1:${port}`;
    const child = spawn(
      PROMETHEUS_BIN,
      [`--config.file=${path.join(dir, 'prometheus.yml')}`, `--storage.tsdb.path=${path.join(dir, 'data')}`, `--web.listen-address=${address}`, '--log.level=warn'],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    live.add(child);
    const server = new PrometheusServer(child, dir, address);
    child.stderr!.on('data', (d: Buffer) => (server.stderr = (server.stderr + d.toString()).slice(-4000)));
    const failed = new Promise<never>((_, reject) => {
      child.once('error', (err) => reject(new Error(`cannot start ${PROMETHEUS_BIN}: ${err.message}; ${INSTALL}`)));
      child.once('exit', (code) => reject(new Error(`prometheus exited with ${code} before it was ready: ${server.stderr}`)));
    });
    failed.catch(() => undefined);
    try {
      await Promise.race([
        failed,
        waitFor(async () => (await fetch(`http://${address}/-/ready`).catch(() => undefined))?.ok === true, 'prometheus to be ready', 30_000),
      ]);
    } catch (err) {
      await server.stop();
      throw err;
    }
    return server;
  }

  /** An instant query's vector (throws on a PromQL error, with Prometheus' reason). */
  async query(expr: string): Promise<Sample[]> {
    const res = await fetch(`http://${this.address}/api/v1/query?query=${encodeURIComponent(expr)}`);
    const body = (await res.json()) as { status: string; error?: string; data?: { resultType: string; result: Array<{ metric: Record<string, string>; value: [number, string] }> } };
    if (body.status !== 'success') throw new Error(`prometheus refused ${expr}: ${body.error ?? res.status}`);
    if (body.data!.resultType === 'scalar') {
      const v = body.data!.result as unknown as [number, string];
      return [{ metric: {}, value: Number(v[1]) }];
    }
    return body.data!.result.map((r) => ({ metric: r.metric, value: Number(r.value[1]) }));
  }

  /** The scrape targets' health as Prometheus sees it. */
  async targets(): Promise<Array<{ health: string; lastError: string; scrapeUrl: string }>> {
    const res = await fetch(`http://${this.address}/api/v1/targets`);
    return ((await res.json()) as { data: { activeTargets: Array<{ health: string; lastError: string; scrapeUrl: string }> } }).data.activeTargets;
  }

  async stop(): Promise<void> {
    if (this.child.exitCode === null && this.child.signalCode === null) {
      const exited = new Promise((resolve) => this.child.once('exit', resolve));
      this.child.kill('SIGTERM');
      const timer = setTimeout(() => this.child.kill('SIGKILL'), 5_000);
      await exited;
      clearTimeout(timer);
    }
    live.delete(this.child);
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}
