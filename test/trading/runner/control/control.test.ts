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
import { DASHBOARD_CSP } from '../../../../src/trading/runner/control/dashboard';
import type { RunView } from '../../../../src/trading/runner/engine/run-view';
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

function request(url: string, opts: { token?: string; method?: string } = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: opts.method ?? 'GET', headers: opts.token ? { Authorization: `Bearer ${opts.token}` } : {} }, (res) => {
      let text = '';
      res.on('data', (d: Buffer) => (text += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json: () => JSON.parse(text) as Record<string, unknown> }));
    });
    req.on('error', reject);
    req.end();
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
  protections: { limits: {}, locks: [] },
  lastCheckpointAt: undefined,
};
const SOURCE: ControlSource = { view: () => VIEW, limits: () => [], budgetUse: () => [], journalFile: () => undefined, notes: () => [] };

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

  test('an unknown endpoint or page is a 404 that says where things are; any method but GET a 405', async () => {
    const unknown = await request(`${server.url}api/flaten`, { token: TOKEN_A });
    expect(unknown.status).toBe(404);
    expect(unknown.json().error).toBe('unknown endpoint /api/flaten; there are /api/status, /api/positions, /api/trades, /api/pnl, /api/budget, /api/protections, /api/journal');
    expect((await request(`${server.url}robots.txt`)).status).toBe(404);
    const post = await request(`${server.url}api/status`, { token: TOKEN_A, method: 'POST' });
    expect(post.status).toBe(405);
    expect(post.headers.allow).toBe('GET, HEAD');
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

/** One trade at the start, then nothing: what the run holds is what the test made it hold. */
const STRATEGY = `module.exports = {
  name: 'one-trade',
  symbols: ['EUR/USD'],
  async onStart(ctx) {
    if (!ctx.positions().length) await ctx.openTrade({ symbol: 'EUR/USD', isBuy: true, amount: 10 });
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
    const journal = await api('journal');
    expect(journal.file).toBe(path.join(dir, 'journal', 'journal.jsonl'));
    expect(journal.bytes).toBe(fs.statSync(path.join(dir, 'journal', 'journal.jsonl')).size);
    expect(await api('protections')).toEqual({ limits: { maxPosition: 50 }, locks: [] });
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

  test('SIGTERM ends the run as always: exit 0, the control port closed', async () => {
    runner.kill('SIGTERM');
    expect(await exited).toBe(0);
    await expect(request(`${url}api/status`, { token })).rejects.toThrow();
  }, 30_000);
});
