#!/usr/bin/env node
// Backtest throughput: candles per second for a trivial strategy (one SMA over bid closes, a
// position flip on every cross), over N synthetic m1 candles. Needs `npx tsc -p tsconfig.json`.
//   node bench/runner/backtest.js [candles=1000000] [runs=3]
'use strict';
const path = require('node:path');
const { runBacktest } = require(path.join(__dirname, '../../dist/src/trading/runner/engine/backtest.js'));

const N = Number(process.argv[2] ?? 1_000_000);
const RUNS = Number(process.argv[3] ?? 3);

function candles(n) {
  const out = new Array(n);
  let p = 1.1;
  let s = 1;
  for (let i = 0; i < n; i++) {
    s = (s * 16807) % 2147483647;
    const o = p;
    p = Math.round((p + ((s / 2147483647) - 0.5) * 0.0004) * 1e5) / 1e5;
    const h = Math.max(o, p) + 0.0001;
    const l = Math.min(o, p) - 0.0001;
    out[i] = { ts: 1_700_000_040 + i * 60, bidOpen: o, bidClose: p, bidHigh: h, bidLow: l, askOpen: o + 0.0002, askClose: p + 0.0002, askHigh: h + 0.0002, askLow: l + 0.0002, tickQty: 1 };
  }
  return out;
}

const strategy = {
  name: 'trivial-sma',
  symbols: ['EUR/USD'],
  onStart(ctx) { ctx.state = { sum: 0, q: [], above: undefined }; this.st = ctx.state; },
  onBar(ctx, bar) {
    const st = this.st;
    st.q.push(bar.bidClose); st.sum += bar.bidClose;
    if (st.q.length > 20) st.sum -= st.q.shift();
    if (st.q.length < 20) return;
    const above = bar.bidClose > st.sum / 20;
    if (above === st.above) return;
    st.above = above;
    for (const p of ctx.positions()) ctx.closeTrade(p.tradeId);
    return ctx.openTrade({ symbol: 'EUR/USD', isBuy: above, amount: 10 }).then(() => undefined);
  },
};

(async () => {
  const data = [{ symbol: 'EUR/USD', timeframe: 'm1', candles: candles(N) }];
  const rates = [];
  for (let r = 0; r < RUNS; r++) {
    const t0 = process.hrtime.bigint();
    const res = await runBacktest({ strategy, data, historyLimit: 100 });
    const s = Number(process.hrtime.bigint() - t0) / 1e9;
    rates.push(N / s);
    console.log(`run ${r + 1}: ${N} candles in ${s.toFixed(3)} s = ${Math.round(N / s)} candles/s (${res.trades.length} trades)`);
  }
  rates.sort((a, b) => a - b);
  console.log(`median: ${Math.round(rates[Math.floor(rates.length / 2)])} candles/s (node ${process.version})`);
})();
