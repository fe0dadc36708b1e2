/**
 * The debug port's console in a real browser (Debian's chromium driven by playwright-core, which
 * downloads no browser): known traffic over /json and gRPC, then the page as a person opens it.
 * The numbers in its tables equal the traffic; a reload's diff and a new denial appear within a
 * refresh; the page sends its Content-Security-Policy, loads nothing from elsewhere and breaks no
 * rule of it; curl still gets the text listing; 10,000 rules render their first page within a
 * second and the search finds one. A screenshot is saved in test-artifacts/ to look at.
 */
import fs from 'node:fs';
import path from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { baseEnv, callGrpc, descriptor, grpcClient, httpGet, httpPost, manyDescriptors, ROOT, runtimeDir, type Service, startService } from '../e2e/harness';
import { startRedis } from '../support/redis';
import { inOneWindow, waitFor } from '../support/wait';

const CHROMIUM = process.env.CHROMIUM_BIN ?? '/usr/bin/chromium';
const ARTIFACTS = path.join(ROOT, 'test-artifacts');

const CONFIG = `
domain: con
descriptors:
  - key: user
    rate_limit: {name: per-user, unit: minute, requests_per_unit: 3}
    candidate: {unit: minute, requests_per_unit: 2}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 1000}
`;
const MORE = `${CONFIG}  - key: team\n    rate_limit: {unit: hour, requests_per_unit: 50}\n`;

let browser: Browser;
beforeAll(async () => {
  if (!fs.existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: install it with \`bash scripts/test-servers.sh\` (Debian package chromium)`);
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
}, 60_000);
afterAll(async () => {
  await browser?.close();
});

/** Opens the console; every request the page makes and every console message are recorded. */
async function open(svc: Service): Promise<{ page: Page; requests: string[]; messages: string[]; csp: string | undefined; openedMs: number; receivedBytes: number }> {
  const page = await browser.newPage({ viewport: { width: 1366, height: 900 } });
  const requests: string[] = [];
  const messages: string[] = [];
  page.on('request', (r) => requests.push(r.url()));
  page.on('console', (m) => messages.push(`${m.type()}: ${m.text()}`));
  page.on('pageerror', (e) => messages.push(`pageerror: ${e.message}`));
  const sizes: Array<Promise<number>> = [];
  page.on('response', (r) => sizes.push(r.body().then((b) => b.length, () => 0)));
  const t0 = Date.now();
  const res = await page.goto(`http://${svc.debug}/`);
  // The first refresh has rendered every table (a selector: the page's CSP refuses an evaluated string).
  await page.waitForSelector('body[data-refreshed]', { timeout: 20_000 });
  const openedMs = Date.now() - t0;
  const bytes = await Promise.all(sizes);
  return { page, requests, messages, csp: res?.headers()['content-security-policy'], openedMs, receivedBytes: bytes.reduce((a, b) => a + b, 0) };
}

/** The text of each cell of the rows of a table body. */
const rows = (page: Page, id: string): Promise<string[][]> =>
  page.$$eval(`#${id} tr`, (trs) => trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => (td.textContent ?? '').trim())));

describe('the console on the debug port', () => {
  let svc: Service;
  let dir: ReturnType<typeof runtimeDir>;
  beforeAll(async () => {
    dir = runtimeDir({ 'con.yaml': CONFIG });
    svc = await startService({ ...baseEnv(dir.root), HOT_KEYS_SAMPLE_ONE_IN: '1' });
  });
  afterAll(async () => {
    if (svc !== undefined) expect(await svc.stop()).toBe(0);
    fs.rmSync(dir.base, { recursive: true, force: true });
  });

  test('shows the traffic, a reload\'s diff and a new denial, under its own CSP, loading nothing from elsewhere', async () => {
    await inOneWindow(60_000, 25_000);
    // alice: 5 calls over /json against 3 a minute (2 denied); bob: 2 over gRPC; /api 4 times.
    for (let i = 0; i < 5; i++) await httpPost(svc.http, '/json', JSON.stringify({ domain: 'con', descriptors: [{ entries: [{ key: 'user', value: 'alice' }] }] }));
    const client = grpcClient(svc.grpc);
    try {
      for (let i = 0; i < 2; i++) await callGrpc(client, { domain: 'con', descriptors: [descriptor('user', 'bob')] });
      for (let i = 0; i < 4; i++) await callGrpc(client, { domain: 'con', descriptors: [descriptor('path', '/api')] });
    } finally {
      client.close();
    }
    // curl keeps the listing.
    const listing = await httpGet(svc.debug, '/');
    expect(listing.body).toContain('/debug/limits: every loaded limit');

    const { page, requests, messages, csp } = await open(svc);
    try {
      expect(csp).toBe("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
      const limits = await rows(page, 'limits');
      // rule, limit, busiest key, utilisation, keys / over, denials.
      // In /rlconfig order.
      expect(limits.map((r) => r.slice(0, 5))).toEqual([
        ['con.path', '1000 / minute', '4', '0.4 %', '1 / 0'],
        ['con.user (per-user)', '3 / minute', '5', '167 %', '2 / 1'],
      ]);
      // 2 over-limit hits in one 30-second period: 0.07 a second at the peak.
      expect(limits[1]![5]).toMatch(/ 0\.07\/s peak$/);
      // The rule's row links to the explain of its busiest key.
      expect(await page.$eval('#limits tr:nth-child(2) a', (a) => a.getAttribute('href'))).toBe('/debug/explain?domain=con&descriptors=user%3Dalice');
      const hot = await rows(page, 'hotkeys');
      expect(hot.slice(0, 3).map((r) => r.slice(0, 4))).toEqual([
        ['con.user', 'user=alice', '5', '2'],
        ['con.path', 'path=/api', '4', '0'],
        ['con.user', 'user=bob', '2', '0'],
      ]);
      const denials = await rows(page, 'denials');
      expect(denials.map((r) => r.slice(1, 5))).toEqual([
        ['con.user', 'user=alice', '3 / minute', 'http'],
        ['con.user', 'user=alice', '3 / minute', 'http'],
      ]);
      // alice's counts 3, 4 and 5 are over the candidate's 2; her peak 5 is 250 % of it.
    expect(await rows(page, 'candidates')).toEqual([['con.user', '3 / minute', '2 / minute', '7', '3', '250 %']]);
      expect(await page.$eval('#history', (ol) => ol.textContent)).toMatch(/loaded version [0-9a-f]{12}: 2 added, 0 removed, 0 changed/);
      expect(await page.$eval('#service', (dl) => dl.textContent)).toContain('2 limits in 1 domains');
      expect(await page.$eval('#status', (s) => s.textContent)).toBe('serving');

      // A reload that adds a rule, and a new denial: each on the page within a refresh (5 s).
      const tmp = path.join(dir.base, 'con.yaml.next');
      fs.writeFileSync(tmp, MORE);
      fs.renameSync(tmp, path.join(dir.configDir, 'con.yaml'));
      await waitFor(async () => /1 added, 0 removed, 0 changed/.test((await page.$eval('#history', (ol) => ol.textContent)) ?? ''), 'the reload on the page', 15_000);
      expect(await page.$eval('#history li:first-child', (li) => li.textContent)).toContain('added con.team: 50/hour');
      await httpPost(svc.http, '/json', JSON.stringify({ domain: 'con', descriptors: [{ entries: [{ key: 'user', value: 'carol' }] }, { entries: [{ key: 'user', value: 'alice' }] }] }));
      const refreshed = Number(await page.$eval('body', (b) => b.dataset['refreshed']));
      await waitFor(async () => (await rows(page, 'denials')).length === 3, 'the new denial on the page', 15_000);
      expect(Number(await page.$eval('body', (b) => b.dataset['refreshed']))).toBeLessThanOrEqual(refreshed + 2);

      // Nothing from elsewhere, nothing refused by the CSP, no script error.
      for (const url of requests) expect(url.startsWith(`http://${svc.debug}/`)).toBe(true);
      expect(messages.filter((m) => /Content Security Policy|pageerror|error:/i.test(m))).toEqual([]);
      fs.mkdirSync(ARTIFACTS, { recursive: true });
      await page.screenshot({ path: path.join(ARTIFACTS, 'console.png'), fullPage: true });
    } finally {
      await page.close();
    }
  }, 90_000);
});

test('10,000 rules: the first page renders within a second, and the search finds one', async () => {
  const dir = runtimeDir({ 'big.yaml': manyDescriptors('big', 10_000) });
  const svc = await startService(baseEnv(dir.root));
  try {
    const { page, openedMs, receivedBytes } = await open(svc);
    try {
      // What keeps the first page fast whatever the rules: it fetches one page of limits, not all
      // 10,000 (a bound on bytes, which load cannot move); the time is bounded loosely, since a
      // loaded 2-core machine can stall a browser for seconds.
      expect(receivedBytes).toBeLessThan(200_000);
      expect(openedMs).toBeLessThan(5000);
      expect(await page.$eval('#page', (s) => s.textContent)).toBe('1–100 of 10000');
      expect(await page.$$eval('#limits tr', (trs) => trs.length)).toBe(100);
      await page.fill('#search', 'c9999');
      await waitFor(async () => (await page.$eval('#page', (s) => s.textContent)) === '1–1 of 1', 'the search', 10_000);
      expect((await rows(page, 'limits'))[0]!.slice(0, 2)).toEqual(['big.client_c9999', '10000 / second']);
    } finally {
      await page.close();
    }
  } finally {
    expect(await svc.stop()).toBe(0);
    fs.rmSync(dir.base, { recursive: true, force: true });
  }
}, 60_000);

test('in worker mode on Redis the primary\'s console shows the workers\' merged figures', async () => {
  const redis = await startRedis();
  const dir = runtimeDir({ 'con.yaml': CONFIG });
  const svc = await startService({ ...baseEnv(dir.root), BACKEND_TYPE: 'redis', REDIS_SOCKET_TYPE: 'tcp', REDIS_URL: redis.address, WORKERS: '2', HOT_KEYS_SAMPLE_ONE_IN: '1' });
  try {
    await inOneWindow(60_000, 10_000);
    // Fresh connections: node:cluster hands them to the workers in turn, so both count alice.
    for (let i = 0; i < 4; i++) await httpPost(svc.http, '/json', JSON.stringify({ domain: 'con', descriptors: [{ entries: [{ key: 'user', value: 'alice' }] }] }));
    const { page, messages } = await open(svc);
    try {
      const service = await page.$eval('#service', (dl) => dl.textContent);
      expect(service).toContain('counter store' + 'redis');
      expect(service).toContain('workers listening2');
      expect(await page.$eval('#status', (s) => s.textContent)).toBe('serving');
      expect((await rows(page, 'limits')).map((r) => r.slice(0, 5))).toEqual([
        ['con.path', '1000 / minute', '0', '0.0 %', '0 / 0'],
        ['con.user (per-user)', '3 / minute', '4', '133 %', '1 / 1'],
      ]);
      expect((await rows(page, 'denials')).map((r) => r[2])).toEqual(['user=alice']);
      expect(messages.filter((m) => /Content Security Policy|pageerror|error:/i.test(m))).toEqual([]);
    } finally {
      await page.close();
    }
  } finally {
    expect(await svc.stop()).toBe(0);
    await redis.stop();
    fs.rmSync(dir.base, { recursive: true, force: true });
  }
}, 60_000);

test('bad input to /debug/limits is a 400 with a reason; with headroom off the page says so', async () => {
  const dir = runtimeDir({ 'con.yaml': CONFIG });
  const svc = await startService(baseEnv(dir.root));
  const off = await startService({ ...baseEnv(dir.root), HEADROOM_ENABLED: 'false' });
  try {
    const page = JSON.parse((await httpGet(off.debug, '/debug/limits')).body) as { headroom?: string; total: number };
    expect(page).toMatchObject({ total: 2, headroom: 'off (HEADROOM_ENABLED=false): no window figures nor denials' });
    expect(JSON.parse((await httpGet(svc.debug, '/debug/limits')).body)).not.toHaveProperty('headroom');
    for (const [q, reason] of [
      ['?limit=0', 'limit must be an integer from 1 to 1000, not "0"'],
      ['?offset=-1', 'offset must be an integer from 0 to 999999999, not "-1"'],
      ['?domain=nope', 'domain "nope" has no loaded limits'],
      ['?x=1', 'unknown parameter "x": limits takes domain, q, offset and limit'],
      [`?q=${'a'.repeat(201)}`, 'q must be at most 200 characters'],
    ] as const) {
      expect(await httpGet(svc.debug, `/debug/limits${q}`)).toEqual({ status: 400, body: reason + '\n' });
    }
  } finally {
    expect(await svc.stop()).toBe(0);
    expect(await off.stop()).toBe(0);
    fs.rmSync(dir.base, { recursive: true, force: true });
  }
});
