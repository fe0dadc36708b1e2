/**
 * Moving-average crossover, the typed source. Run it as is (`ratelimit-runner backtest
 * examples/strategies/ma-crossover.ts …` transpiles it when the `typescript` package is
 * installed) or compile it: `npx tsc ma-crossover.ts --module commonjs --target es2022`.
 * ma-crossover.js is the same strategy in plain JavaScript.
 *
 * Long when the fast SMA of bid closes crosses above the slow one, short when it crosses below;
 * always in the market after the first cross, with a protective stop in pips.
 */
import type { Bar, Strategy, StrategyContext } from '../../src/trading/runner/strategy';

interface Params {
  fast: number;
  slow: number;
  amount: number;
  stopPips: number;
}

const sma = (xs: number[]) => xs.reduce((s, x) => s + x, 0) / xs.length;

const strategy: Strategy<Params> = {
  name: 'ma-crossover',
  symbols: ['EUR/USD'],
  params: { fast: 5, slow: 20, amount: 10, stopPips: 50 },
  // The bars of history onBar needs before its first decision: `slow` (a larger --param slow
  // needs a larger warmup; `ratelimit-runner lookahead` says when the results depend on more).
  warmup: 20,

  onStart(ctx) {
    ctx.log.info('ma-crossover starting', { ...ctx.params });
  },

  async onBar(ctx: StrategyContext<Params>, bar: Bar) {
    const { fast, slow, amount, stopPips } = ctx.params;
    const bars = ctx.candles(bar.symbol, bar.timeframe, slow + 1);
    if (bars.length < slow + 1) return;
    const closes = bars.map((b) => b.bidClose);
    const prevFast = sma(closes.slice(-fast - 1, -1));
    const prevSlow = sma(closes.slice(0, -1));
    const nowFast = sma(closes.slice(-fast));
    const nowSlow = sma(closes.slice(-slow));
    const up = prevFast <= prevSlow && nowFast > nowSlow;
    const down = prevFast >= prevSlow && nowFast < nowSlow;
    if (!up && !down) return;
    await ctx.closeAll(bar.symbol);
    await ctx.openTrade({ symbol: bar.symbol, isBuy: up, amount, stop: -stopPips, isInPips: true });
  },

  onTrade(ctx, t) {
    if (t.kind === 'closed') ctx.log.info('trade closed', { tradeId: t.tradeId, pips: t.plPips, pl: t.pl, reason: t.reason });
  },

  async onStop(ctx) {
    await ctx.closeAll();
  },

  // Paper/live: what the strategy keeps between hooks, for a resume from the journal's
  // checkpoint. Its moving averages are read from ctx.candles, which the checkpoint holds, so
  // there is nothing to keep; the hooks still say so, and let the journal be cut to checkpoints.
  saveState() {
    return null;
  },
  restoreState() {},
};

export default strategy;
