/**
 * The console of the debug port: `GET /` from a browser (Accept: text/html) answers this page;
 * curl and other clients keep the text listing. Self-contained: the page, its script and its style
 * come from this port (no CDN, nothing else fetched), and every answer carries a strict
 * Content-Security-Policy (same-origin script, style and fetches only; no inline script, no eval,
 * no frames, no forms). The script reads the JSON pages every 5 s (/debug/limits a page of 100
 * rules at a time, filtered on the server, so 10,000 rules cost one page) and writes every value
 * with textContent, never as HTML.
 */

export const CONSOLE_CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

export const CONSOLE_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>ratelimit console</title>
<link rel="stylesheet" href="/console.css">
</head>
<body>
<header>
  <h1>ratelimit</h1>
  <span id="status" class="status">loading…</span>
  <span id="updated" class="muted"></span>
  <nav><a href="/stats">/stats</a> <a href="/rlconfig">/rlconfig</a> <a href="/debug/rlqs">/debug/rlqs</a></nav>
</header>
<main>
  <section id="service-section">
    <h2>Service</h2>
    <dl id="service"></dl>
  </section>
  <section id="limits-section">
    <h2>Limits <span class="muted">(current window of each limit; denials: over-limit hits per second, 30 s steps, last 15 minutes)</span></h2>
    <div class="controls">
      <input id="search" type="search" placeholder="filter by rule key or name" aria-label="filter limits">
      <button id="prev" type="button">‹ previous</button>
      <span id="page" class="muted"></span>
      <button id="next" type="button">next ›</button>
    </div>
    <table>
      <thead><tr><th>rule</th><th>limit</th><th>busiest key (window)</th><th>utilisation</th><th>keys / over limit (window)</th><th>denials/s, 15 min</th></tr></thead>
      <tbody id="limits"></tbody>
    </table>
  </section>
  <section id="hot-section">
    <h2>Hot keys <span class="muted">(hits in the last minute, over all limits<span id="hot-note"></span>)</span></h2>
    <table>
      <thead><tr><th>rule</th><th>key</th><th>hits</th><th>over limit</th><th>remaining</th></tr></thead>
      <tbody id="hotkeys"></tbody>
    </table>
  </section>
  <section id="denials-section">
    <h2>Recent denials <span class="muted">(newest first)</span></h2>
    <table>
      <thead><tr><th>time (UTC)</th><th>rule</th><th>descriptor</th><th>limit</th><th>via</th><th>caller</th></tr></thead>
      <tbody id="denials"></tbody>
    </table>
  </section>
  <section id="history-section">
    <h2>Config history</h2>
    <ol id="history"></ol>
  </section>
  <section id="candidates-section">
    <h2>Candidate limits <span class="muted">(since each was loaded)</span></h2>
    <table>
      <thead><tr><th>rule</th><th>enforced</th><th>candidate</th><th>calls</th><th>would deny</th><th>peak utilisation</th></tr></thead>
      <tbody id="candidates"></tbody>
    </table>
  </section>
  <section id="rlqs-section">
    <h2>RLQS</h2>
    <pre id="rlqs"></pre>
  </section>
</main>
<script src="/console.js"></script>
</body>
</html>
`;

export const CONSOLE_CSS = `
:root { font: 14px/1.4 system-ui, sans-serif; color: #1d2330; background: #f6f7f9; }
body { margin: 0; }
header { display: flex; gap: 1em; align-items: baseline; padding: .6em 1.2em; background: #1d2330; color: #fff; flex-wrap: wrap; }
header h1 { font-size: 1.2em; margin: 0; }
header nav { margin-left: auto; }
header a { color: #9cc3ff; margin-left: .8em; }
main { padding: .5em 1.2em 2em; max-width: 1400px; }
section { background: #fff; border: 1px solid #dde1e8; border-radius: 6px; margin: .8em 0; padding: .4em .9em .8em; overflow-x: auto; }
h2 { font-size: 1em; margin: .4em 0 .6em; }
.muted { color: #6b7385; font-weight: normal; }
header .muted { color: #b9c0cf; }
.status { padding: .1em .6em; border-radius: 1em; background: #6b7385; }
.status.ok { background: #1e7d3a; }
.status.bad { background: #b3261e; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: .25em .6em; border-bottom: 1px solid #eef0f4; white-space: nowrap; }
th { font-weight: 600; color: #4a5266; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.bar { display: inline-block; width: 120px; height: .7em; background: #e6e9ef; border-radius: 3px; vertical-align: middle; margin-right: .5em; position: relative; overflow: hidden; }
.bar > span { position: absolute; left: 0; top: 0; bottom: 0; background: #3a7bd5; }
.bar.warn > span { background: #e08a00; }
.bar.over > span { background: #b3261e; }
svg.spark { vertical-align: middle; }
svg.spark polyline { fill: none; stroke: #b3261e; stroke-width: 1.5; }
svg.spark.quiet polyline { stroke: #c4c9d4; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: .2em 1.2em; margin: 0; }
dt { color: #4a5266; }
dd { margin: 0; }
.controls { display: flex; gap: .6em; align-items: center; margin-bottom: .5em; }
.controls input { flex: 0 1 22em; padding: .25em .5em; }
ol { margin: 0; padding-left: 1.4em; }
li { margin: .2em 0; }
pre { margin: 0; max-height: 16em; overflow: auto; font-size: .9em; }
`;

export const CONSOLE_JS = `'use strict';
(function () {
  var REFRESH_MS = 5000;
  var PAGE = 100;
  var state = { offset: 0, q: '', total: 0 };
  var $ = function (id) { return document.getElementById(id); };

  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }
  function link(href, text) { var a = el('a', text); a.href = href; return a; }
  function row(cells) {
    var tr = document.createElement('tr');
    cells.forEach(function (c) {
      if (c instanceof Node) { var td = document.createElement('td'); td.appendChild(c); tr.appendChild(td); }
      else if (typeof c === 'number') tr.appendChild(el('td', c, 'num'));
      else tr.appendChild(el('td', c));
    });
    return tr;
  }
  function fill(id, rows, empty, columns) {
    var body = $(id);
    body.textContent = '';
    if (rows.length === 0) { var tr = document.createElement('tr'); var td = el('td', empty, 'muted'); td.colSpan = columns; tr.appendChild(td); body.appendChild(tr); return; }
    rows.forEach(function (r) { body.appendChild(r); });
  }
  function pct(x) { return x === null || x === undefined ? '—' : (100 * x).toFixed(x < 0.1 ? 1 : 0) + ' %'; }
  function unit(u) { return String(u).toLowerCase(); }

  function bar(ratio) {
    var b = el('span', undefined, 'bar' + (ratio >= 1 ? ' over' : ratio >= 0.9 ? ' warn' : ''));
    var fillEl = document.createElement('span');
    fillEl.style.width = Math.min(100, Math.max(0, 100 * (ratio || 0))) + '%';
    b.appendChild(fillEl);
    return b;
  }
  function spark(counts, periodSeconds) {
    var NS = 'http://www.w3.org/2000/svg';
    var w = 120, h = 22;
    var svg = document.createElementNS(NS, 'svg');
    var rates = counts.map(function (c) { return c / periodSeconds; });
    var max = Math.max.apply(null, rates.concat([0]));
    svg.setAttribute('class', max > 0 ? 'spark' : 'spark quiet');
    svg.setAttribute('width', String(w));
    svg.setAttribute('height', String(h));
    var pts = rates.map(function (r, i) {
      var x = (i / Math.max(1, rates.length - 1)) * (w - 2) + 1;
      var y = h - 2 - (max > 0 ? (r / max) * (h - 4) : 0);
      return x.toFixed(1) + ',' + y.toFixed(1);
    });
    var line = document.createElementNS(NS, 'polyline');
    line.setAttribute('points', pts.join(' '));
    svg.appendChild(line);
    var title = document.createElementNS(NS, 'title');
    var last = rates.length > 0 ? rates[rates.length - 1] : 0;
    title.textContent = 'peak ' + max.toFixed(2) + '/s, last ' + last.toFixed(2) + '/s';
    svg.appendChild(title);
    var wrap = el('span');
    wrap.appendChild(svg);
    wrap.appendChild(el('span', ' ' + max.toFixed(2) + '/s peak', 'muted'));
    return wrap;
  }

  function get(path) {
    return fetch(path, { headers: { Accept: 'application/json' } }).then(function (res) {
      if (!res.ok) return res.text().then(function (t) { throw new Error(path + ': ' + res.status + ' ' + t.trim()); });
      return path.indexOf('/debug/') === 0 && path.indexOf('/debug/rlqs') !== 0 ? res.json() : res.text();
    });
  }

  var hotByRule = {};
  function renderLimits(page) {
    state.total = page.total;
    var period = page.denial_period_seconds || 30;
    $('page').textContent = (page.total === 0 ? 'no limit' : (page.offset + 1) + '–' + (page.offset + page.limits.length) + ' of ' + page.total) + (page.headroom ? ' — headroom ' + page.headroom : '');
    $('prev').disabled = page.offset === 0;
    $('next').disabled = page.next_offset === undefined;
    fill('limits', page.limits.map(function (l) {
      var hot = hotByRule[l.domain + ' ' + l.rule];
      var name = l.name ? l.rule + ' (' + l.name + ')' : l.rule;
      var target = hot ? '/debug/explain?domain=' + encodeURIComponent(l.domain) + '&descriptors=' + encodeURIComponent(hot) : '/debug/hotkeys?domain=' + encodeURIComponent(l.domain) + '&rule=' + encodeURIComponent(l.rule);
      var util = el('span');
      util.appendChild(bar(l.utilization));
      util.appendChild(el('span', pct(l.utilization)));
      var tr = row([link(target, name), l.requests_per_unit + ' / ' + unit(l.unit) + (l.algorithm ? ' (' + l.algorithm + ')' : ''), l.window_used, util, l.window_keys + ' / ' + l.window_keys_over_limit, spark(l.over_limit_hits_per_period, period)]);
      tr.dataset.rule = l.rule;
      return tr;
    }), state.q ? 'no limit matches' : 'no limit loaded', 6);
  }

  function renderHot(page) {
    hotByRule = {};
    $('hot-note').textContent = page.sample_one_in > 1 ? '; estimated from 1 counted call in ' + page.sample_one_in + ', weighted ' + page.sample_one_in + ' (HOT_KEYS_SAMPLE_ONE_IN)' : '';
    (page.minute || []).forEach(function (e) { var k = e.domain + ' ' + e.rule; if (!hotByRule[k] && e.entries) hotByRule[k] = e.entries; });
    fill('hotkeys', (page.minute || []).map(function (e) {
      var key = e.entries !== undefined ? e.entries : '(hidden)';
      var cell = e.entries !== undefined ? link('/debug/explain?domain=' + encodeURIComponent(e.domain) + '&descriptors=' + encodeURIComponent(e.entries), key) : key;
      return row([e.rule, cell, e.hits, e.over_limit_hits, e.remaining]);
    }), 'no key seen in the last minute', 5);
  }

  function renderDenials(page) {
    var list = page.denials || [];
    fill('denials', list.map(function (d) {
      var desc = d.descriptor ? d.descriptor.map(function (e) { return e.key + '=' + e.value; }).join(', ') : d.descriptor_omitted;
      return row([String(d.time).replace('T', ' ').replace('Z', ''), d.rule, desc, d.limit ? d.limit.requests_per_unit + ' / ' + unit(d.limit.unit) : '', d.transport, d.caller || '']);
    }), 'no denial recorded', 6);
  }

  function renderHistory(page) {
    var ol = $('history');
    ol.textContent = '';
    var loads = page.history || [];
    if (loads.length === 0) { ol.appendChild(el('li', 'no load yet', 'muted')); return; }
    loads.forEach(function (l) {
      var li = el('li');
      var head = l.time + ' — ' + l.outcome + (l.version ? ' version ' + l.version : '');
      if (l.diff) head += ': ' + l.diff.added + ' added, ' + l.diff.removed + ' removed, ' + l.diff.changed + ' changed';
      if (l.error) head += ': ' + l.error;
      li.appendChild(el('span', head));
      if (l.diff && l.diff.limits && l.diff.limits.length > 0) {
        var ul = el('ul');
        l.diff.limits.slice(0, 20).forEach(function (c) {
          var text = c.change + ' ' + c.rule;
          if (c.old && c.new) text += ': ' + c.old.requests_per_unit + '/' + unit(c.old.unit) + ' → ' + c.new.requests_per_unit + '/' + unit(c.new.unit);
          else if (c.new) text += ': ' + c.new.requests_per_unit + '/' + unit(c.new.unit);
          else if (c.old) text += ' (was ' + c.old.requests_per_unit + '/' + unit(c.old.unit) + ')';
          ul.appendChild(el('li', text, 'change'));
        });
        li.appendChild(ul);
      }
      ol.appendChild(li);
    });
  }

  function renderCandidates(page) {
    fill('candidates', (page.candidates || []).map(function (c) {
      return row([c.rule, c.enforced.requests_per_unit + ' / ' + unit(c.enforced.unit), c.candidate.requests_per_unit + ' / ' + unit(c.candidate.unit), c.calls, c.would_deny, pct(c.peak_utilization)]);
    }), 'no candidate limit loaded', 6);
  }

  function stat(text, name) {
    var m = new RegExp('^' + name.replace(/\\./g, '\\\\.') + ': (\\\\S+)$', 'm').exec(text);
    return m ? Number(m[1]) : undefined;
  }
  function renderService(text) {
    var dl = $('service');
    dl.textContent = '';
    var rules = stat(text, 'ratelimit.config.rules');
    var version = /^ratelimit\\.config\\.info\\.__version=([0-9a-f]+): 1$/m.exec(text);
    var store = stat(text, 'ratelimit.redis_pool.cx_active') !== undefined ? 'redis' : /^ratelimit\\.memcache\\./m.test(text) ? 'memcache' : stat(text, 'ratelimit.memory.keys') !== undefined ? 'memory' : 'unknown';
    var circuits = (stat(text, 'ratelimit.redis.circuit_open') || 0) + (stat(text, 'ratelimit.memcache.circuit_open') || 0);
    var workers = stat(text, 'ratelimit.workers.listening');
    var items = [
      ['config', rules === undefined || rules === 0 ? 'no rule loaded' : rules + ' limits in ' + stat(text, 'ratelimit.config.domains') + ' domains' + (version ? ', version ' + version[1] : '')],
      ['counter store', store + (store === 'memory' ? ' (' + stat(text, 'ratelimit.memory.keys') + ' live counters)' : '')],
      ['store circuit', store === 'memory' ? 'none (in process)' : circuits > 0 ? circuits + ' open: requests with keys there get BACKEND_FAILURE_MODE' : 'closed'],
      ['decisions failed on the store', String(stat(text, 'ratelimit.service.call.should_rate_limit.redis_error') || 0)],
      ['connections', String(stat(text, 'ratelimit.server.connections.__listener=grpc') || 0) + ' gRPC, ' + String(stat(text, 'ratelimit.server.connections.__listener=http') || 0) + ' HTTP']
    ];
    if (workers !== undefined) items.push(['workers listening', String(workers)]);
    items.forEach(function (it) { dl.appendChild(el('dt', it[0])); dl.appendChild(el('dd', it[1])); });
    var ok = rules !== undefined && rules > 0 && circuits === 0;
    $('status').textContent = ok ? 'serving' : rules === 0 || rules === undefined ? 'no rule loaded' : 'store circuit open';
    $('status').className = 'status ' + (ok ? 'ok' : 'bad');
  }

  function limitsQuery() {
    return '/debug/limits?limit=' + PAGE + '&offset=' + state.offset + (state.q ? '&q=' + encodeURIComponent(state.q) : '');
  }
  function optional(p) { return p.catch(function () { return undefined; }); }

  var timer;
  function refresh() {
    clearTimeout(timer);
    Promise.all([
      get('/stats'),
      optional(get('/debug/hotkeys?k=10')),
      get(limitsQuery()),
      optional(get('/debug/denials?limit=20')),
      optional(get('/debug/config-history?limit=10')),
      optional(get('/debug/candidates?limit=20')),
      optional(get('/debug/rlqs'))
    ]).then(function (r) {
      renderService(r[0]);
      if (r[1]) renderHot(r[1]);
      renderLimits(r[2]);
      if (r[3]) renderDenials(r[3]);
      if (r[4]) renderHistory(r[4]);
      if (r[5]) renderCandidates(r[5]);
      $('rlqs').textContent = r[6] || '';
      $('updated').textContent = 'updated ' + new Date().toISOString().slice(11, 19) + ' UTC, every ' + REFRESH_MS / 1000 + ' s';
      document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || '0') + 1);
    }).catch(function (err) {
      $('status').textContent = String(err.message || err);
      $('status').className = 'status bad';
    }).then(function () { timer = setTimeout(refresh, REFRESH_MS); });
  }

  var typing;
  $('search').addEventListener('input', function () {
    clearTimeout(typing);
    typing = setTimeout(function () { state.q = $('search').value.trim(); state.offset = 0; refresh(); }, 200);
  });
  $('prev').addEventListener('click', function () { state.offset = Math.max(0, state.offset - PAGE); refresh(); });
  $('next').addEventListener('click', function () { state.offset += PAGE; refresh(); });
  refresh();
})();
`;
