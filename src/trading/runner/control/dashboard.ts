/**
 * The dashboard of a run's control port: one page, its script and its style, all served by the
 * port itself (no CDN, nothing else fetched) under a strict Content-Security-Policy (same-origin
 * script, style and fetches only; no inline script, no eval, no frames, no forms). The script
 * takes the token from the URL's fragment (or asks for it), reads the JSON API every second, and
 * writes every value with textContent, never as HTML; the equity curve is an SVG path it draws.
 * Its buttons POST the operator's actions (pause, resume, flatten, stop, close a trade); flatten,
 * stop and a close take a second click within a few seconds, so one slip of the mouse sends nothing.
 */

export const DASHBOARD_CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

export const DASHBOARD_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>ratelimit-runner</title>
<link rel="stylesheet" href="/dashboard.css">
</head>
<body>
<header>
  <h1 id="title">ratelimit-runner</h1>
  <span id="phase" class="badge">loading…</span>
  <span id="connection" class="badge"></span>
  <span id="updated" class="muted"></span>
</header>
<section id="login" hidden>
  <p>This run's control port needs its token (printed by the runner at its start, or the one you gave it).</p>
  <form id="login-form">
    <input id="token" type="password" autocomplete="off" aria-label="token" placeholder="token">
    <button type="submit">Show the run</button>
    <span id="login-error" class="bad"></span>
  </form>
</section>
<main id="run" hidden>
  <section id="controls">
    <button type="button" id="pause">Pause entries</button>
    <button type="button" id="resume">Resume entries</button>
    <button type="button" id="flatten" class="danger">Flatten</button>
    <button type="button" id="stop" class="danger">Stop the run</button>
    <span id="action-result" class="muted"></span>
  </section>
  <section class="cards">
    <div><span class="label">balance</span><span id="balance" class="value"></span></div>
    <div><span class="label">equity</span><span id="equity" class="value"></span></div>
    <div><span class="label">realised P/L</span><span id="realised" class="value"></span></div>
    <div><span class="label">unrealised P/L</span><span id="unrealised" class="value"></span></div>
    <div><span class="label">today's P/L (UTC day)</span><span id="day" class="value"></span></div>
    <div><span class="label">uptime</span><span id="uptime" class="value"></span></div>
  </section>
  <section>
    <h2>Equity</h2>
    <svg id="curve" viewBox="0 0 600 140" preserveAspectRatio="none" role="img" aria-label="equity curve"><path id="curve-path" d=""></path></svg>
    <p id="curve-note" class="muted"></p>
  </section>
  <section>
    <h2>Open positions <span class="muted">(this run's)</span></h2>
    <table><thead><tr><th>trade</th><th>symbol</th><th>side</th><th>amount (K)</th><th>open</th><th>stop</th><th>limit</th><th>P/L</th><th></th></tr></thead><tbody id="positions"></tbody></table>
    <h3>Entry orders</h3>
    <table><thead><tr><th>order</th><th>symbol</th><th>side</th><th>amount (K)</th><th>rate</th></tr></thead><tbody id="orders"></tbody></table>
    <p id="foreign" class="muted"></p>
  </section>
  <section>
    <h2>Closed trades <span class="muted">(newest first)</span></h2>
    <table><thead><tr><th>trade</th><th>symbol</th><th>side</th><th>amount (K)</th><th>open</th><th>close</th><th>reason</th><th>P/L</th></tr></thead><tbody id="closed"></tbody></table>
  </section>
  <section>
    <h2>Broker budget <span class="muted">(as the limiter last answered each limit)</span></h2>
    <table><thead><tr><th>limit of</th><th>limit</th><th>may go (at its answer)</th><th>whole again in</th></tr></thead><tbody id="budget"></tbody></table>
    <h3>Calls sent</h3>
    <table><thead><tr><th>endpoint</th><th>sent</th><th>waited for budget</th><th>expired waiting</th></tr></thead><tbody id="sent"></tbody></table>
  </section>
  <section>
    <h2>Protections</h2>
    <p id="protections"></p>
    <ul id="locks"></ul>
  </section>
  <section>
    <h2>Notifications</h2>
    <ul id="notifications"></ul>
  </section>
  <section>
    <h2>Recent warnings and errors</h2>
    <ul id="notes"></ul>
  </section>
</main>
<script src="/dashboard.js"></script>
</body>
</html>
`;

export const DASHBOARD_CSS = `
body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #1d232a; background: #f6f7f9; }
header { display: flex; gap: 12px; align-items: baseline; padding: 12px 20px; background: #1d232a; color: #fff; flex-wrap: wrap; }
header h1 { font-size: 18px; margin: 0; }
main, #login { padding: 8px 20px 24px; }
section { margin: 16px 0; }
h2 { font-size: 15px; margin: 0 0 6px; }
h3 { font-size: 13px; margin: 10px 0 4px; }
.badge { padding: 1px 8px; border-radius: 10px; background: #4a5560; font-size: 12px; }
.badge.good { background: #217a3c; color: #fff; }
.badge.bad { background: #a82a2a; color: #fff; }
.muted { color: #6b7580; font-weight: normal; }
header .muted { color: #aab3bc; }
.bad { color: #a82a2a; }
.good { color: #217a3c; }
.cards { display: flex; gap: 12px; flex-wrap: wrap; }
.cards div { background: #fff; border: 1px solid #dde1e5; border-radius: 6px; padding: 8px 12px; min-width: 120px; }
.label { display: block; font-size: 12px; color: #6b7580; }
.value { font-size: 18px; font-variant-numeric: tabular-nums; }
table { border-collapse: collapse; background: #fff; border: 1px solid #dde1e5; min-width: 50%; }
th, td { padding: 4px 10px; border-bottom: 1px solid #eef0f2; text-align: left; font-variant-numeric: tabular-nums; }
th { font-size: 12px; color: #6b7580; font-weight: 600; }
td.empty { color: #6b7580; font-style: italic; }
svg { width: 100%; max-width: 900px; height: 140px; background: #fff; border: 1px solid #dde1e5; }
#curve-path { fill: none; stroke: #2563a8; stroke-width: 2; vector-effect: non-scaling-stroke; }
ul { margin: 0; padding-left: 18px; }
input { padding: 4px 8px; min-width: 280px; }
#controls { display: flex; gap: 8px; align-items: center; flex-wrap: wrap; }
button { padding: 4px 12px; border: 1px solid #aab3bc; border-radius: 4px; background: #fff; cursor: pointer; }
button:disabled { color: #aab3bc; cursor: default; }
button.danger { border-color: #a82a2a; color: #a82a2a; }
button.armed { background: #a82a2a; color: #fff; }
td button { padding: 1px 8px; font-size: 12px; }
`;

export const DASHBOARD_JS = `'use strict';
(function () {
  var token = '';
  var refreshes = 0;
  var hash = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (hash) token = decodeURIComponent(hash[1]);
  var $ = function (id) { return document.getElementById(id); };
  var money = function (n) { return typeof n === 'number' ? n.toFixed(2) : '—'; };
  var time = function (ms) { return typeof ms === 'number' ? new Date(ms).toISOString().replace('T', ' ').slice(0, 19) : '—'; };
  var span = function (s) {
    s = Math.max(0, Math.round(s));
    var h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
    return (h ? h + ' h ' : '') + (h || m ? m + ' min ' : '') + (s % 60) + ' s';
  };
  function setNumber(id, n, signed, currency) {
    var el = $(id);
    el.textContent = money(n) + (typeof n === 'number' ? ' ' + currency : '');
    el.className = 'value' + (signed && typeof n === 'number' && n < 0 ? ' bad' : signed && typeof n === 'number' && n > 0 ? ' good' : '');
  }
  function rows(id, list, cells, empty, extra) {
    var body = $(id);
    body.textContent = '';
    if (!list.length) {
      var tr = document.createElement('tr'), td = document.createElement('td');
      td.colSpan = 9; td.className = 'empty'; td.textContent = empty;
      tr.appendChild(td); body.appendChild(tr);
      return;
    }
    list.forEach(function (item) {
      var tr = document.createElement('tr');
      cells(item).forEach(function (c) { var td = document.createElement('td'); td.textContent = c; tr.appendChild(td); });
      if (extra) { var td = document.createElement('td'); extra(item, td); tr.appendChild(td); }
      body.appendChild(tr);
    });
  }
  function items(id, list, text) {
    var ul = $(id);
    ul.textContent = '';
    list.forEach(function (x) { var li = document.createElement('li'); li.textContent = text(x); ul.appendChild(li); });
  }
  function get(path) {
    return fetch('/api/' + path, { headers: { Authorization: 'Bearer ' + token }, cache: 'no-store' }).then(function (r) {
      if (r.status === 401) throw new Error('unauthorized');
      if (!r.ok) throw new Error('/api/' + path + ': HTTP ' + r.status);
      return r.json();
    });
  }
  // An action: POSTed with the token; its answer (what was done, or why not) shown beside the buttons.
  function post(path, label) {
    $('action-result').textContent = label + '…';
    return fetch('/api/' + path, { method: 'POST', headers: { Authorization: 'Bearer ' + token }, cache: 'no-store' }).then(function (r) {
      return r.json().then(function (b) {
        var failed = b.failed && b.failed.length ? ' (' + b.failed.join('; ') + ')' : '';
        $('action-result').textContent = label + ': ' + (r.ok ? b.message : (b.message || b.error || 'HTTP ' + r.status)) + failed;
        $('action-result').className = r.ok ? 'good' : 'bad';
      });
    }).catch(function (e) { $('action-result').textContent = label + ': ' + e.message; $('action-result').className = 'bad'; });
  }
  // A button that acts on its second click within 4 s (the first arms it and says so).
  function twoClicks(button, text, act) {
    var armed;
    button.addEventListener('click', function () {
      if (!armed) {
        button.classList.add('armed');
        button.textContent = 'Click again to ' + text;
        armed = setTimeout(function () { armed = undefined; button.classList.remove('armed'); button.textContent = button.getAttribute('data-label'); }, 4000);
        return;
      }
      clearTimeout(armed); armed = undefined;
      button.classList.remove('armed'); button.textContent = button.getAttribute('data-label');
      act();
    });
    button.setAttribute('data-label', button.textContent);
  }
  var locked = [];
  $('pause').addEventListener('click', function () { post('pause', 'pause'); });
  $('resume').addEventListener('click', function () { post('resume', 'resume'); });
  twoClicks($('flatten'), 'flatten', function () { post('flatten', 'flatten'); });
  twoClicks($('stop'), 'stop the run', function () { post('stop', 'stop'); });
  function closeButton(p, td) {
    var b = document.createElement('button');
    b.type = 'button'; b.textContent = 'Close'; b.setAttribute('data-trade', p.tradeId);
    twoClicks(b, 'close', function () { post('trades/' + encodeURIComponent(p.tradeId) + '/close', 'close ' + p.tradeId); });
    td.appendChild(b);
  }
  function drawCurve(curve, currency) {
    var path = $('curve-path');
    if (curve.length < 2) { path.setAttribute('d', ''); $('curve-note').textContent = curve.length ? 'one point so far' : 'no points yet'; return; }
    var t0 = curve[0].ts, t1 = curve[curve.length - 1].ts, lo = Infinity, hi = -Infinity;
    curve.forEach(function (p) { lo = Math.min(lo, p.equity); hi = Math.max(hi, p.equity); });
    if (hi === lo) { hi += 1; lo -= 1; }
    var d = curve.map(function (p, i) {
      var x = t1 === t0 ? (i / (curve.length - 1)) * 600 : ((p.ts - t0) / (t1 - t0)) * 600;
      var y = 135 - ((p.equity - lo) / (hi - lo)) * 130;
      return (i ? 'L' : 'M') + x.toFixed(1) + ' ' + y.toFixed(1);
    }).join(' ');
    path.setAttribute('d', d);
    $('curve-note').textContent = 'from ' + time(t0) + ' to ' + time(t1) + ' UTC, ' + money(lo) + ' to ' + money(hi) + ' ' + currency;
  }
  var RULE_NAMES = { stopLossGuard: 'stop-loss guard', maxDrawdown: 'maximum drawdown', cooldown: 'cooldown per symbol', dailyLoss: 'daily loss limit' };
  var LIMIT_NAMES = { maxPosition: 'maximum position (K, per symbol and side)', maxDailyLoss: 'daily loss limit', minUsableMarginPct: 'minimum usable margin (% of equity)' };
  function show(status, positions, trades, pnl, budget, protections) {
    $('login').hidden = true;
    $('run').hidden = false;
    document.title = status.strategy + ' (' + status.mode + ')';
    $('title').textContent = status.strategy + ' · ' + status.mode + (status.account ? ' · account ' + status.account : '');
    $('phase').textContent = status.phase;
    var c = status.connection, conn = $('connection');
    conn.textContent = c.state + (c.since ? ' since ' + time(c.since) + ' UTC' : '') + (c.lastReconnect ? ' · reconnected ' + time(c.lastReconnect.at) + ' UTC and reconciled' : '');
    conn.className = 'badge ' + (c.state === 'connected' ? 'good' : c.state === 'disconnected' ? 'bad' : '');
    $('updated').textContent = 'updated ' + time(Date.now()) + ' UTC';
    var cur = pnl.currency;
    setNumber('balance', pnl.balance, false, cur); setNumber('equity', pnl.equity, false, cur);
    setNumber('realised', pnl.realised, true, cur); setNumber('unrealised', pnl.unrealised, true, cur); setNumber('day', pnl.day, true, cur);
    $('uptime').textContent = span(status.uptimeS);
    drawCurve(pnl.curve, cur);
    var side = function (b) { return b ? 'buy' : 'sell'; };
    // the rows are made again at each refresh: a close button armed by a first click is kept as it is
    var armedClose = document.querySelector('#positions button.armed');
    if (!armedClose) rows('positions', positions.positions, function (p) { return [p.tradeId, p.symbol, side(p.isBuy), String(p.amount), String(p.openRate), p.stop ? String(p.stop) : '—', p.limit ? String(p.limit) : '—', money(p.pl)]; }, 'none open', status.phase === 'running' || status.phase === 'ending' ? closeButton : undefined);
    rows('orders', positions.orders, function (o) { return [o.orderId, o.symbol, side(o.isBuy), String(o.amount), String(o.rate)]; }, 'none');
    var f = positions.foreign;
    $('foreign').textContent = f.positions.length || f.orders.length ? 'The account also holds ' + f.positions.length + ' positions and ' + f.orders.length + ' entry orders of others, which this run leaves alone.' : '';
    rows('closed', trades.closed.slice().reverse().slice(0, 50), function (t) { return [t.tradeId, t.symbol, side(t.isBuy), String(t.amount), String(t.openRate), String(t.closeRate), t.reason || '', money(t.pl)]; }, 'none yet');
    rows('budget', budget.limits, function (l) { return [l.what, l.limit, String(l.remaining), typeof l.refillsAt !== 'number' ? '—' : l.refillsAt > Date.now() ? span((l.refillsAt - Date.now()) / 1000) : 'whole now']; }, 'no limited call yet');
    rows('sent', budget.sent, function (u) { return [u.endpoint, String(u.sent), String(u.waited), String(u.expired)]; }, 'no broker call yet');
    items('locks', protections.locks, function (l) { return l.rule + ': ' + l.reason + (typeof l.until === 'number' ? ' (until ' + time(l.until) + ' UTC)' : ''); });
    locked = protections.locks.map(function (l) { return l.rule; });
    var running = status.phase === 'running';
    $('pause').disabled = !running || locked.indexOf('paused') >= 0 || locked.indexOf('flattened') >= 0 || locked.indexOf('stopping') >= 0;
    $('resume').disabled = !running || (locked.indexOf('paused') < 0 && locked.indexOf('flattened') < 0);
    $('flatten').disabled = !(running || status.phase === 'ending');
    $('stop').disabled = status.phase === 'ended' || locked.indexOf('stopping') >= 0;
    var set = Object.keys(protections.limits).filter(function (k) { return protections.limits[k] !== undefined; });
    var rules = Object.keys(protections.rules || {}).map(function (k) { return (RULE_NAMES[k] || k) + ' ' + JSON.stringify(protections.rules[k]); });
    $('protections').textContent = (set.length ? 'Limits: ' + set.map(function (k) { return (LIMIT_NAMES[k] || k) + ' ' + protections.limits[k]; }).join('; ') + '. ' : 'No safety limit set (--max-position, --max-daily-loss, --min-usable-margin-pct). ') +
      (rules.length ? 'Protections: ' + rules.join('; ') + '. ' : '') +
      (protections.locks.length ? 'New entries are locked:' : 'No lock on new entries.');
    items('notifications', status.notifications.length ? status.notifications : ['none (--notify URL sends the run\\'s events as webhooks)'], function (n) {
      return typeof n === 'string' ? n : n.url + ': ' + n.sent + ' sent, ' + n.failed + ' failed, ' + n.dropped + ' dropped, ' + n.queued + ' waiting' + (n.lastError ? ' · last error ' + time(Date.parse(n.lastError.at)) + ' UTC: ' + n.lastError.message : '');
    });
    items('notes', status.recent.slice().reverse(), function (n) { return time(n.at) + ' ' + n.level + ': ' + n.message; });
    if (!status.recent.length) items('notes', ['none'], function (x) { return x; });
    document.body.setAttribute('data-refreshed', String(++refreshes));
  }
  function refresh() {
    if (!token) { $('login').hidden = false; return; }
    Promise.all(['status', 'positions', 'trades', 'pnl', 'budget', 'protections'].map(get)).then(function (r) {
      show(r[0], r[1], r[2], r[3], r[4], r[5]);
      setTimeout(refresh, 1000);
    }, function (e) {
      if (e.message === 'unauthorized') {
        token = '';
        $('run').hidden = true;
        $('login').hidden = false;
        $('login-error').textContent = 'that token is not this run\\'s';
        return;
      }
      $('updated').textContent = 'not answering (' + e.message + '); retrying';
      setTimeout(refresh, 2000);
    });
  }
  // Never submitted (the CSP's form-action 'none' would refuse it): the token stays in the page.
  $('login-form').addEventListener('submit', function (e) {
    e.preventDefault();
    token = $('token').value.trim();
    $('login-error').textContent = '';
    refresh();
  });
  refresh();
})();
`;
