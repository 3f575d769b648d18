// peercrawl dashboard: polls /api/<page> every REFRESH ms and redraws tables and charts.
// Every number shown is a `count` of the JSON (the numbers of `peercrawl stats --json`).
'use strict';

const REFRESH = 5000;
const body = document.body;
const page = body.dataset.page;
const arg = body.dataset.arg;
const charts = {};
let worldReady = null;

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'text') e.textContent = v; else if (v !== null && v !== undefined) e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k);
  return e;
}

function chart(id) {
  const node = document.getElementById(id);
  if (!node) return null;
  if (!charts[id]) charts[id] = echarts.init(node, null, { renderer: 'canvas' });
  return charts[id];
}

function month() { const s = document.getElementById('month'); return s ? s.value : ''; }

function apiPath() {
  if (page === 'overview') return '/api/overview';
  if (page === 'months') return '/api/months';
  if (page === 'country') return '/api/country/' + encodeURIComponent(arg);
  if (page === 'torrent') return '/api/torrent/' + arg;
  return '/api/operators';
}

function query(extra) {
  const q = new URLSearchParams(extra || {});
  if (month()) q.set('month', month());
  const s = q.toString();
  return s ? '?' + s : '';
}

function setCsvLinks() {
  for (const a of document.querySelectorAll('a.csv')) {
    a.href = apiPath() + query({ format: 'csv', table: a.dataset.table });
    a.setAttribute('download', '');
  }
}

function fillMonths(months) {
  const sel = document.getElementById('month');
  if (!sel || !months) return;
  const have = Array.from(sel.options).map(o => o.value).slice(1).join(',');
  if (have === months.join(',')) return;
  const keep = sel.value;
  sel.length = 1;
  for (const m of months) sel.append(el('option', { value: m, text: m }));
  sel.value = months.includes(keep) ? keep : '';
}

// A table of counters: one row per {metric, count}; data-metric/data-count carry the raw values.
// `named`: a torrents table, whose rows carry the torrent's name (a third party's: set as text).
// The row of peers no place holds (`unplaced`: true, metric null) has no link and no data-metric.
function countTable(name, rows, label, link, named) {
  const tb = document.querySelector(`table[data-table="${name}"] tbody`);
  if (!tb) return;
  tb.replaceChildren(...rows.map(r => {
    if (r.unplaced) {
      return el('tr', { class: 'unplaced', 'data-unplaced': '', 'data-count': r.count },
        el('td', { class: 'name', text: r.name, title: 'peers GeoIP could not place here' }),
        el('td', { class: 'count', text: String(r.count) }));
    }
    const text = label(r);
    const href = link ? link(r) : null;
    const cell = el('td', { class: 'name' }, href ? el('a', { href, text }) : text);
    const title = named ? [el('td', { class: 'torrent-name', text: r.name || '–' })] : [];
    return el('tr', { 'data-metric': r.metric, 'data-count': r.count }, cell, ...title,
      el('td', { class: 'count', text: String(r.count) }));
  }));
}

// The rows a chart draws: the places, without the unplaced row the tables end with.
function placed(rows) { return rows.filter(r => !r.unplaced); }

function rowsTable(name, rows, cols) {
  const tb = document.querySelector(`table[data-table="${name}"] tbody`);
  if (!tb) return;
  tb.replaceChildren(...rows.map(r => el('tr', {}, ...cols.map(c => {
    const v = typeof c === 'function' ? c(r) : r[c];
    if (v instanceof Node) return el('td', {}, v);
    return el('td', { 'data-key': typeof c === 'string' ? c : null, text: v === null || v === undefined ? '–' : String(v) });
  }))));
}

function figures(id, pairs) {
  const dl = document.getElementById(id);
  dl.replaceChildren(...pairs.map(([k, label, v]) => el('div', { 'data-key': k },
    el('dt', { text: label }), el('dd', { text: v === null || v === undefined ? '–' : String(v) }))));
}

function bar(id, rows, label, color) {
  const c = chart(id);
  if (!c) return;
  const top = rows.slice(0, 15).reverse();
  c.setOption({
    animation: false, grid: { left: 8, right: 24, top: 8, bottom: 8, containLabel: true },
    tooltip: {}, xAxis: { type: 'value', minInterval: 1 },
    yAxis: { type: 'category', data: top.map(label) },
    series: [{ type: 'bar', data: top.map(r => r.count), itemStyle: { color: color || '#3a6fd8' } }],
  }, true);
}

function monthLine(id, rows) {
  const c = chart(id);
  if (!c) return;
  c.setOption({
    animation: false, grid: { left: 8, right: 24, top: 16, bottom: 8, containLabel: true }, tooltip: { trigger: 'axis' },
    xAxis: { type: 'category', data: rows.map(r => r.month) }, yAxis: { type: 'value', minInterval: 1 },
    series: [{ type: 'line', name: 'users', data: rows.map(r => r.count), symbolSize: 6 }],
  }, true);
}

function loadWorld() {
  if (!worldReady) {
    worldReady = fetch(body.dataset.world).then(r => r.json()).then(g => echarts.registerMap('world', g));
  }
  return worldReady;
}

async function renderOverview(d) {
  const countries = d.tables.countries;
  countTable('countries', countries, r => r.name, r => '/country/' + encodeURIComponent(r.country));
  countTable('torrents', d.tables.torrents, r => r.info_hash, r => '/torrent/' + r.info_hash, true);
  document.getElementById('empty-hint').hidden = countries.length > 0 || d.tables.torrents.length > 0;
  const unmapped = placed(countries).filter(r => !r.map_code).map(r => `${r.name} (${r.count})`);
  document.getElementById('unmapped').textContent = unmapped.length ? 'Not on the map: ' + unmapped.join(', ') : '';
  await loadWorld();
  const byCode = {};
  for (const r of countries) if (r.map_code) {
    const b = byCode[r.map_code] || (byCode[r.map_code] = { name: r.map_code, value: 0, labels: [] });
    b.value += r.count; b.labels.push(r.name);
  }
  const data = Object.values(byCode);
  const max = Math.max(1, ...data.map(x => x.value));
  const c = chart('map');
  c.setOption({
    animation: false,
    // A formatter's string is HTML to ECharts: the names in it are escaped (ECharts' own tooltips escape theirs).
    tooltip: { trigger: 'item', formatter: p => echarts.format.encodeHTML(
      p.data ? `${p.data.labels.join(', ')}: ${p.data.value}` : `${p.name}: 0`) },
    visualMap: { min: 0, max, left: 8, bottom: 8, text: ['users', ''], calculable: true,
      inRange: { color: ['#dbe7ff', '#3a6fd8', '#0b2a6b'] } },
    series: [{ type: 'map', map: 'world', roam: true, data, nameProperty: 'name', layoutCenter: ['55%', '50%'], layoutSize: '150%',
      itemStyle: { areaColor: '#eceff3', borderColor: '#fff' }, emphasis: { label: { show: false } } }],
  }, true);
  if (!c._peercrawlClick) {
    c.on('click', p => { if (p.data) location.href = '/country/' + encodeURIComponent(countries.find(r => r.map_code === p.data.name).country); });
    c._peercrawlClick = true;
  }
}

function renderMonths(d) {
  const rows = d.tables.months;
  countTable('months', rows.filter(r => r.metric), r => `${r.month} ${r.country}`);
  const tb = document.querySelector('table[data-table="months"] tbody');
  const months = [...new Set(rows.map(r => r.month))];
  const c = chart('months-chart');
  c.setOption({
    animation: false, tooltip: { trigger: 'axis' }, legend: { type: 'scroll', top: 0 },
    grid: { left: 8, right: 24, top: 40, bottom: 8, containLabel: true },
    xAxis: { type: 'category', data: months }, yAxis: { type: 'value', minInterval: 1 },
    series: d.countries.map(name => ({ type: 'line', name, data: months.map(m => (rows.find(r => r.month === m && r.country === name) || {}).count || 0) })),
  }, true);
  return tb;
}

function renderCountry(d) {
  // the country as the counters name it (the address may say `germany` or `DE`)
  document.getElementById('country-name').textContent = d.country;
  document.title = 'peercrawl · ' + d.country;
  document.getElementById('users').textContent = String(d.users);
  document.getElementById('users').dataset.metric = d.metric || '';
  countTable('cities', d.tables.cities, r => r.name);
  countTable('postcodes', d.tables.postcodes, r => r.name);
  bar('cities-chart', placed(d.tables.cities), r => r.name);
  bar('postcodes-chart', placed(d.tables.postcodes), r => r.name, '#2a9d8f');
  monthLine('months-chart', d.tables.months);
}

function renderTorrent(d) {
  const t = d.torrent || {};
  // the name its add was handed (magnet dn=, .torrent info.name): text, never markup
  const named = document.getElementById('torrent-name');
  named.textContent = t.name || 'no name known';
  named.className = t.name ? 'torrent-name' : 'torrent-name muted';
  document.title = 'peercrawl · ' + (t.name || arg);
  const when = x => x ? new Date(x * 1000).toISOString().replace('.000', '') : null;
  figures('torrent', [['users', 'users', d.users], ['state', 'state', t.state], ['score', 'score', t.score],
    ['seeders', 'seeders', t.seeders], ['leechers', 'leechers', t.leechers], ['visits', 'visits', t.visits],
    ['failed_visits', 'failed visits', t.failed_visits], ['peers_last_visit', 'peers last visit', t.peers_last_visit],
    // coverage (docs/metrics.md): the last visit's count against the swarm size its sources reported
    ['reported_last_visit', 'swarm size reported', t.reported_last_visit],
    ['coverage', 'coverage', t.coverage === null || t.coverage === undefined ? null : (100 * t.coverage).toFixed(1) + ' %'],
    ['counted_30_days', 'IPs counted, 30 days', t.counted_30_days],
    ['last_visit', 'last visit (UTC)', when(t.last_visit)], ['trackers', 'trackers', (t.trackers || []).length],
    ...(t.quarantine ? [['quarantine', 'quarantined (add --readmit)', t.quarantine.message]] : [])]);
  countTable('countries', d.tables.countries, r => r.name, r => '/country/' + encodeURIComponent(r.country));
  countTable('cities', d.tables.cities, r => `${r.name}, ${r.country}`);
  bar('countries-chart', placed(d.tables.countries), r => r.name);
  monthLine('months-chart', d.tables.months);
  visitLines('visits-chart', d.tables.visits);
  rowsTable('visits', d.tables.visits.slice().reverse(), ['at', 'score', 'peers', 'seeders', 'leechers']);
}

function visitLines(id, rows) {
  // Score on the left axis, peers, seeders and leechers on the right, one point per visit.
  const c = chart(id);
  if (!c) return;
  const line = (name, key, axis, color) => ({ type: 'line', name, yAxisIndex: axis, data: rows.map(r => r[key]),
    connectNulls: false, itemStyle: color ? { color } : undefined });
  c.setOption({
    animation: false, tooltip: { trigger: 'axis' }, legend: { top: 0 },
    grid: { left: 8, right: 8, top: 32, bottom: 8, containLabel: true },
    xAxis: { type: 'category', data: rows.map(r => r.at.slice(5, 16).replace('T', ' ')) },
    yAxis: [{ type: 'value', name: 'score' }, { type: 'value', name: 'peers', minInterval: 1 }],
    series: [line('score', 'score', 0, '#0b2a6b'), line('peers', 'peers', 1, '#2a9d8f'),
      line('seeders', 'seeders', 1, '#e9c46a'), line('leechers', 'leechers', 1, '#e76f51')],
  }, true);
}

function renderOperators(d) {
  const s = d.status, cap = s.capacity || {};
  const mb = b => (b / 1048576).toFixed(1) + ' MB';
  const pct = x => x === null || x === undefined ? '-' : (100 * x).toFixed(1) + ' %';
  figures('figures', [['tracked', 'tracked', s.tracked], ['ready', 'ready', s.ready], ['cooling', 'cooling', s.cooling],
    ['in_flight', 'in flight', s.in_flight], ['quarantined', 'quarantined', s.quarantined], ['evicted', 'evicted', s.evicted],
    ['at_risk', 'at risk', s.at_risk],
    ['queue_latency_s', 'queue latency (s)', s.queue_latency_s], ['visits_last_hour', 'visits last hour', s.visits_last_hour],
    ['failed_visits_last_hour', 'failed visits last hour', s.failed_visits_last_hour],
    ['workers', 'live workers', s.workers.length], ['workers_needed', 'workers needed', cap.workers_needed],
    ['visits_needed_per_hour', 'visits needed / h', cap.visits_needed_per_hour],
    ['outbox', 'StatHat outbox (stats)', d.outbox.enabled ? d.outbox.stats_waiting + d.outbox.stats_in_flight : 'off'],
    ['geo_errors', 'GeoIP read errors', s.geo_errors ? s.geo_errors.errors : 0],
    ['claim_serve_rate', 'claim serve rate (1 h)', pct(s.rates.claim_serve_rate)],
    ['reclaim_rate', 'reclaim rate (1 h)', pct(s.rates.reclaim_rate)],
    ['round_trip', 'visit round trip p50 / p95 (s)', s.rates.visit_round_trip_s.visits
      ? `${s.rates.visit_round_trip_s.p50} / ${s.rates.visit_round_trip_s.p95}` : '-'],
    // how much of the swarms the last hour's visits counted (status --json coverage; docs/metrics.md)
    ['coverage', 'coverage (1 h): counted / reported', s.coverage.coverage === null ? '-'
      : `${pct(s.coverage.coverage)} (${s.coverage.counted} of ${s.coverage.reported})`],
    // what the visits cost the sources (status --json costs): the last hour, and the last minute's rate
    ['tracker_requests_per_second', 'tracker requests / s (1 h)', s.costs.per_second.total],
    ['tracker_requests_last_minute', 'tracker requests / s (last minute)', s.costs.last_minute.per_second.total],
    ['dht_lookups_per_second', 'DHT lookups / s (1 h)', s.costs.dht_lookups_per_second],
    ['requests_per_visit', 'tracker requests / visit (1 h)', s.costs.requests_per_visit],
    ['counted_per_1000_requests', 'pairs counted / 1,000 requests (1 h)', s.costs.counted_per_1000_requests]].concat(s.announce_cap
    ? [['announce_cap', 'tracker requests / s (cap)',
      `${s.announce_cap.sent_per_second}${s.announce_cap.per_second ? ' of ' + s.announce_cap.per_second : ''}`]] : []));
  const alert = (id, text) => { const n = document.getElementById(id); n.hidden = !text; n.textContent = text || ''; };
  alert('outage', s.outage);
  alert('eviction', s.eviction_warning);
  const g = s.geo_errors;
  alert('announce-cap', s.announce_cap && s.announce_cap.limiting
    ? 'the announce cap is the limit: visits wait for it; more workers would not visit faster' : null);
  alert('geo-error', g && g.last ? `last GeoIP read error${g.at ? ' at ' + new Date(g.at * 1000).toISOString() : ''}: ${g.last}` : null);
  const states = d.tables.states;
  chart('states-chart').setOption({
    animation: false, tooltip: {}, grid: { left: 8, right: 8, top: 8, bottom: 8, containLabel: true },
    xAxis: { type: 'category', data: states.map(r => r.state) }, yAxis: { type: 'value', minInterval: 1 },
    series: [{ type: 'bar', data: states.map(r => r.count), itemStyle: { color: '#3a6fd8' } }],
  }, true);
  const m = d.tables.minutes;
  chart('minutes-chart').setOption({
    animation: false, tooltip: { trigger: 'axis' }, legend: { top: 0 },
    grid: { left: 8, right: 24, top: 32, bottom: 8, containLabel: true },
    xAxis: { type: 'category', data: m.map(r => r.minute.slice(11, 16)) }, yAxis: { type: 'value', minInterval: 1 },
    series: [{ type: 'line', name: 'visits', data: m.map(r => r.visits), showSymbol: false },
      { type: 'line', name: 'failed', data: m.map(r => r.failed), showSymbol: false, itemStyle: { color: '#b00020' } }],
  }, true);
  rowsTable('workers', d.tables.workers, ['id', 'concurrency', 'auto', 'in_flight', 'visits', 'visits_per_hour', 'failing', 'autoscale']);
  rowsTable('trackers', d.tables.trackers, ['tracker', 'answers', 'failures', 'refusals', 'last_refusal',
    'backing_off', 'until', 'peers_cut', 'learned_cap', 'last_used']);
  rowsTable('costs', d.tables.costs, ['tracker', 'connect_per_s', 'scrape_per_s', 'announce_per_s',
    'withdrawal_per_s', 'total_per_s', 'requests']);
  rowsTable('lanes', d.tables.lanes, ['lane', 'ready', 'cooling', 'in_flight', 'quarantined', 'evicted']);
  document.getElementById('at-risk-panel').hidden = !s.at_risk;
  rowsTable('at_risk', d.tables.at_risk, [r => el('a', { href: '/torrent/' + r.info_hash, text: r.info_hash }), 'stage', 'since', 'name']);
  document.getElementById('quarantined-panel').hidden = !s.quarantined;
  rowsTable('quarantined', d.tables.quarantined, [r => el('a', { href: '/torrent/' + r.info_hash, text: r.info_hash }), 'at', 'reason', 'name']);
  const rc = s.redis || {};
  document.getElementById('redis-title').textContent = rc.cluster
    ? `Redis cluster: ${rc.healthy ? 'healthy' : 'NOT healthy'} (${rc.state}, ${rc.slots_ok} of 16384 slots served)` : 'Redis';
  rowsTable('redis', d.redis, ['node', 'role', 'keys', r => mb(r.used_memory_bytes), r => mb(r.used_memory_peak_bytes),
    r => r.maxmemory_bytes ? mb(r.maxmemory_bytes) : 'none', 'ops_per_s']);
}

const RENDER = { overview: renderOverview, months: renderMonths, country: renderCountry, torrent: renderTorrent, operators: renderOperators };

let latest = 0;

async function refresh() {
  const stamp = document.getElementById('updated');
  const seq = ++latest;
  const asked = month();
  try {
    const r = await fetch(apiPath() + query(), { credentials: 'same-origin', cache: 'no-store' });
    // Errors come as plain text (400, 403...) or as JSON {"error"} (503): shown as text either way.
    const json = (r.headers.get('Content-Type') || '').startsWith('application/json');
    const d = json ? await r.json() : { error: (await r.text()).trim() };
    if (seq !== latest) return;  // a newer request (another period) is on its way: drop this answer
    if (!r.ok) throw new Error(d.error || r.statusText);
    fillMonths(d.months);
    await RENDER[page](d);
    setCsvLinks();
    stamp.textContent = 'updated ' + new Date().toLocaleTimeString();
    stamp.className = 'muted';
    body.dataset.month = asked;
    body.dataset.rendered = String(Number(body.dataset.rendered || 0) + 1);
  } catch (e) {
    stamp.textContent = 'update failed: ' + e.message;
    stamp.className = 'alert';
  }
}

function start() {
  const sel = document.getElementById('month');
  const params = new URLSearchParams(location.search);
  if (sel) {
    if (params.get('month')) { sel.append(el('option', { value: params.get('month'), text: params.get('month') })); sel.value = params.get('month'); }
    sel.addEventListener('change', () => {
      const q = new URLSearchParams(location.search);
      if (sel.value) q.set('month', sel.value); else q.delete('month');
      history.replaceState(null, '', location.pathname + (q.toString() ? '?' + q : ''));
      refresh();
    });
  }
  window.addEventListener('resize', () => Object.values(charts).forEach(c => c.resize()));
  refresh();
  setInterval(refresh, REFRESH);
}

start();
