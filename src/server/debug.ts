/**
 * The debug listener (upstream port 6070): `/` (and any unknown path) lists the endpoints (a
 * browser asking for `/` gets the console instead, src/server/console.ts),
 * `/rlconfig` dumps the loaded config, `/stats` prints every stat — the rate limit counters
 * included, unlike upstream — and `/debug/pprof/profile?seconds=N` records a CPU profile
 * (V8 `.cpuprofile` JSON, open it in Chrome DevTools or speedscope). `/debug/denials` and
 * `/debug/config-history` answer JSON pages (bounded; a bad query parameter is a 400 with the reason).
 *
 * Each endpoint's data comes from an option, so the primary of worker mode serves the same page
 * with the config, explain and profiles fetched from a worker and the stats summed over all.
 */
import http from 'node:http';
import { Session } from 'node:inspector';
import type { StatsStore } from '../stats/store';
import { CONSOLE_CSP, CONSOLE_CSS, CONSOLE_HTML, CONSOLE_JS } from './console';
import { pathOf, plainError, plainText } from './http-util';

export interface DebugServerOptions {
  stats: StatsStore;
  /**
   * The current config dump ('' when none is loaded): a string, or pieces made (or fetched from a
   * worker) as they are sent, so that the listing of a big config is never one string.
   */
  dumpConfig: () => string | Iterable<string> | Promise<string | AsyncIterable<string>>;
  /** Called before /stats renders, so gauges (local cache, memory) are fresh. */
  refreshGauges?: () => void | Promise<void>;
  /** `/debug/explain`: the explain report for a domain and descriptors, or an error text. */
  explain?: (domain: string, descriptors: string[]) => Promise<string>;
  /** `/debug/explain?domain=D&bucket=k=v,k2=v2`: how an RLQS bucket is placed, limited and divided. */
  explainBucket?: (domain: string, bucket: string) => string | Promise<string>;
  /**
   * `/debug/rlqs`: the live RLQS streams and buckets with their assignments, in pieces made (or
   * fetched from the workers) as they are sent, as the config dump.
   */
  quotaBuckets?: () => string | Iterable<string> | Promise<string | AsyncIterable<string>>;
  /** `/debug/hotkeys`: the hot keys of the loaded limits for the query (JSON), as `denials`. */
  hotKeys?: (query: URLSearchParams) => string | Promise<string>;
  /** `/debug/limits`: every loaded limit with its window's figures and recent denials (JSON), as `denials`. */
  limits?: (query: URLSearchParams) => string | Promise<string>;
  /** `/debug/candidates`: what the candidate limits would have done (JSON), as `denials`. */
  candidates?: (query: URLSearchParams) => string | Promise<string>;
  /**
   * `/debug/pprof/profile`: records a CPU profile for `ms` milliseconds (default: of this process).
   * `query` is the request's query string (worker mode reads `worker` from it).
   */
  profile?: (ms: number, query: URLSearchParams) => Promise<CpuProfileAnswer>;
  /**
   * `/debug/denials`: the JSON page of the last OVER_LIMIT decisions for the request's query; a
   * query it refuses throws DebugHttpError(400, reason). Absent: the page answers 404.
   */
  denials?: (query: URLSearchParams) => string | Promise<string>;
  /** `/debug/config-history`: the JSON page of the last config loads, as `denials`. */
  configHistory?: (query: URLSearchParams) => string | Promise<string>;
}

export interface CpuProfileAnswer {
  /** The V8 `.cpuprofile` JSON. */
  readonly profile: string;
  /** Extra response headers (worker mode says which worker was profiled). */
  readonly headers?: Readonly<Record<string, string>>;
}

/** An option's failure that has its own HTTP status (e.g. 503 when no worker answers). */
export class DebugHttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** Answers 200 with what `get` resolves to, or the error's status (500 unless a DebugHttpError). */
function answer<T>(res: http.ServerResponse, what: string, get: () => T | Promise<T>, ok: (value: T) => void): void {
  Promise.resolve()
    .then(get)
    .then(ok, (err: unknown) => {
      if (err instanceof DebugHttpError) plainError(res, err.status, err.message);
      else plainError(res, 500, `${what} failed: ${String(err)}`);
    });
}

const localProfile = (ms: number): Promise<CpuProfileAnswer> => cpuProfile(ms).then((profile) => ({ profile }));

const ENDPOINTS: ReadonlyArray<[string, string]> = [
  ['/debug/candidates', 'what each candidate limit would have done since its load (JSON): ?domain=D&rule=R&k=N&offset=O&limit=L, each optional'],
  ['/debug/config-history', 'the last config loads, each with its version and what it changed: ?limit=N&before=SEQ (JSON)'],
  ['/debug/denials', 'the last OVER_LIMIT decisions, newest first: ?limit=N&before=SEQ&domain=D&rule=KEY (JSON)'],
  ['/debug/explain', 'explain a request: ?domain=D&descriptors=k=v,k2=v2 (repeatable), or an RLQS bucket: ?domain=D&bucket=k=v,k2=v2'],
  ['/debug/limits', 'every loaded limit: its window\'s busiest key, utilisation, keys, and over-limit hits per 30 s over 15 minutes (JSON): ?domain=D&q=TEXT&offset=O&limit=L, each optional'],
  ['/debug/hotkeys', 'the keys with most hits per limit over the last minute and hour (JSON): ?domain=D&rule=R&k=N, each optional'],
  ['/debug/pprof/', 'root of various pprof endpoints. hit for help.'],
  ['/debug/pprof/profile', 'CPU profiling endpoint'],
  ['/debug/rlqs', 'the live RLQS streams and buckets, and what each was last assigned'],
  ['/rlconfig', 'print out the currently loaded configuration for debugging'],
  ['/stats', 'print out stats'],
];

const MAX_PROFILE_SECONDS = 300;

/**
 * The JSON pages: where their answer comes from (a refused query throws DebugHttpError 400), and
 * the setting that turned one off, for its 404.
 */
type JsonPage = (query: URLSearchParams) => string | Promise<string>;
const JSON_PAGES: Readonly<Record<string, { readonly page: (o: DebugServerOptions) => JsonPage | undefined; readonly off?: string }>> = {
  '/debug/denials': { page: (o) => o.denials, off: 'DEBUG_DENIALS_SIZE=0' },
  '/debug/config-history': { page: (o) => o.configHistory, off: 'DEBUG_CONFIG_HISTORY_SIZE=0' },
  '/debug/hotkeys': { page: (o) => o.hotKeys },
  '/debug/limits': { page: (o) => o.limits },
  '/debug/candidates': { page: (o) => o.candidates },
};

export function createDebugHandler(opts: DebugServerOptions): http.RequestListener {
  const profile = opts.profile ?? localProfile;
  let profiling = false;
  return (req, res) => {
    req.resume();
    // Every page only reads: a write method is refused rather than served as a read.
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.setHeader('Allow', 'GET, HEAD');
      plainError(res, 405, `${req.method ?? '?'} is not allowed: the debug port answers GET and HEAD`);
      return;
    }
    const path = pathOf(req.url);
    switch (path) {
      case '/rlconfig':
        answer<string | Iterable<string> | AsyncIterable<string>>(res, 'rlconfig', opts.dumpConfig, (text) => (typeof text === 'string' ? plainText(res, 200, text) : void streamText(res, text)));
        return;
      case '/stats':
        answer(
          res,
          'stats',
          () => opts.refreshGauges?.(),
          () => {
            let out = '';
            for (const [name, value] of opts.stats.entries()) out += `${name}: ${value}\n`;
            plainText(res, 200, out);
          },
        );
        return;
      case '/debug/explain': {
        const q = new URL(req.url ?? '/', 'http://x').searchParams;
        const domain = q.get('domain') ?? '';
        const descriptors = q.getAll('descriptors');
        const bucket = q.get('bucket');
        if (bucket !== null) {
          const explainBucket = opts.explainBucket;
          if (explainBucket === undefined) plainError(res, 404, 'RLQS is not served here');
          else if (domain === '' || bucket === '') plainError(res, 400, 'explain needs ?domain=D&bucket=k=v,k2=v2');
          else answer(res, 'explain', () => explainBucket(domain, bucket), (text) => plainText(res, 200, text));
          return;
        }
        if (opts.explain === undefined) plainError(res, 404, 'explain is not available');
        else if (domain === '' || descriptors.length === 0) plainError(res, 400, 'explain needs ?domain=D&descriptors=k=v,k2=v2');
        else {
          const explain = opts.explain;
          answer(res, 'explain', () => explain(domain, descriptors), (text) => plainText(res, 200, text));
        }
        return;
      }
      case '/debug/rlqs': {
        const quotaBuckets = opts.quotaBuckets;
        if (quotaBuckets === undefined) plainError(res, 404, 'RLQS is not served here');
        else answer<string | Iterable<string> | AsyncIterable<string>>(res, 'rlqs', quotaBuckets, (text) => (typeof text === 'string' ? plainText(res, 200, text) : void streamText(res, text)));
        return;
      }
      case '/debug/denials':
      case '/debug/config-history':
      case '/debug/hotkeys':
      case '/debug/limits':
      case '/debug/candidates': {
        const { page: pageOf, off } = JSON_PAGES[path]!;
        const page = pageOf(opts);
        if (page === undefined) {
          plainError(res, 404, `${path} is not served here${off !== undefined ? ` (${off})` : ''}`);
          return;
        }
        const query = new URL(req.url ?? '/', 'http://x').searchParams;
        answer(res, path.slice(7), () => page(query), (json) => {
          res.writeHead(200, { 'Content-Type': 'application/json', 'X-Content-Type-Options': 'nosniff' });
          res.end(json);
        });
        return;
      }
      case '/debug/pprof/':
        plainText(
          res,
          200,
          'CPU profile: GET /debug/pprof/profile?seconds=N (default 30, at most 300).\n' +
            'The answer is a V8 .cpuprofile (JSON): open it in Chrome DevTools (Performance) or speedscope.\n' +
            'In worker mode (WORKERS != 1), &worker=N profiles worker N (default: the first ready one).\n',
        );
        return;
      case '/debug/pprof/profile': {
        const query = new URL(req.url ?? '/', 'http://x').searchParams;
        const q = query.get('seconds');
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
        answer(
          res,
          'profiling',
          () => Promise.resolve().then(() => profile(seconds * 1000, query)).finally(() => (profiling = false)),
          (p) => {
            res.statusCode = 200;
            for (const [name, value] of Object.entries(p.headers ?? {})) res.setHeader(name, value);
            res.setHeader('Content-Type', 'application/json');
            res.setHeader('Content-Disposition', 'attachment; filename="ratelimit.cpuprofile"');
            res.end(p.profile);
          },
        );
        return;
      }
      case '/console.js':
        consoleAsset(res, 'text/javascript; charset=utf-8', CONSOLE_JS);
        return;
      case '/console.css':
        consoleAsset(res, 'text/css; charset=utf-8', CONSOLE_CSS);
        return;
      default: {
        // A browser asking for the root gets the console; curl and the others the listing.
        if (path === '/' && /\btext\/html\b/.test(req.headers.accept ?? '')) {
          consoleAsset(res, 'text/html; charset=utf-8', CONSOLE_HTML);
          return;
        }
        let out = '';
        for (const [p, help] of ENDPOINTS) out += `${p}: ${help}\n`;
        plainText(res, 200, out);
      }
    }
  };
}

/** One of the console's files, with its Content-Security-Policy (src/server/console.ts). */
function consoleAsset(res: http.ServerResponse, type: string, body: string): void {
  res.writeHead(200, {
    'Content-Type': type,
    'Content-Security-Policy': CONSOLE_CSP,
    'X-Content-Type-Options': 'nosniff',
    'Referrer-Policy': 'no-referrer',
    'Cache-Control': 'no-cache',
  });
  res.end(body);
}

/**
 * Sends `pieces` as a 200 text answer, taking the next piece only when the socket has room: memory
 * stays at a piece or two whatever the size. Each piece is made in a turn of the event loop of its
 * own (the other clients are served in between, however fast this one reads). A client that
 * leaves stops the listing and closes the pieces' iterator (in worker mode that tells the worker
 * to drop its listing).
 */
async function streamText(res: http.ServerResponse, pieces: Iterable<string> | AsyncIterable<string>): Promise<void> {
  res.statusCode = 200;
  res.setHeader('Content-Type', 'text/plain; charset=utf-8');
  const closed = new Promise<void>((resolve) => res.once('close', resolve));
  try {
    for await (const piece of pieces) {
      if (res.destroyed) return;
      if (!res.write(piece)) await Promise.race([new Promise((resolve) => res.once('drain', resolve)), closed]);
      else await new Promise((resolve) => setImmediate(resolve));
      if (res.destroyed) return;
    }
    res.end();
  } catch (err) {
    // Headers are sent: all that is left is to cut the answer short.
    res.destroy(err as Error);
  }
}

/** Records a CPU profile of this process for `ms` milliseconds. */
export function cpuProfile(ms: number): Promise<string> {
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
