/**
 * QuotaCalls (what both gRPC transports share for StreamRateLimitQuotas) with a transport of the
 * test's own: a report of more than REPORT_PART_USAGES buckets is handled in parts, one turn of
 * the event loop each, each answered as it is handled; the stream is `busy` meanwhile, and
 * `resume()` tells the transport when it may hand over the next message; a budget passed in a
 * part ends the stream once the last part is answered.
 */
import { status } from '@grpc/grpc-js';
import { RateLimitQuotaResponse, RateLimitQuotaUsageReports } from '../../generated/envoy/service/rate_limit_quota/v3/rlqs';
import { ManualClock } from '../../src/platform/clock';
import { quotaBudgets } from '../../src/quota/admission';
import { MemoryDemandStore } from '../../src/quota/demand';
import { QuotaService } from '../../src/quota/quota-service';
import { QuotaCalls, REPORT_PART_USAGES } from '../../src/server/quota-calls';
import { StatsStore } from '../../src/stats/store';
import type { Logger } from '../../src/telemetry/logger';
import { load } from '../config/helpers';
import { waitFor } from '../support/wait';

const quiet: Logger = { debug: () => {}, info: () => {}, warn: () => {}, error: () => {}, enabled: () => false };
const CONFIG = 'domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 100}\n';

function open(streamBuckets = 100_000) {
  const config = load(CONFIG);
  const quota = new QuotaService({ config: () => config, demand: new MemoryDemandStore(), clock: new ManualClock(0), unmatched: { strategy: 'allow-all', ttlSeconds: 5 }, budgets: quotaBudgets({ streamBuckets }) });
  const calls = new QuotaCalls(quota, new StatsStore(), quiet);
  // A tick per turn of the event loop: what turn each response was written in.
  let ticks = 0;
  let ticking = true;
  const tick = (): void => {
    ticks++;
    if (ticking) setImmediate(tick);
  };
  setImmediate(tick);
  const written: Array<{ tick: number; actions: number; first: string }> = [];
  let failed: { code: number; details: string } | undefined;
  let resumed = 0;
  const handle = calls.open(
    {
      write: (frame) => {
        const r = RateLimitQuotaResponse.decode(frame.subarray(5));
        written.push({ tick: ticks, actions: r.bucketAction.length, first: r.bucketAction[0]!.bucketId!.bucket['user']! });
      },
      unread: () => 0,
      fail: (code, details) => (failed = { code, details }),
      reset: () => {},
      resume: () => resumed++,
    },
    undefined,
  );
  const stop = () => {
    ticking = false;
    handle.close();
  };
  return { handle, written, failed: () => failed, resumed: () => resumed, stop };
}

const report = (from: number, to: number): Buffer =>
  Buffer.from(
    RateLimitQuotaUsageReports.encode({
      domain: 'd',
      bucketQuotaUsages: Array.from({ length: to - from }, (_, i) => ({ bucketId: { bucket: { user: `u${from + i}` } }, timeElapsed: { seconds: 0n, nanos: 0 }, numRequestsAllowed: 1n, numRequestsDenied: 0n })),
    }).finish(),
  );

test(`a report of more than ${REPORT_PART_USAGES} buckets is answered in parts, a turn each; busy until its last part, then resume(); a message handed over meanwhile waits its turn`, async () => {
  const c = open();
  try {
    c.handle.message(report(0, 3500));
    expect(c.handle.busy).toBe(true);
    expect(c.written).toHaveLength(1); // the first part at once
    c.handle.message(report(5000, 5001));
    await waitFor(() => !c.handle.busy, 'the last part');
    expect(c.written.map((w) => w.actions)).toEqual([1000, 1000, 1000, 500, 1]);
    expect(c.written.map((w) => w.first)).toEqual(['u0', 'u1000', 'u2000', 'u3000', 'u5000']);
    const ticks = c.written.slice(0, 4).map((w) => w.tick);
    expect(new Set(ticks).size).toBe(4);
    expect(c.resumed()).toBe(1);
    expect(c.failed()).toBeUndefined();
  } finally {
    c.stop();
  }
});

test('a budget passed in one part: the later parts are answered too (denied under a limit), then the stream ends RESOURCE_EXHAUSTED naming it; no resume', async () => {
  const c = open(1500);
  try {
    c.handle.message(report(0, 3500));
    await waitFor(() => c.failed() !== undefined, 'the end of the stream');
    expect(c.written.map((w) => w.actions)).toEqual([1000, 1000, 1000, 500]);
    expect(c.failed()).toEqual({ code: status.RESOURCE_EXHAUSTED, details: 'this stream would track more than 1500 buckets (RLQS_MAX_BUCKETS_PER_STREAM)' });
    expect(c.handle.busy).toBe(false);
    expect(c.resumed()).toBe(0);
  } finally {
    c.stop();
  }
});

test('a bucket id beyond the limits in a later part ends the stream INVALID_ARGUMENT with its index in the whole report', async () => {
  const c = open();
  try {
    const usages = RateLimitQuotaUsageReports.decode(report(0, 1500));
    usages.bucketQuotaUsages[1200]!.bucketId = { bucket: {} };
    c.handle.message(Buffer.from(RateLimitQuotaUsageReports.encode(usages).finish()));
    await waitFor(() => c.failed() !== undefined, 'the end of the stream');
    expect(c.failed()).toEqual({ code: status.INVALID_ARGUMENT, details: 'bucket_quota_usages[1200].bucket_id must hold at least one key/value pair' });
    expect(c.written).toHaveLength(1); // the first part was answered; nothing of the part that failed
  } finally {
    c.stop();
  }
});
