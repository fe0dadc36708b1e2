/**
 * The denial ring's contract: it keeps the last N, holds no descriptor longer than 1,024
 * characters, names the limit that denied (one of `rate_limits:` too), shows request values in
 * rule keys as DEBUG_VALUES says, and its line cap writes the left-out count when the second ends
 * even when no denial follows.
 */
import { Code, type DescriptorStatus } from '../../src/core/rls';
import { Caller } from '../../src/core/store';
import { ManualClock } from '../../src/platform/clock';
import { DenialRing, MAX_KEPT_CHARS, parseDenialsQuery } from '../../src/telemetry/denials';
import { load, desc } from '../config/helpers';

const CONFIG = `
domain: d
descriptors:
  - key: user
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: two
    rate_limits:
      - {unit: second, requests_per_unit: 10}
      - {unit: hour, requests_per_unit: 100}
`;

function over(limit: DescriptorStatus['currentLimit']): DescriptorStatus {
  return { code: Code.OVER_LIMIT, currentLimit: limit, limitRemaining: 0, durationUntilReset: 7 };
}

function ring(size: number, privacy: 'plain' | 'hash' | 'hide' = 'plain', logPerSecond = 0) {
  const clock = new ManualClock(1_700_000_000_000);
  const lines: string[] = [];
  const r = new DenialRing({ size, clock, logPerSecond, privacy, logger: { info: (m, f) => lines.push(f === undefined ? m : `${m} ${JSON.stringify(f)}`) } });
  return { r, clock, lines };
}

const page = (r: DenialRing, query = '') => {
  const q = parseDenialsQuery(new URLSearchParams(query));
  if (typeof q === 'string') throw new Error(q);
  return JSON.parse(r.page(q)) as { recorded: number; kept: number; denials: Array<Record<string, unknown>>; next_before?: number };
};

describe('DenialRing', () => {
  const config = load(CONFIG);
  const user = (v: string) => desc(['user', v]);

  test('keeps the last N, newest first, and pages through them', () => {
    const { r } = ring(3);
    for (let i = 1; i <= 5; i++) {
      const d = user(`u${i}`);
      const rule = config.getLimit('d', d)!;
      r.record('d', d, rule, over(rule.limit), 1, Code.OVER_LIMIT, 'grpc', new Caller('10.0.0.1'));
    }
    const p = page(r);
    expect(p).toMatchObject({ recorded: 5, kept: 3 });
    expect(p.denials.map((x) => x['seq'])).toEqual([5, 4, 3]);
    expect(p.denials[0]).toMatchObject({ rule: 'd.user_u5', descriptor: [{ key: 'user', value: 'u5' }], reset_seconds: 7, caller: '10.0.0.1' });
    expect(page(r, '?limit=2').next_before).toBe(4);
    expect(page(r, '?limit=2&before=4').denials.map((x) => x['seq'])).toEqual([3]);
    // Older than what is kept: nothing.
    expect(page(r, '?before=3').denials).toEqual([]);
  });

  test('a descriptor longer than 1,024 characters is kept without its entries', () => {
    const { r } = ring(2);
    const big = user('x'.repeat(MAX_KEPT_CHARS));
    const rule = config.getLimit('d', big)!;
    r.record('d', big, rule, over(rule.limit), 1, Code.OVER_LIMIT, 'http', undefined);
    const [d] = page(r).denials;
    expect(d!['descriptor']).toBeUndefined();
    expect(d!['descriptor_omitted']).toBe('1 entries, 1028 characters (more than 1024 are not kept)');
    expect(d!['caller']).toBeUndefined();
  });

  test('names the limit of a rate_limits list that denied', () => {
    const { r } = ring(2);
    const d = desc(['two', 'v']);
    const rule = config.getLimit('d', d)!;
    r.record('d', d, rule, over(rule.more![0]!.limit), 1, Code.OVER_LIMIT, 'grpc', undefined);
    r.record('d', d, rule, over(rule.limit), 1, Code.OK, 'grpc', undefined);
    expect(page(r).denials.map((x) => [x['rule'], x['limit'], x['answered']])).toEqual([
      ['d.two', { requests_per_unit: 10, unit: 'SECOND' }, 'OK'],
      ['d.two.limit_2', { requests_per_unit: 100, unit: 'HOUR' }, 'OVER_LIMIT'],
    ]);
  });

  test('DEBUG_VALUES hides a request value in a request-specific rule key too', () => {
    for (const privacy of ['hash', 'hide'] as const) {
      const { r } = ring(2, privacy);
      const d = user('alice@example.com');
      const rule = config.getLimit('d', d)!;
      expect(rule.fullKey).toBe('d.user_alice@example.com');
      r.record('d', d, rule, over(rule.limit), 1, Code.OVER_LIMIT, 'grpc', undefined);
      const text = JSON.stringify(page(r));
      expect(text).not.toContain('alice');
      const shown = page(r).denials[0]!;
      expect(shown['rule']).toBe(`d.user_${(shown['descriptor'] as Array<{ value: string }>)[0]!.value}`);
    }
  });

  test('the left-out line is written when its second ends, with no further denial', () => {
    const { r, clock, lines } = ring(10, 'plain', 1);
    const d = user('u');
    const rule = config.getLimit('d', d)!;
    for (let i = 0; i < 4; i++) r.record('d', d, rule, over(rule.limit), 1, Code.OVER_LIMIT, '', undefined);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain('"transport":"in-process"');
    clock.advance(1000);
    expect(lines).toEqual([lines[0], 'over limit: 3 more denials in that second were not logged (DEBUG_DENIALS_LOG_PER_SECOND=1)']);
    r.record('d', d, rule, over(rule.limit), 1, Code.OVER_LIMIT, '', undefined);
    expect(lines).toHaveLength(3);
  });
});
