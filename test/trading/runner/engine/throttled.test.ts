/**
 * A 429 reaches the strategy as the broker said it (issue 42, item 3), against the simulator
 * behind a proxy that answers one open_trade with 429 and Retry-After: the strategy's call rejects
 * with FxcmRateLimitError carrying the status and the wait, and the next call of that kind is held
 * by the broker-call budget until then (that only its kind waits: call-budget.test.ts).
 */
import type { Strategy, StrategyContext } from '../../../../src/trading/runner/strategy';
import { waitFor } from '../../../support/wait';
import { simBehindProxy, startProxiedRun } from './proxied-run';

const SYM = 'EUR/USD';

describe("the broker's 429 in a paper run", () => {
  const env = simBehindProxy({ tickIntervalMs: 50 });

  test('the strategy gets FxcmRateLimitError with status 429 and Retry-After; its next open_trade waits that long', async () => {
    const { sim, proxy } = env;
    const seen: { error?: Error & { httpStatus?: number; retryAfterMs?: number }; refusedAt?: number; openedAt?: number } = {};
    const strategy: Strategy<Record<string, unknown>> = {
      name: 'throttled',
      symbols: [SYM],
      async onStart(ctx: StrategyContext<Record<string, unknown>>) {
        await ctx.openTrade({ symbol: SYM, isBuy: true, amount: 10 }).catch((e: Error) => {
          seen.error = e;
          seen.refusedAt = Date.now();
        });
        await ctx.openTrade({ symbol: SYM, isBuy: true, amount: 10 });
        seen.openedAt = Date.now();
      },
    };
    proxy.inject('/trading/open_trade', { status: 429, body: 'Too Many Requests', headers: { 'content-type': 'text/plain', 'retry-after': '2' } });
    await startProxiedRun({ sim, proxy, strategy });
    await waitFor(() => seen.openedAt !== undefined, 'the second open_trade', 15_000);
    expect(seen.error).toMatchObject({ name: 'FxcmRateLimitError', httpStatus: 429, retryAfterMs: 2000 });
    expect(seen.openedAt! - seen.refusedAt!).toBeGreaterThanOrEqual(1900);
    expect(sim.requestCounts()['/trading/open_trade']).toBe(1);
  }, 30_000);
});
