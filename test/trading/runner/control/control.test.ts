/**
 * A paper run's control API and dashboard (`--control`), from outside as a trader sees it: the
 * runner as a child process against the broker simulator (needs `npx tsc -p tsconfig.json`
 * first), the API over HTTP, the page in Debian's chromium (playwright-core). A fill shows in the
 * API and on the page within a refresh; a cut broker connection shows as disconnected, then as
 * reconnected and reconciled; without the token every /api/ answer is 401 and says nothing of the
 * account. The server's own rules (tokens, unknown endpoints, methods, the page's CSP) are tested
 * on it directly.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { chromium, type Browser } from 'playwright-core';
import type { BrokerSimulator } from '../../../../src/trading/simulator';
import { CONTROL_TOKEN_ENV, controlToken, startControlServer, type ControlServer, type ControlSource } from '../../../../src/trading/runner/control/control-server';
import { DASHBOARD_CSP, DASHBOARD_JS } from '../../../../src/trading/runner/control/dashboard';
import type { RunView } from '../../../../src/trading/runner/engine/run-view';
import { ActionRefused, type OperatorAction } from '../../../../src/trading/runner/engine/run-controls';
import { waitFor } from '../../../support/wait';
import { startSim, TOKEN } from '../../helpers';
import { freshRunnerEnv } from '../helpers';

const ROOT = path.join(__dirname, '../../../..');
const CLI = path.join(ROOT, 'dist/src/cli/runner.js');
const CHROMIUM = process.env.CHROMIUM_BIN ?? '/usr/bin/chromium';
const ARTIFACTS = path.join(ROOT, 'test-artifacts');
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rr-control-'));

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  text: string;
  json: () => Record<string, unknown>;
}

function request(url: string, opts: { token?: string; method?: string; body?: string } = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: opts.method ?? 'GET', headers: opts.token ? { Authorization: `Bearer ${opts.token}` } : {} }, (res) => {
      let text = '';
      res.on('data', (d: Buffer) => (text += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json: () => JSON.parse(text) as Record<string, unknown> }));
    });
    req.on('error', reject);
    req.end(opts.body);
  });
}

const VIEW: RunView = {
  mode: 'paper',
  strategy: 'still',
  now: 2_000,
  startedAt: 1_000,
  phase: 'running',
  resumed: false,
  decisions: 0,
  connection: { state: 'connected', since: 1_000, lastReconnect: undefined },
  error: undefined,
  account: { accountId: '8123456', currency: 'USD', balance: 50_000, equity: 50_000, usedMargin: 0, usableMargin: 50_000, dayPL: 0 },
  positions: [],
  orders: [],
  foreign: { positions: [], orders: [] },
  closed: [],
  equity: [],
  pnl: { realised: 0, unrealised: 0, day: 0, currency: 'USD' },
  protections: { limits: {}, rules: {}, locks: [] },
  lastCheckpointAt: undefined,
};
/** The actions the fake source was asked to carry out; trade 7 is not the run's, and 8 is. */
const acted: OperatorAction[] = [];
const SOURCE: ControlSource = {
  view: () => VIEW,
  limits: () => [],
  budgetUse: () => [],
  journalFile: () => undefined,
  notes: () => [],
  notifications: () => [],
  act: async (a) => {
    if (a.action === 'close' && a.tradeId === '7') throw new ActionRefused(409, "trade 7 is not this run's");
    acted.push(a);
    return a.action === 'close' && a.amount === 99 ? { action: a.action, message: 'trade 8 could not be closed', failed: ['trade 8: refused'] } : { action: a.action, message: `${a.action} done` };
  },
};

describe('the control server', () => {
  const TOKEN_A = 'a-token-of-twenty-characters';
  let server: ControlServer;
  beforeAll(async () => {
    server = await startControlServer({ host: '127.0.0.1', port: 0, token: TOKEN_A, source: SOURCE });
  });
  afterAll(async () => {
    await server.close();
  });

  test('every /api/ answer needs the token: without it, or with another, 401 and nothing of the account', async () => {
    for (const token of [undefined, 'not-the-token-at-all-000']) {
      for (const endpoint of ['status', 'positions', 'trades', 'pnl', 'budget', 'protections', 'journal', 'nothing-here']) {
        const r = await request(`${server.url}api/${endpoint}`, { token });
        expect(r.status).toBe(401);
        expect(r.headers['www-authenticate']).toBe('Bearer');
        expect(r.text).not.toContain('8123456');
        expect(r.text).not.toContain('still');
      }
    }
    const ok = await request(`${server.url}api/status`, { token: TOKEN_A });
    expect(ok.status).toBe(200);
    expect(ok.json()).toMatchObject({ strategy: 'still', account: '8123456', phase: 'running', connection: { state: 'connected' } });
  });

  test('an unknown endpoint or page is a 404 that says where things are; a read is a GET, an action a POST (405 otherwise)', async () => {
    for (const method of ['GET', 'POST']) {
      const unknown = await request(`${server.url}api/flaten`, { token: TOKEN_A, method });
      expect(unknown.status).toBe(404);
      expect(unknown.json().error).toBe(
        'unknown endpoint /api/flaten; there are /api/status, /api/positions, /api/trades, /api/pnl, /api/budget, /api/protections, /api/journal (GET) and /api/pause, /api/resume, /api/flatten, /api/stop, /api/trades/<id>/close (POST)',
      );
    }
    expect((await request(`${server.url}robots.txt`)).status).toBe(404);
    const post = await request(`${server.url}api/status`, { token: TOKEN_A, method: 'POST' });
    expect(post.status).toBe(405);
    expect(post.headers.allow).toBe('GET, HEAD');
    const get = await request(`${server.url}api/flatten`, { token: TOKEN_A });
    expect([get.status, get.headers.allow, get.json().error]).toEqual([405, 'POST', 'GET /api/flatten: an action is a POST']);
    expect(acted).toEqual([]);
  });

  test('the actions: POSTed with the token, carried out by the run; a bad body or a refused action is a 4xx with its reason and reaches nothing', async () => {
    acted.length = 0;
    const post = (p: string, body?: string, token: string | null = TOKEN_A) => request(`${server.url}api/${p}`, { token: token ?? undefined, method: 'POST', body });
    for (const p of ['pause', 'resume', 'flatten', 'stop', 'trades/8/close']) {
      const none = await post(p, undefined, null);
      expect([none.status, none.text.includes('8123456')]).toEqual([401, false]);
    }
    expect(acted).toEqual([]);
    expect((await post('pause')).json()).toEqual({ action: 'pause', message: 'pause done' });
    expect((await post('resume', '{}')).status).toBe(200);
    expect((await post('trades/8/close', '{"amount": 20}')).status).toBe(200);
    expect((await post('trades/8/close')).status).toBe(200);
    const failed = await post('trades/8/close', '{"amount": 99}');
    expect([failed.status, failed.json().failed]).toEqual([502, ['trade 8: refused']]);
    expect(acted).toEqual([{ action: 'pause' }, { action: 'resume' }, { action: 'close', tradeId: '8', amount: 20 }, { action: 'close', tradeId: '8' }, { action: 'close', tradeId: '8', amount: 99 }]);
    acted.length = 0;
    const refused = await post('trades/7/close');
    expect([refused.status, refused.json().error]).toEqual([409, "trade 7 is not this run's"]);
    const bad: Array<[string, string | undefined, number, string]> = [
      ['flatten', '{"now": true}', 400, '/api/flatten: takes no body fields (got now)'],
      ['pause', '{not json', 400, 'the body is not JSON: '],
      ['pause', '[1]', 400, 'the body must be a JSON object'],
      ['trades/8/close', '{"amount": -5}', 400, '/api/trades/8/close: "amount" must be a number of K above 0, got -5'],
      ['trades/8/close', '{"amount": "all"}', 400, '/api/trades/8/close: "amount" must be a number of K above 0, got "all"'],
      ['trades/8/close', '{"size": 10}', 400, '/api/trades/8/close: unknown body fields size (a close takes {"amount": K}, or no body for the whole trade)'],
      ['stop', `{"pad": "${'x'.repeat(5000)}"}`, 413, 'the body is over 4096 bytes'],
    ];
    for (const [p, body, status, error] of bad) {
      const r = await post(p, body);
      expect([p, r.status, String(r.json().error).slice(0, error.length)]).toEqual([p, status, error]);
    }
    expect(acted).toEqual([]);
  });

  test('the page, its script and its style need no token, carry no account data, and come with a strict CSP', async () => {
    for (const [p, type] of [['', 'text/html'], ['dashboard.js', 'text/javascript'], ['dashboard.css', 'text/css']] as const) {
      const r = await request(`${server.url}${p}`);
      expect(r.status).toBe(200);
      expect(r.headers['content-type']).toContain(type);
      expect(r.headers['content-security-policy']).toBe(DASHBOARD_CSP);
      expect(r.text).not.toContain('8123456');
      expect(r.text).not.toMatch(/https?:\/\//);
    }
    // the script as the browser gets it parses (an escape lost in its template literal would not)
    expect(() => new Function(DASHBOARD_JS)).not.toThrow();
    expect(DASHBOARD_CSP).toContain("script-src 'self'");
    expect(DASHBOARD_CSP).not.toContain('unsafe');
  });

  test('the equity curve /api/pnl carries is thinned to some 600 points, its first and last kept, in order; a short one is whole', async () => {
    // A week of a point a minute, equity going up and down.
    const points = Array.from({ length: 10_001 }, (_, i) => ({ ts: Date.UTC(2026, 10, 16) + i * 60_000, balance: 50_000, equity: 50_000 + 100 * Math.sin(i / 50) }));
    const long = await startControlServer({ host: '127.0.0.1', port: 0, token: TOKEN_A, source: { ...SOURCE, view: () => ({ ...VIEW, equity: points }) } });
    const short = await startControlServer({ host: '127.0.0.1', port: 0, token: TOKEN_A, source: { ...SOURCE, view: () => ({ ...VIEW, equity: points.slice(0, 3) }) } });
    try {
      const curve = (await request(`${long.url}api/pnl`, { token: TOKEN_A })).json().curve as Array<{ ts: number; equity: number }>;
      expect(curve.length).toBeLessThanOrEqual(600);
      expect(curve.length).toBeGreaterThan(100);
      expect([curve[0], curve[curve.length - 1]]).toEqual([points[0], points[10_000]]);
      expect(curve.every((p, i) => i === 0 || p.ts > curve[i - 1]!.ts)).toBe(true);
      expect((await request(`${short.url}api/pnl`, { token: TOKEN_A })).json().curve).toEqual(points.slice(0, 3));
    } finally {
      await long.close();
      await short.close();
    }
  });

  test('a token from a file or the environment; made on loopback without one; required anywhere else', () => {
    const file = path.join(dir, 'token');
    fs.writeFileSync(file, 'from-the-file-0123456789\nignored\n');
    expect(controlToken('0.0.0.0', file, {})).toEqual({ token: 'from-the-file-0123456789', made: false });
    expect(controlToken('10.0.0.5', undefined, { [CONTROL_TOKEN_ENV]: 'from-the-environment-01' })).toEqual({ token: 'from-the-environment-01', made: false });
    const made = controlToken('127.0.0.1', undefined, {});
    expect(made.made).toBe(true);
    expect(made.token.length).toBeGreaterThanOrEqual(32);
    expect(() => controlToken('0.0.0.0', undefined, {})).toThrow('--control 0.0.0.0: an address that is not loopback needs a token (--control-token-file FILE or RATELIMIT_RUNNER_CONTROL_TOKEN)');
    fs.writeFileSync(file, 'short\n');
    expect(() => controlToken('127.0.0.1', file, {})).toThrow('the token on its first line must be at least 16 characters');
    expect(() => controlToken('127.0.0.1', path.join(dir, 'absent'), {})).toThrow('no such file');
  });
});

/**
 * Holds one trade: opens it at the start and again whenever it has none (a timer every 200 ms),
 * so what stops it re-opening after a flatten is the lock, not the strategy.
 */
const STRATEGY = `module.exports = {
  name: 'one-trade',
  symbols: ['EUR/USD'],
  async onStart(ctx) {
    ctx.setTimer('keep', 200);
    await this.keep(ctx);
  },
  async onTimer(ctx) {
    await this.keep(ctx);
  },
  async keep(ctx) {
    if (ctx.positions().length) return;
    await ctx.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 10 }).catch((e) => ctx.log.info('not opened: ' + e.name + ' ' + (e.rule || '')));
  },
};
`;

describe('a paper run with --control', () => {
  let sim: BrokerSimulator;
  let runner: ChildProcess;
  let stdout = '';
  let stderr = '';
  let exited: Promise<number | null>;
  let url = '';
  let token = '';
  let browser: Browser | undefined;
  beforeAll(async () => {
    if (!fs.existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: install it with \`bash scripts/test-servers.sh\` (Debian package chromium)`);
    sim = await startSim({ tickIntervalMs: 50 });
    const file = path.join(dir, 'one-trade.js');
    fs.writeFileSync(file, STRATEGY);
    runner = spawn(process.execPath, [CLI, 'paper', file, '--url', sim.url, '--token', TOKEN, '--control', '127.0.0.1:0', '--max-position', '50', '--journal', path.join(dir, 'journal'), '--report', path.join(dir, 'report'), '--quiet'], {
      env: freshRunnerEnv(),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    runner.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
    runner.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    exited = new Promise((resolve) => runner.once('exit', (code) => resolve(code)));
    await waitFor(() => /control: (http:\/\/\S+\/)#token=(\S+)/.test(stdout) || runner.exitCode !== null, 'the runner to print its control address', 20_000);
    const m = /control: (http:\/\/\S+\/)#token=(\S+)/.exec(stdout);
    if (!m) throw new Error(`no control address; stdout: ${stdout}\nstderr: ${stderr}`);
    [, url, token] = m as unknown as [string, string, string];
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
  }, 60_000);
  afterAll(async () => {
    await browser?.close();
    if (runner.exitCode === null) runner.kill('SIGKILL');
    await sim?.stop();
  });

  const api = async (endpoint: string): Promise<Record<string, unknown>> => {
    const r = await request(`${url}api/${endpoint}`, { token });
    if (r.status !== 200) throw new Error(`/api/${endpoint}: HTTP ${r.status} ${r.text}`);
    return r.json();
  };

  test('the simulated fill shows in the API: the position, the broker budget spent, the journal', async () => {
    await waitFor(async () => ((await api('positions')).positions as unknown[]).length === 1, 'the trade in /api/positions', 20_000);
    const positions = await api('positions');
    const [trade] = positions.positions as Array<{ tradeId: string; symbol: string; isBuy: boolean; amount: number }>;
    expect(trade).toMatchObject({ symbol: 'EUR/USD', isBuy: true, amount: 10 });
    expect(sim.engine.trades.has(trade!.tradeId)).toBe(true);
    const status = await api('status');
    expect(status).toMatchObject({ mode: 'paper', strategy: 'one-trade', phase: 'running', connection: { state: 'connected' } });
    const budget = (await api('budget')) as { limits: Array<{ what: string; limit: string; remaining: number }>; sent: Array<{ endpoint: string; sent: number }> };
    expect(budget.sent.find((u) => u.endpoint === 'open_trade')?.sent).toBe(1);
    // The bundled limits: the snapshot's get_model OpenPosition is a token bucket of 45 an hour, burst 5.
    expect(budget.limits.find((l) => l.what === 'get_model OpenPosition')).toMatchObject({ limit: '45/HOUR', remaining: 4 });
    // the strategy's timer writes to the journal all along: its size as read before and after the answer
    const journalFile = path.join(dir, 'journal', 'journal.jsonl');
    const sizeBefore = fs.statSync(journalFile).size;
    const journal = await api('journal');
    const sizeAfter = fs.statSync(journalFile).size;
    expect(journal.file).toBe(journalFile);
    expect(journal.bytes).toBeGreaterThanOrEqual(sizeBefore);
    expect(journal.bytes).toBeLessThanOrEqual(sizeAfter);
    expect(await api('protections')).toEqual({ limits: { maxPosition: 50 }, rules: {}, locks: [] });
    const pnl = await api('pnl');
    expect(pnl).toMatchObject({ currency: 'USD', realised: 0 });
  }, 30_000);

  test('the page shows the run within a refresh, under its CSP, loading nothing from elsewhere', async () => {
    const page = await browser!.newPage({ viewport: { width: 1280, height: 900 } });
    const requests: string[] = [];
    const messages: string[] = [];
    page.on('request', (r) => requests.push(r.url()));
    page.on('console', (m) => messages.push(`${m.type()}: ${m.text()}`));
    page.on('pageerror', (e) => messages.push(`pageerror: ${e.message}`));
    const res = await page.goto(`${url}#token=${token}`);
    expect(res?.headers()['content-security-policy']).toBe(DASHBOARD_CSP);
    await page.waitForSelector('body[data-refreshed]', { timeout: 10_000 });
    const cells = await page.$$eval('#positions tr td', (tds) => tds.map((td) => (td.textContent ?? '').trim()));
    expect(cells.slice(1, 4)).toEqual(['EUR/USD', 'buy', '10']);
    expect(await page.textContent('#connection')).toMatch(/^connected since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC/);
    expect(await page.textContent('#balance')).toMatch(/^\d+\.\d\d USD$/);
    expect(await page.textContent('#title')).toContain('one-trade · paper');
    expect(await page.textContent('#protections')).toBe('Limits: maximum position (K, per symbol and side) 50. No lock on new entries.');
    fs.mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: path.join(ARTIFACTS, 'runner-dashboard.png'), fullPage: true });
    expect(requests.every((r) => r.startsWith(url))).toBe(true);
    expect(messages).toEqual([]);
    // Without the token the page asks for it and shows nothing of the run.
    const bare = await browser!.newPage();
    await bare.goto(url);
    await bare.waitForSelector('#login:not([hidden])');
    expect(await bare.isHidden('#run')).toBe(true);
    await bare.close();
    await page.close();
  }, 30_000);

  test('a cut broker connection shows as disconnected, then as reconnected and reconciled', async () => {
    // The reconnect's snapshot waits 1.5 s: the outage stays long enough to be seen.
    sim.faults.slowResponses('/trading/get_model', 1500, 1);
    expect(sim.faults.disconnect(TOKEN)).toBeGreaterThan(0);
    await waitFor(async () => ((await api('status')).connection as { state: string }).state === 'disconnected', 'the status to say disconnected', 10_000);
    await waitFor(
      async () => {
        const c = (await api('status')).connection as { state: string; lastReconnect?: unknown };
        return c.state === 'connected' && c.lastReconnect !== undefined;
      },
      'the status to say reconnected and reconciled',
      20_000,
    );
    const status = await api('status');
    expect((status.connection as { lastReconnect: { closed: number; opened: number } }).lastReconnect).toMatchObject({ closed: 0, opened: 0 });
    expect((status.recent as Array<{ level: string; message: string }>).some((n) => n.level === 'warn' && n.message.startsWith('broker connection lost'))).toBe(true);
    // The position is still there, reconciled.
    expect(((await api('positions')).positions as unknown[]).length).toBe(1);
  }, 40_000);

  test('flatten from the page (a second click): the broker flat, the journal says so, and the strategy cannot open again', async () => {
    const page = await browser!.newPage({ viewport: { width: 1280, height: 900 } });
    await page.goto(`${url}#token=${token}`);
    await page.waitForSelector('body[data-refreshed]', { timeout: 10_000 });
    await page.click('#flatten');
    expect(await page.textContent('#flatten')).toBe('Click again to flatten');
    expect(sim.engine.snapshot(TOKEN, 'OpenPosition').length).toBe(1); // one click sends nothing
    await page.click('#flatten');
    await waitFor(async () => /^flatten: flat/.test((await page.textContent('#action-result')) ?? ''), 'the page to say flat', 10_000);
    expect(sim.engine.snapshot(TOKEN, 'OpenPosition')).toEqual([]);
    const journal = path.join(dir, 'journal', 'journal.jsonl');
    expect(fs.readFileSync(journal, 'utf8').split('\n').filter((l) => l.includes('"k":"control"')).map((l) => JSON.parse(l).action)).toEqual(['flatten']);
    // The timer keeps trying (its intents count as decisions) and every try is refused before the broker.
    const opened = sim.requestCounts()['/trading/open_trade'];
    const decisions = (await api('status')).decisions as number;
    await waitFor(async () => ((await api('status')).decisions as number) >= decisions + 3, 'the strategy to try again three times', 10_000);
    expect(sim.requestCounts()['/trading/open_trade']).toBe(opened);
    expect(((await api('protections')).locks as Array<{ rule: string }>).map((l) => l.rule)).toEqual(['flattened']);
    await waitFor(async () => ((await page.textContent('#locks')) ?? '').startsWith('flattened: flattened by the operator'), 'the page to show the lock', 5_000);
    expect(await page.isDisabled('#pause')).toBe(true);
    expect(await page.isEnabled('#resume')).toBe(true);
    await page.close();
  }, 30_000);

  test('stop through the API ends the run as SIGTERM does: onStop, the report, exit 0, the control port closed', async () => {
    const r = await request(`${url}api/stop`, { token, method: 'POST' });
    expect([r.status, r.json().message]).toEqual([200, 'the run is stopping (onStop, the report, exit 0)']);
    expect(await exited).toBe(0);
    await expect(request(`${url}api/status`, { token })).rejects.toThrow();
    const lines = fs.readFileSync(path.join(dir, 'journal', 'journal.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as { k: string; action?: string });
    expect(lines.filter((l) => l.k === 'control').map((l) => l.action)).toEqual(['flatten', 'stop']);
    expect(lines.some((l) => l.k === 'stop')).toBe(true);
    expect(fs.existsSync(path.join(dir, 'report.json'))).toBe(true);
  }, 30_000);
});
