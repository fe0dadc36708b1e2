/**
 * The debug listener (upstream port 6070): `/` (and any unknown path) lists the endpoints,
 * `/rlconfig` dumps the loaded config, `/stats` prints every stat — the rate limit counters
 * included, unlike upstream — and `/debug/pprof/profile?seconds=N` records a CPU profile
 * (V8 `.cpuprofile` JSON, open it in Chrome DevTools or speedscope).
 */
import http from 'node:http';
import { Session } from 'node:inspector';
import type { StatsStore } from '../stats/store';
import { pathOf, plainError, plainText } from './http-util';

export interface DebugServerOptions {
  stats: StatsStore;
  /** The current config dump, or '' when none is loaded. */
  dumpConfig: () => string;
  /** Called before /stats renders, so gauges (local cache, memory) are fresh. */
  refreshGauges?: () => void;
  /** `/debug/explain`: the explain report for a domain and descriptors, or an error text. */
  explain?: (domain: string, descriptors: string[]) => Promise<string>;
}

const ENDPOINTS: ReadonlyArray<[string, string]> = [
  ['/debug/explain', 'explain a request: ?domain=D&descriptors=k=v,k2=v2 (repeatable)'],
  ['/debug/pprof/', 'root of various pprof endpoints. hit for help.'],
  ['/debug/pprof/profile', 'CPU profiling endpoint'],
  ['/rlconfig', 'print out the currently loaded configuration for debugging'],
  ['/stats', 'print out stats'],
];

const MAX_PROFILE_SECONDS = 300;

export function createDebugHandler(opts: DebugServerOptions): http.RequestListener {
  let profiling = false;
  return (req, res) => {
    req.resume();
    const path = pathOf(req.url);
    switch (path) {
      case '/rlconfig':
        plainText(res, 200, opts.dumpConfig());
        return;
      case '/stats': {
        opts.refreshGauges?.();
        let out = '';
        for (const [name, value] of opts.stats.entries()) out += `${name}: ${value}\n`;
        plainText(res, 200, out);
        return;
      }
      case '/debug/explain': {
        const q = new URL(req.url ?? '/', 'http://x').searchParams;
        const domain = q.get('domain') ?? '';
        const descriptors = q.getAll('descriptors');
        if (opts.explain === undefined) plainError(res, 404, 'explain is not available');
        else if (domain === '' || descriptors.length === 0) plainError(res, 400, 'explain needs ?domain=D&descriptors=k=v,k2=v2');
        else {
          opts.explain(domain, descriptors).then(
            (text) => plainText(res, 200, text),
            (err: unknown) => plainError(res, 500, `explain failed: ${String(err)}`),
          );
        }
        return;
      }
      case '/debug/pprof/':
        plainText(
          res,
          200,
          'CPU profile: GET /debug/pprof/profile?seconds=N (default 30, at most 300).\n' +
            'The answer is a V8 .cpuprofile (JSON): open it in Chrome DevTools (Performance) or speedscope.\n',
        );
        return;
      case '/debug/pprof/profile': {
        const q = new URL(req.url ?? '/', 'http://x').searchParams.get('seconds');
        const seconds = q === null ? 30 : Number(q);
        if (!Number.isFinite(seconds) || seconds <= 0 || seconds > MAX_PROFILE_SECONDS) {
          plainError(res, 400, `seconds must be a number in (0, ${MAX_PROFILE_SECONDS}]`);
          return;
        }
        if (profiling) {
          plainError(res, 409, 'a CPU profile is already being recorded');
          return;
        }
        profiling = true;
        cpuProfile(seconds * 1000).then(
          (profile) => {
            profiling = false;
            res.statusCode = 200;
            res.setHeader('Content-Type', 'application/json');
            res.setHeader('Content-Disposition', 'attachment; filename="ratelimit.cpuprofile"');
            res.end(profile);
          },
          (err: unknown) => {
            profiling = false;
            plainError(res, 500, `profiling failed: ${String(err)}`);
          },
        );
        return;
      }
      default: {
        let out = '';
        for (const [p, help] of ENDPOINTS) out += `${p}: ${help}\n`;
        plainText(res, 200, out);
      }
    }
  };
}

/** Records a CPU profile of this process for `ms` milliseconds. */
function cpuProfile(ms: number): Promise<string> {
  const session = new Session();
  session.connect();
  const post = (method: string, params?: object): Promise<unknown> =>
    new Promise((resolve, reject) =>
      session.post(method, params ?? {}, (err, result) => (err ? reject(err) : resolve(result))),
    );
  return post('Profiler.enable')
    .then(() => post('Profiler.start'))
    .then(() => new Promise((r) => setTimeout(r, ms)))
    .then(() => post('Profiler.stop'))
    .then((result) => JSON.stringify((result as { profile: unknown }).profile))
    .finally(() => session.disconnect());
}
