/**
 * The control API of a paper or live run (`--control HOST:PORT`): JSON under /api/ and one
 * self-contained dashboard page at /. It reads the run's state (the engine's view, the broker
 * budget as the limiter last answered it, the journal's size, the run's recent warnings): a poll
 * never costs a broker call.
 *
 * - Every /api/ answer needs `Authorization: Bearer <token>`; without it, or with another, 401
 *   and nothing about the account. The page and its script and style carry no account data and
 *   need no token: the page reads it from the URL's fragment (`/#token=...`, which the browser
 *   never sends) and sends it with each of its requests.
 * - Reads are GETs; the operator's actions are POSTs (/api/pause, /api/resume, /api/flatten,
 *   /api/stop, /api/trades/<id>/close with an optional JSON body {"amount": K}), answered once the
 *   engine has taken them (run-controls.ts): 200 with what was done, 4xx with the reason when the
 *   action cannot apply (nothing sent to the broker), 502 when the broker refused a close. Another
 *   method is a 405 naming the one allowed; an unknown path a 404 that names it.
 * - Bounded as any listener of ours: a few connections at once, short header, request and idle
 *   timeouts, a request body of at most MAX_BODY_BYTES.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { BudgetUse } from '../report/report';
import { thinEquity } from '../report/equity-thinning';
import type { LimitState } from '../broker/call-budget';
import type { RunView } from '../engine/run-view';
import type { SinkStats } from '../notify/notifier';
import { ActionRefused, type ActionDone, type OperatorAction } from '../engine/run-controls';
import type { LogWriter } from '../../../telemetry/logger';
import { errorMessage } from '../../../platform/errors';
import { DASHBOARD_CSP, DASHBOARD_CSS, DASHBOARD_HTML, DASHBOARD_JS } from './dashboard';

/** A warning or an error the run logged (its last errors, in the status). */
export interface RunNote {
  at: number;
  level: 'warn' | 'error';
  message: string;
}

/** What the control API reads. */
export interface ControlSource {
  view(): RunView;
  /** The broker's limits as the limiter last answered each, and the calls sent per endpoint. */
  limits(): LimitState[];
  budgetUse(): BudgetUse[];
  /** The journal's file, when the run has one. */
  journalFile(): string | undefined;
  /** The run's recent warnings and errors, oldest first. */
  notes(): readonly RunNote[];
  /** Carries out an operator's action; ActionRefused when it cannot apply. */
  act(a: OperatorAction): Promise<ActionDone>;
  /** Each notification sink's counts (--notify): sent, failed, dropped, queued. */
  notifications(): readonly SinkStats[];
}

export interface ControlOptions {
  host: string;
  port: number;
  token: string;
  source: ControlSource;
}

/** Connections the control port holds at once (a dashboard or two, a script polling). */
const MAX_CONNECTIONS = 16;
const HEADERS_TIMEOUT_MS = 5_000;
const REQUEST_TIMEOUT_MS = 10_000;
const IDLE_TIMEOUT_MS = 5_000;
/** An action's body is a small JSON object ({"amount": 20}); more is refused (413). */
export const MAX_BODY_BYTES = 4096;

/** The environment variable a token may come from (else --control-token-file, else one is made on loopback). */
export const CONTROL_TOKEN_ENV = 'RATELIMIT_RUNNER_CONTROL_TOKEN';

/** Whether `host` is a loopback address or name (a token is then optional: one is made). */
export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

/**
 * The token of a control port: from `file` (its first line), else from the environment, else a
 * random one (`made`) when the port is on loopback. Throws a message for the operator otherwise.
 */
export function controlToken(host: string, file: string | undefined, env: NodeJS.ProcessEnv): { token: string; made: boolean } {
  if (file !== undefined) {
    let text: string;
    try {
      text = fs.readFileSync(file, 'utf8');
    } catch (e) {
      throw new Error(`--control-token-file ${file}: ${(e as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : errorMessage(e)}`);
    }
    const token = text.split(/\r?\n/)[0]!.trim();
    if (token.length < 16) throw new Error(`--control-token-file ${file}: the token on its first line must be at least 16 characters`);
    return { token, made: false };
  }
  const fromEnv = env[CONTROL_TOKEN_ENV]?.trim();
  if (fromEnv) {
    if (fromEnv.length < 16) throw new Error(`${CONTROL_TOKEN_ENV} must be at least 16 characters`);
    return { token: fromEnv, made: false };
  }
  if (!isLoopback(host)) throw new Error(`--control ${host}: an address that is not loopback needs a token (--control-token-file FILE or ${CONTROL_TOKEN_ENV})`);
  return { token: randomBytes(24).toString('base64url'), made: true };
}

export interface ControlServer {
  /** http://host:port/ */
  readonly url: string;
  close(): Promise<void>;
}

const digest = (s: string): Buffer => createHash('sha256').update(s).digest();

export async function startControlServer(o: ControlOptions): Promise<ControlServer> {
  const expected = digest(o.token);
  const authorized = (req: http.IncomingMessage): boolean => {
    const h = req.headers.authorization;
    if (h === undefined || !h.startsWith('Bearer ')) return false;
    return timingSafeEqual(digest(h.slice(7).trim()), expected);
  };
  const server = http.createServer((req, res) => {
    try {
      answer(req, res);
    } catch (e) {
      send(res, 500, { error: `the control API failed: ${errorMessage(e)}` });
    }
  });
  const answer = (req: http.IncomingMessage, res: http.ServerResponse): void => {
    const path = (req.url ?? '/').split('?')[0]!;
    const action = actionOf(path);
    // an unknown /api/ path is a 404 (after the token) whatever the method
    const known = action !== undefined || !path.startsWith('/api/') || ENDPOINTS[path.slice(5)] !== undefined;
    const allowed = action !== undefined ? ['POST'] : known ? ['GET', 'HEAD'] : ['GET', 'HEAD', 'POST'];
    if (!allowed.includes(req.method ?? '')) {
      res.setHeader('Allow', allowed.join(', '));
      send(res, 405, { error: `${req.method} ${path}: ${action !== undefined ? 'an action is a POST' : 'this is read with GET'}` });
      return;
    }
    if (path === '/favicon.ico') {
      res.writeHead(204, SECURITY_HEADERS);
      res.end();
      return;
    }
    const asset = ASSETS[path];
    if (asset !== undefined) {
      res.writeHead(200, { 'Content-Type': asset.type, 'Cache-Control': 'no-store', ...SECURITY_HEADERS });
      res.end(req.method === 'HEAD' ? undefined : asset.body);
      return;
    }
    if (!path.startsWith('/api/')) {
      send(res, 404, { error: `no page ${path}: the dashboard is at /, the API under /api/` });
      return;
    }
    if (!authorized(req)) {
      res.setHeader('WWW-Authenticate', 'Bearer');
      send(res, 401, { error: 'a token is needed: Authorization: Bearer <token>' });
      req.resume();
      return;
    }
    if (action !== undefined) {
      readBody(req, res, (body) => {
        const a = action(body);
        if (typeof a === 'string') send(res, 400, { error: `${path}: ${a}` });
        else act(a, res);
      });
      return;
    }
    const endpoint = ENDPOINTS[path.slice(5)];
    if (endpoint === undefined) {
      send(res, 404, { error: `unknown endpoint ${path}; there are ${Object.keys(ENDPOINTS).map((e) => `/api/${e}`).join(', ')} (GET) and ${ACTION_PATHS} (POST)` });
      return;
    }
    send(res, 200, endpoint(o.source));
  };
  const act = (a: OperatorAction, res: http.ServerResponse): void => {
    o.source.act(a).then(
      (done) => send(res, done.failed?.length ? 502 : 200, done),
      (e: unknown) => send(res, e instanceof ActionRefused ? e.status : 500, { error: e instanceof ActionRefused ? e.message : `the action failed: ${errorMessage(e)}` }),
    );
  };
  server.maxConnections = MAX_CONNECTIONS;
  server.headersTimeout = HEADERS_TIMEOUT_MS;
  server.requestTimeout = REQUEST_TIMEOUT_MS;
  server.keepAliveTimeout = IDLE_TIMEOUT_MS;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.port, o.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const addr = server.address() as AddressInfo;
  const host = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  return {
    url: `http://${host}:${addr.port}/`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

const SECURITY_HEADERS = {
  'Content-Security-Policy': DASHBOARD_CSP,
  'X-Content-Type-Options': 'nosniff',
  'Referrer-Policy': 'no-referrer',
} as const;

const ASSETS: Readonly<Record<string, { type: string; body: string }>> = {
  '/': { type: 'text/html; charset=utf-8', body: DASHBOARD_HTML },
  '/dashboard.js': { type: 'text/javascript; charset=utf-8', body: DASHBOARD_JS },
  '/dashboard.css': { type: 'text/css; charset=utf-8', body: DASHBOARD_CSS },
};

/** A POST path's action, made from its body (a reason when the body does not fit it); undefined for other paths. */
function actionOf(path: string): ((body: Record<string, unknown>) => OperatorAction | string) | undefined {
  const noFields = (a: OperatorAction) => (body: Record<string, unknown>) => (Object.keys(body).length ? `takes no body fields (got ${Object.keys(body).join(', ')})` : a);
  switch (path) {
    case '/api/pause':
      return noFields({ action: 'pause' });
    case '/api/resume':
      return noFields({ action: 'resume' });
    case '/api/flatten':
      return noFields({ action: 'flatten' });
    case '/api/stop':
      return noFields({ action: 'stop' });
  }
  const close = /^\/api\/trades\/([^/]+)\/close$/.exec(path);
  if (!close) return undefined;
  const tradeId = decodeURIComponent(close[1]!);
  return (body) => {
    const { amount, ...rest } = body;
    if (Object.keys(rest).length) return `unknown body fields ${Object.keys(rest).join(', ')} (a close takes {"amount": K}, or no body for the whole trade)`;
    if (amount !== undefined && !(typeof amount === 'number' && Number.isFinite(amount) && amount > 0)) return `"amount" must be a number of K above 0, got ${JSON.stringify(amount)}`;
    return { action: 'close', tradeId, ...(amount !== undefined ? { amount } : {}) };
  };
}

const ACTION_PATHS = '/api/pause, /api/resume, /api/flatten, /api/stop, /api/trades/<id>/close';

/** Reads a request body of at most MAX_BODY_BYTES: an empty one is {}, else a JSON object (400 otherwise, 413 past the bound). */
function readBody(req: http.IncomingMessage, res: http.ServerResponse, then: (body: Record<string, unknown>) => void): void {
  const chunks: Buffer[] = [];
  let size = 0;
  req.on('data', (c: Buffer) => {
    size += c.length;
    if (size > MAX_BODY_BYTES) {
      if (!res.headersSent) {
        res.setHeader('Connection', 'close');
        send(res, 413, { error: `the body is over ${MAX_BODY_BYTES} bytes` });
      }
      req.destroy();
      return;
    }
    chunks.push(c);
  });
  req.on('end', () => {
    if (size > MAX_BODY_BYTES) return;
    const text = Buffer.concat(chunks).toString('utf8').trim();
    if (text === '') return then({});
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch (e) {
      send(res, 400, { error: `the body is not JSON: ${errorMessage(e)}` });
      return;
    }
    if (body === null || typeof body !== 'object' || Array.isArray(body)) {
      send(res, 400, { error: 'the body must be a JSON object' });
      return;
    }
    then(body as Record<string, unknown>);
  });
}

function send(res: http.ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'Content-Type': 'application/json; charset=utf-8', 'Cache-Control': 'no-store', ...SECURITY_HEADERS });
  res.end(`${JSON.stringify(body)}\n`);
}

/** The last error the run met: the strategy error that ended it, else its last error line. */
function lastError(view: RunView, notes: readonly RunNote[]): { at: number | undefined; message: string } | undefined {
  if (view.error !== undefined) return { at: undefined, message: `${view.error.message} (in ${view.error.hook})` };
  for (let i = notes.length - 1; i >= 0; i--) if (notes[i]!.level === 'error') return { at: notes[i]!.at, message: notes[i]!.message };
  return undefined;
}

/**
 * Spans of the equity curve an answer carries, as the report thins it (each span's ends, lowest and
 * highest point and deepest fall): some 600 points, whatever the run's length (a page polling every
 * second must not carry a whole run's).
 */
export const CURVE_SPANS = 100;

const ENDPOINTS: Readonly<Record<string, (s: ControlSource) => unknown>> = {
  status: (s) => {
    const v = s.view();
    const notes = s.notes();
    return {
      mode: v.mode,
      strategy: v.strategy,
      phase: v.phase,
      account: v.account.accountId,
      startedAt: v.startedAt,
      uptimeS: v.startedAt === undefined ? 0 : Math.round((v.now - v.startedAt) / 1000),
      resumed: v.resumed,
      decisions: v.decisions,
      connection: v.connection,
      lastError: lastError(v, notes),
      recent: notes.slice(-20),
      locks: v.protections.locks,
      notifications: s.notifications(),
    };
  },
  positions: (s) => {
    const v = s.view();
    return { positions: v.positions, orders: v.orders, foreign: v.foreign };
  },
  trades: (s) => ({ closed: s.view().closed }),
  pnl: (s) => {
    const v = s.view();
    return { ...v.pnl, balance: v.account.balance, equity: v.account.equity, usableMargin: v.account.usableMargin, curve: thinEquity(v.equity, CURVE_SPANS) };
  },
  budget: (s) => ({ limits: s.limits(), sent: s.budgetUse() }),
  protections: (s) => s.view().protections,
  journal: (s) => {
    const file = s.journalFile();
    if (file === undefined) return { file: null };
    let bytes: number | null = null;
    try {
      bytes = fs.statSync(file).size;
    } catch {
      // not written yet
    }
    return { file, bytes, lastCheckpointAt: s.view().lastCheckpointAt ?? null };
  },
};

/** Notes kept for the status (the newest; older ones are dropped). */
const NOTES_KEPT = 100;

/**
 * A logger that also keeps the run's warnings and errors (the status's last errors), bounded; the
 * lines still go to `log`.
 */
export function notingLogger(log: LogWriter, clock: () => number = Date.now): { logger: LogWriter; notes: RunNote[] } {
  const notes: RunNote[] = [];
  const note = (level: RunNote['level'], message: string): void => {
    notes.push({ at: clock(), level, message });
    if (notes.length > NOTES_KEPT) notes.splice(0, notes.length - NOTES_KEPT);
  };
  return {
    notes,
    logger: {
      debug: (msg, fields) => log.debug(msg, fields),
      info: (msg, fields) => log.info(msg, fields),
      warn: (msg, fields) => (note('warn', msg), log.warn(msg, fields)),
      error: (msg, fields) => (note('error', msg), log.error(msg, fields)),
    },
  };
}
