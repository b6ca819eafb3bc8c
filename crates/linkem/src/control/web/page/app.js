// linkem's live page: the topology of a running emulator or lab, each direction of the
// selected link as it runs (throughput against capacity, delay, queue, drops by fate,
// with marks where something changed), and a form that sends a change through the
// control protocol. It reads GET /api/state and /api/history?link=, then the SSE
// stream /api/events (events sample, mark, links). Served under a CSP without inline
// script or style: styles are classes or set through the CSSOM, text goes in as text.
//
// The token comes in the URL fragment (#token=HEX, never sent in a request line), is
// kept in sessionStorage and sent as X-Linkem-Token; without it the form is disabled.
'use strict';

const DIRS = ['a-to-b', 'b-to-a'];
const TOKEN_KEY = 'linkem-token';
const SVG_NS = 'http://www.w3.org/2000/svg';
// Fates in a fixed order and colour; one the page does not know gets a colour by hash.
const FATE_COLOURS = {
  loss: '#d9534f', queue: '#f0ad4e', red: '#8e44ad', aqm: '#8e44ad', corrupt: '#16a085',
  down: '#555555', policy: '#2c7be5', rules: '#2c7be5', burst: '#c0392b',
};
const SPARE_COLOURS = ['#e67e22', '#1abc9c', '#9b59b6', '#34495e', '#7f8c8d', '#b8860b'];

const S = {
  token: null,
  writable: false,
  links: new Map(),    // name -> {words, rules, changes, changed_at_s}
  topo: {nodes: [], links: []},
  marks: [],
  selected: null,
  samples: [],         // the selected link's, oldest first: {t_s, dirs: {DIR: obj}}
  latest: null,        // the last SAMPLE of every link
  intervalMs: 500,
  historyS: 300,
  windowS: 300,
  es: null,
  lastEventMs: 0,
  retryMs: 1000,
  drawPending: false,
  historyLoading: 0,
  topoAspect: 0.5,
};

const $ = (sel, root = document) => root.querySelector(sel);

function el(tag, attrs = {}, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function svg(tag, attrs = {}) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  return e;
}

// ---- formatting ----

function fmtBps(bps) {
  if (bps === null || bps === undefined || !Number.isFinite(bps)) return '–';
  const units = [[1e9, 'Gbit/s'], [1e6, 'Mbit/s'], [1e3, 'kbit/s']];
  for (const [scale, unit] of units) {
    if (Math.abs(bps) >= scale) return `${(bps / scale).toFixed(bps >= 100 * scale ? 0 : 2)} ${unit}`;
  }
  return `${Math.round(bps)} bit/s`;
}

function fmtMs(ms) {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return '–';
  if (ms >= 100) return `${ms.toFixed(0)} ms`;
  if (ms >= 1) return `${ms.toFixed(1)} ms`;
  return `${ms.toFixed(3)} ms`;
}

function fmtPairMs(p50, p99) {
  if (!Number.isFinite(p50) && !Number.isFinite(p99)) return '–';
  const one = (ms) => (Number.isFinite(ms) ? fmtMs(ms).replace(' ms', '') : '–');
  return `${one(p50)} / ${one(p99)} ms`;
}

function fmtNum(v) {
  if (!Number.isFinite(v)) return '–';
  if (Math.abs(v) >= 1e6) return `${(v / 1e6).toFixed(1)}M`;
  if (Math.abs(v) >= 1e3) return `${(v / 1e3).toFixed(1)}k`;
  return Number.isInteger(v) ? String(v) : v.toFixed(1);
}

function fmtBpsShort(v) {
  if (v >= 1e9) return `${+(v / 1e9).toFixed(1)}G`;
  if (v >= 1e6) return `${+(v / 1e6).toFixed(1)}M`;
  if (v >= 1e3) return `${+(v / 1e3).toFixed(1)}k`;
  return String(Math.round(v));
}

function fateColour(fate) {
  if (FATE_COLOURS[fate]) return FATE_COLOURS[fate];
  let h = 0;
  for (const c of fate) h = (h * 31 + c.charCodeAt(0)) >>> 0;
  return SPARE_COLOURS[h % SPARE_COLOURS.length];
}

// ---- token and requests ----

function takeToken() {
  const m = /(?:^#|[#&])token=([0-9A-Fa-f]+)/.exec(location.hash);
  if (m) {
    try { sessionStorage.setItem(TOKEN_KEY, m[1]); } catch (_) { /* storage off: this load only */ }
    history.replaceState(null, '', location.pathname + location.search);
    return m[1];
  }
  try { return sessionStorage.getItem(TOKEN_KEY); } catch (_) { return null; }
}

async function api(path, init = {}) {
  const headers = Object.assign({}, init.headers || {});
  if (S.token) headers['X-Linkem-Token'] = S.token;
  const r = await fetch(path, Object.assign({cache: 'no-store', credentials: 'omit'}, init, {headers}));
  let body = null;
  try { body = await r.json(); } catch (_) { body = null; }
  return {status: r.status, body};
}

// ---- state ----

function setLinks(list) {
  for (const l of list || []) S.links.set(l.name, l);
  renderWords();
}

function applyState(st) {
  S.intervalMs = st.interval_ms || 500;
  S.historyS = st.history_s || 300;
  S.topo = st.topology || {nodes: [], links: []};
  S.links = new Map();
  setLinks(st.links);
  S.marks = st.marks || [];
  if (st.sample) S.latest = st.sample;
  $('#title').textContent = st.name ? `linkem · ${st.name}` : 'linkem';
  $('#subtitle').textContent = [st.front, st.version && `v${st.version}`].filter(Boolean).join(' · ');
  document.title = st.name ? `${st.name} · linkem` : 'linkem';
  // The server says whether this token may change; without one the page never can.
  S.writable = Boolean(S.token) && st.writable !== false;
  renderMode();
}

function renderMode() {
  const mode = $('#mode');
  mode.dataset.writable = String(S.writable);
  if (S.writable) mode.textContent = 'writable';
  else if (S.token) mode.textContent = 'read-only (token not accepted)';
  else mode.textContent = 'read-only';
  for (const id of ['#change-verb', '#change-dir', '#change-words', '#change-submit']) {
    $(id).disabled = !S.writable;
  }
  $('#change-form').classList.toggle('disabled', !S.writable);
  $('#change-hint').textContent = S.writable ? ''
    : 'read-only: open the address linkem printed at start (with #token=…) to change links';
  syncVerb();
}

function linkNames() {
  const names = S.topo.links.map((l) => l.name);
  for (const name of S.links.keys()) if (!names.includes(name)) names.push(name);
  return names;
}

// ---- topology ----

// A chain or a ring is drawn as such; anything else by a force layout of a fixed number
// of steps from positions on a circle, so one topology is always drawn the same.
function layout(nodes, links) {
  const n = nodes.length;
  const index = new Map(nodes.map((node, i) => [node.name, i]));
  const adj = nodes.map(() => new Set());
  const edges = [];
  for (const l of links) {
    const i = index.get(l.a);
    const j = index.get(l.b);
    if (i === undefined || j === undefined || i === j) continue;
    adj[i].add(j); adj[j].add(i); edges.push([i, j]);
  }
  if (n === 0) return [];
  if (n === 1) return [{x: 0, y: 0}];
  const seen = new Set([0]);
  const stack = [0];
  while (stack.length) for (const j of adj[stack.pop()]) if (!seen.has(j)) { seen.add(j); stack.push(j); }
  const connected = seen.size === n;
  const degrees = adj.map((s) => s.size);
  if (connected && degrees.every((d) => d <= 2)) {
    const ends = degrees.map((d, i) => (d === 1 ? i : -1)).filter((i) => i >= 0);
    const order = walk(adj, ends.length ? ends[0] : 0);
    if (ends.length === 2) return chainPositions(order, nodes);
    if (ends.length === 0 && n > 2) return circlePositions(order.length, order);
  }
  return forceLayout(n, edges);
}

function walk(adj, start) {
  const order = [start];
  const seen = new Set(order);
  for (;;) {
    const next = [...adj[order[order.length - 1]]].find((j) => !seen.has(j));
    if (next === undefined) return order;
    seen.add(next); order.push(next);
  }
}

// A snake of rows of at most 6, so a long chain stays readable; long names (a bridge's
// interfaces) space the nodes further apart.
function chainPositions(order, nodes) {
  const perRow = Math.min(order.length, 6);
  const longest = Math.max(...nodes.map((n) => n.name.length));
  const step = Math.max(110, longest * 7 + 30);
  const pos = [];
  order.forEach((node, k) => {
    const row = Math.floor(k / perRow);
    const col = row % 2 === 0 ? k % perRow : perRow - 1 - (k % perRow);
    pos[node] = {x: col * step, y: row * 90};
  });
  return pos;
}

function circlePositions(n, order) {
  const r = Math.max(70, (n * 80) / (2 * Math.PI));
  const pos = [];
  order.forEach((node, k) => {
    const a = (2 * Math.PI * k) / n - Math.PI / 2;
    pos[node] = {x: r * Math.cos(a), y: r * Math.sin(a)};
  });
  return pos;
}

function forceLayout(n, edges) {
  const pos = circlePositions(n, [...Array(n).keys()]);
  const k = 90;
  let temp = 80;
  const steps = 300;
  for (let step = 0; step < steps; step++) {
    const disp = pos.map(() => ({x: 0, y: 0}));
    for (let i = 0; i < n; i++) {
      for (let j = i + 1; j < n; j++) {
        const dx = pos[i].x - pos[j].x;
        const dy = pos[i].y - pos[j].y;
        const d = Math.max(1, Math.hypot(dx, dy));
        const f = (k * k) / d;
        disp[i].x += (dx / d) * f; disp[i].y += (dy / d) * f;
        disp[j].x -= (dx / d) * f; disp[j].y -= (dy / d) * f;
      }
    }
    for (const [i, j] of edges) {
      const dx = pos[i].x - pos[j].x;
      const dy = pos[i].y - pos[j].y;
      const d = Math.max(1, Math.hypot(dx, dy));
      const f = (d * d) / k;
      disp[i].x -= (dx / d) * f; disp[i].y -= (dy / d) * f;
      disp[j].x += (dx / d) * f; disp[j].y += (dy / d) * f;
    }
    for (let i = 0; i < n; i++) {
      // A pull to the middle keeps separate parts of a lab on the page.
      disp[i].x -= pos[i].x * 0.05; disp[i].y -= pos[i].y * 0.05;
      const d = Math.max(1e-9, Math.hypot(disp[i].x, disp[i].y));
      const move = Math.min(d, temp);
      pos[i].x += (disp[i].x / d) * move; pos[i].y += (disp[i].y / d) * move;
    }
    temp = Math.max(1, temp * 0.985);
  }
  return pos;
}

function renderTopology() {
  const root = $('#topology');
  root.replaceChildren();
  const nodes = S.topo.nodes || [];
  const links = S.topo.links || [];
  const pos = layout(nodes, links);
  const at = new Map(nodes.map((node, i) => [node.name, pos[i]]));
  const xs = pos.map((p) => p.x);
  const ys = pos.map((p) => p.y);
  const pad = 34;
  let minX = Math.min(...xs) - pad;
  let minY = Math.min(...ys) - pad;
  let w = Math.max(...xs) + pad - minX;
  let h = Math.max(...ys) + pad - minY;
  // Never zoomed in beyond a few nodes' width, so one link does not fill the panel.
  if (w < 300) { minX -= (300 - w) / 2; w = 300; }
  if (h < 110) { minY -= (110 - h) / 2; h = 110; }
  root.setAttribute('viewBox', `${minX} ${minY} ${w} ${h}`);
  root.setAttribute('preserveAspectRatio', 'xMidYMid meet');
  S.topoAspect = h / w;
  fitTopology();
  const labelled = links.length <= 16;
  const pairCount = new Map();
  const linkLayer = svg('g', {class: 'links'});
  for (const l of links) {
    const p = at.get(l.a);
    const q = at.get(l.b);
    if (!p || !q) continue;
    // Links between the same two nodes bend apart.
    const key = [l.a, l.b].sort().join('\n');
    const k = pairCount.get(key) || 0;
    pairCount.set(key, k + 1);
    const bend = k === 0 ? 0 : (k % 2 ? 1 : -1) * Math.ceil(k / 2) * 28;
    const mx = (p.x + q.x) / 2;
    const my = (p.y + q.y) / 2;
    const len = Math.max(1, Math.hypot(q.x - p.x, q.y - p.y));
    const cx = mx - ((q.y - p.y) / len) * bend * 2;
    const cy = my + ((q.x - p.x) / len) * bend * 2;
    const d = `M${p.x},${p.y} Q${cx},${cy} ${q.x},${q.y}`;
    const g = svg('g', {class: 'link', 'data-link': l.name, 'data-load': 'null', tabindex: '0', role: 'button'});
    const title = svg('title');
    title.textContent = l.name;
    g.append(title, svg('path', {class: 'link-hit', d}), svg('path', {class: 'link-line', d}));
    if (labelled) {
      for (const [end, other, name, node] of [[p, q, l.a_if, l.a], [q, p, l.b_if, l.b]]) {
        // A bridge's nodes are its interfaces: their names are said once.
        if (!name || name === node) continue;
        // Just outside the node's circle, above the line.
        const f = Math.min(0.45, 34 / Math.max(1, Math.hypot(other.x - end.x, other.y - end.y)));
        const t = svg('text', {class: 'if-label', x: end.x + (other.x - end.x) * f,
          y: end.y + (other.y - end.y) * f - 7, 'text-anchor': 'middle'});
        t.textContent = name;
        g.append(t);
      }
    }
    g.addEventListener('click', () => selectLink(l.name, true));
    g.addEventListener('keydown', (e) => { if (e.key === 'Enter' || e.key === ' ') selectLink(l.name, true); });
    linkLayer.append(g);
  }
  const nodeLayer = svg('g', {class: 'nodes'});
  nodes.forEach((node, i) => {
    const g = svg('g', {class: `node kind-${node.kind || 'node'}`, 'data-node': node.name,
      transform: `translate(${pos[i].x},${pos[i].y})`});
    const title = svg('title');
    title.textContent = `${node.name}${node.kind ? ` (${node.kind})` : ''}`;
    // A short name fits in the circle, a longer one goes under it.
    const inside = node.name.length <= 4;
    const label = svg('text', {class: inside ? 'node-label' : 'node-label below', y: inside ? 4 : 32,
      'text-anchor': 'middle'});
    label.textContent = node.name;
    g.append(title, svg('circle', {r: 17}), label);
    nodeLayer.append(g);
  });
  root.append(linkLayer, nodeLayer);
  colourTopology();
}

// The drawing's height follows its shape at the panel's width, within bounds.
function fitTopology() {
  const root = $('#topology');
  const width = root.clientWidth || 300;
  const max = window.innerWidth < 600 ? 320 : 420;
  root.style.height = `${Math.round(Math.min(max, Math.max(120, width * (S.topoAspect || 0.5))))}px`;
}

// load = tput/cap of the busier direction, green to red; a link without any capacity
// is blue, darker as it nears the busiest link of the sample (data-load null).
function colourTopology() {
  const sample = S.latest;
  const byName = new Map(((sample && sample.links) || []).map((l) => [l.name, l]));
  let busiest = 0;
  for (const l of byName.values()) for (const d of l.dirs || []) busiest = Math.max(busiest, d.tput_bps || 0);
  for (const g of document.querySelectorAll('#topology [data-link]')) {
    const l = byName.get(g.dataset.link);
    let load = null;
    let tput = 0;
    for (const d of (l && l.dirs) || []) {
      tput = Math.max(tput, d.tput_bps || 0);
      if (d.cap_bps) load = Math.max(load || 0, (d.tput_bps || 0) / d.cap_bps);
    }
    const shade = load !== null ? load : (busiest > 0 ? tput / busiest : 0);
    g.dataset.load = load === null ? 'null' : load.toFixed(3);
    g.classList.toggle('idle', !l || tput === 0);
    g.classList.toggle('selected', g.dataset.link === S.selected);
    const line = g.querySelector('.link-line');
    line.style.stroke = tput === 0 ? '' : load !== null ? loadColour(Math.min(1, shade))
      : relativeColour(Math.min(1, shade));
    const title = g.querySelector('title');
    title.textContent = `${g.dataset.link}\n${fmtBps(tput)}${load !== null ? ` (${Math.round(load * 100)} % of capacity)` : ''}`;
  }
}

function loadColour(x) {
  return `hsl(${Math.round(130 * (1 - x))}, 75%, 42%)`;
}

// Without a capacity nothing is "full": busier is a darker blue, never a warning red.
function relativeColour(x) {
  return `hsl(215, 80%, ${Math.round(78 - 40 * x)}%)`;
}

// ---- the selected link ----

function buildDirs() {
  const box = $('#dirs');
  const tpl = $('#dir-template');
  for (const dir of DIRS) {
    const node = tpl.content.firstElementChild.cloneNode(true);
    node.dataset.dir = dir;
    node.querySelector('.words').id = `words-${dir}`;
    for (const canvas of node.querySelectorAll('canvas')) {
      canvas.addEventListener('pointermove', hover);
      canvas.addEventListener('pointerleave', () => { $('#tip').hidden = true; });
    }
    box.append(node);
  }
}

async function selectLink(name, fromUser) {
  if (!name) return;
  S.selected = name;
  const sel = $('#link-select');
  if (sel.value !== name) sel.value = name;
  if (fromUser) {
    const url = new URL(location.href);
    url.searchParams.set('link', name);
    history.replaceState(null, '', url.pathname + url.search);
  }
  S.samples = [];
  // A link of Dummynet rules is changed by control lines (pipe N config ...).
  const l = S.links.get(name);
  if (l && l.rules) $('#change-verb').value = 'line';
  renderWords();
  renderMarks();
  colourTopology();
  await loadHistory();
}

async function loadHistory() {
  const name = S.selected;
  const ticket = ++S.historyLoading;
  let r;
  try {
    r = await api(`/api/history?link=${encodeURIComponent(name)}`);
  } catch (_) {
    return;
  }
  if (ticket !== S.historyLoading || name !== S.selected || r.status !== 200 || !r.body) return;
  const fetched = (r.body.samples || []).map(normalise);
  // Samples that came by SSE while the history was on its way are kept after it.
  const last = fetched.length ? fetched[fetched.length - 1].t_s : -Infinity;
  S.samples = fetched.concat(S.samples.filter((s) => s.t_s > last));
  for (const m of r.body.marks || []) {
    if (!S.marks.some((x) => x.t_s === m.t_s && x.text === m.text && x.link === m.link)) S.marks.push(m);
  }
  S.marks.sort((a, b) => a.t_s - b.t_s);
  renderLatest();
  renderMarks();
  scheduleDraw();
}

function normalise(sample) {
  const dirs = {};
  for (const d of sample.dirs || []) dirs[d.dir] = d;
  return {t_s: sample.t_s, dirs};
}

function renderLinkSelect() {
  const sel = $('#link-select');
  sel.replaceChildren(...linkNames().map((n) => el('option', {value: n}, n)));
  if (S.selected) sel.value = S.selected;
}

function renderWords() {
  const l = S.links.get(S.selected);
  const topo = (S.topo.links || []).find((x) => x.name === S.selected);
  for (const dir of DIRS) {
    const words = l && l.words ? l.words[dir] : null;
    const code = document.getElementById(`words-${dir}`);
    if (code) code.textContent = words === null || words === undefined ? '–' : (words || '(none)');
    const title = document.querySelector(`#dirs [data-dir="${dir}"] .dir-title`);
    if (title) {
      const [from, to] = topo ? (dir === 'a-to-b' ? [topo.a, topo.b] : [topo.b, topo.a]) : [];
      title.textContent = topo ? `${dir}: ${from} → ${to}` : dir;
    }
  }
  const rules = l && l.rules;
  $('#rules-box').hidden = !rules;
  $('#rules').textContent = rules || '';
  const info = [];
  if (l && l.changes) info.push(`${l.changes} change${l.changes === 1 ? '' : 's'}`);
  if (l && l.changed_at_s !== null && l.changed_at_s !== undefined) info.push(`last at ${l.changed_at_s.toFixed(1)} s`);
  $('#link-info').textContent = info.join(', ');
  syncVerb();
}

function renderLatest() {
  const last = S.samples[S.samples.length - 1];
  for (const dir of DIRS) {
    const box = document.querySelector(`#dirs [data-dir="${dir}"]`);
    const d = last && last.dirs[dir];
    const tput = box.querySelector('.tput-latest');
    tput.textContent = d ? fmtBps(d.tput_bps) : '–';
    tput.dataset.bps = d && Number.isFinite(d.tput_bps) ? String(d.tput_bps) : '';
    tput.dataset.t = last ? String(last.t_s) : '';
    box.querySelector('.cap-latest').textContent = d ? (d.cap_bps ? fmtBps(d.cap_bps) : 'unlimited') : '–';
    const delay = box.querySelector('.delay-latest');
    delay.textContent = d ? fmtPairMs(d.delay_p50_ms, d.delay_p99_ms) : '–';
    delay.dataset.p50Ms = d && d.delay_p50_ms !== null ? String(d.delay_p50_ms) : '';
    const queue = box.querySelector('.queue-latest');
    const packets = d ? d.queue_packets || 0 : 0;
    queue.textContent = d ? `${fmtNum(packets)} packet${packets === 1 ? '' : 's'}` : '–';
    queue.dataset.packets = d ? String(d.queue_packets || 0) : '';
    const drops = Object.entries((d && d.drops) || {});
    box.querySelector('.drops-latest').textContent = !d ? '–'
      : drops.length ? drops.map(([f, n]) => `${f} ${n}`).join(', ') : 'none';
  }
}

function renderMarks() {
  const list = $('#marks-list');
  const mine = S.marks.filter((m) => !m.link || m.link === S.selected).slice(-30).reverse();
  list.replaceChildren(...mine.map((m) => {
    const li = el('li', {'data-kind': m.kind || ''});
    li.append(el('span', {class: 'mark-t'}, `${Number(m.t_s).toFixed(1)} s`), ' ',
      el('span', {class: 'mark-kind'}, m.kind || ''), ' ', el('code', {}, m.text || ''));
    return li;
  }));
  if (!mine.length) list.append(el('li', {class: 'muted'}, 'none yet'));
}

// ---- live updates ----

function onSample(sample) {
  S.latest = sample;
  const mine = (sample.links || []).find((l) => l.name === S.selected);
  if (mine) {
    const last = S.samples[S.samples.length - 1];
    if (!last || sample.t_s > last.t_s) S.samples.push(normalise({t_s: sample.t_s, dirs: mine.dirs}));
    const oldest = sample.t_s - S.historyS;
    while (S.samples.length && S.samples[0].t_s < oldest) S.samples.shift();
    renderLatest();
  }
  colourTopology();
  scheduleDraw();
}

function connect() {
  if (S.es) S.es.close();
  const es = new EventSource('/api/events');
  S.es = es;
  S.lastEventMs = Date.now();
  const conn = $('#conn');
  es.onopen = () => {
    conn.textContent = 'live'; conn.dataset.state = 'live';
    S.retryMs = 1000;
  };
  const guard = (fn) => (e) => {
    S.lastEventMs = Date.now();
    try { fn(JSON.parse(e.data)); } catch (err) { console.warn('linkem: bad event', err); }
  };
  es.addEventListener('sample', guard(onSample));
  es.addEventListener('mark', guard((m) => {
    S.marks.push(m);
    if (S.marks.length > 1000) S.marks.splice(0, S.marks.length - 1000);
    renderMarks(); scheduleDraw();
  }));
  es.addEventListener('links', guard((list) => setLinks(list)));
  es.onerror = () => {
    conn.textContent = 'reconnecting'; conn.dataset.state = 'down';
    // The browser retries by itself unless the stream is closed for good (an error
    // status, or a server that dropped a slow client and refused it again).
    if (es.readyState === EventSource.CLOSED) reconnectLater();
  };
}

function reconnectLater() {
  if (S.es) { S.es.close(); S.es = null; }
  const wait = S.retryMs;
  S.retryMs = Math.min(10000, S.retryMs * 2);
  setTimeout(async () => {
    await refreshState();
    connect();
    if (S.selected) loadHistory();
  }, wait);
}

// A stream that went quiet (a proxy, a suspended laptop) is dropped and made again.
function watchdog() {
  if (S.es && Date.now() - S.lastEventMs > Math.max(5000, 6 * S.intervalMs)) {
    $('#conn').textContent = 'reconnecting'; $('#conn').dataset.state = 'down';
    reconnectLater();
  }
}

async function refreshState() {
  try {
    const r = await api('/api/state');
    if (r.status === 200 && r.body) {
      applyState(r.body);
      return true;
    }
  } catch (_) { /* the server is away; the caller retries */ }
  return false;
}

// ---- the change form ----

function syncVerb() {
  const verb = $('#change-verb').value;
  const line = verb === 'line';
  $('#change-dir').disabled = !S.writable || line;
  const l = S.links.get(S.selected);
  $('#change-words').placeholder = line
    ? (l && l.rules ? 'pipe 1 config bw 10Mbit/s' : `link ${S.selected || 'NAME'} a-to-b delay 20ms`)
    : 'delay 20ms loss 1%';
}

async function submitChange(e) {
  e.preventDefault();
  if (!S.writable) return;
  const verb = $('#change-verb').value;
  const words = $('#change-words').value.trim();
  const body = verb === 'line' ? {line: words}
    : {link: S.selected, verb, dir: $('#change-dir').value, words};
  const result = $('#change-result');
  result.dataset.ok = '';
  result.textContent = 'sending…';
  $('#change-submit').disabled = true;
  let r;
  try {
    r = await api('/api/change', {method: 'POST', headers: {'Content-Type': 'application/json'},
      body: JSON.stringify(body)});
  } catch (err) {
    r = {status: 0, body: {ok: false, error: `no answer from linkem (${err.message})`}};
  } finally {
    $('#change-submit').disabled = !S.writable;
  }
  showReply(r, words, body);
  if (r.body && r.body.ok) refreshState().then(() => { renderWords(); scheduleDraw(); });
}

function showReply(r, sent, body) {
  const result = $('#change-result');
  const reply = r.body || {ok: false, error: `HTTP ${r.status}`};
  result.replaceChildren();
  delete result.dataset.word;
  delete result.dataset.position;
  result.dataset.status = String(r.status);
  if (reply.ok) {
    result.dataset.ok = 'true';
    result.dataset.atNs = Number.isFinite(reply.at_ns) ? String(reply.at_ns) : '';
    result.append(el('strong', {}, 'ok'), ` applied${fmtInstant(reply.at_ns)}: `,
      el('code', {}, reply.line || body.line || `${body.verb} ${body.dir} ${body.words}`));
    return;
  }
  result.dataset.ok = 'false';
  result.append(el('strong', {}, 'refused'), ` ${reply.error || `HTTP ${r.status}`}`);
  if (reply.position !== undefined && reply.position !== null) {
    result.dataset.position = String(reply.position);
    if (reply.word !== undefined) result.dataset.word = String(reply.word);
    result.append(el('br'), wordsWithMark(sent, reply.position, reply.word));
    result.append(el('span', {class: 'muted'}, ` (word ${reply.position}${reply.word !== undefined ? ` '${reply.word}'` : ''})`));
  }
}

// at_ns is the wall clock's (ns since 1970): shown as this browser's time of day.
function fmtInstant(atNs) {
  if (!Number.isFinite(atNs)) return '';
  if (atNs < 1e17) return ` at ${(atNs / 1e9).toFixed(3)} s`;
  const d = new Date(atNs / 1e6);
  const ms = String(d.getMilliseconds()).padStart(3, '0');
  return ` at ${d.toLocaleTimeString([], {hour12: false})}.${ms}`;
}

// The words sent, the one at `position` (1-based) marked; if the words do not hold it
// there (the reply counted another line), the word the reply names is shown alone.
function wordsWithMark(sent, position, word) {
  const code = el('code', {class: 'sent'});
  const parts = sent.split(/\s+/).filter(Boolean);
  const at = position - 1;
  if (at < 0 || at >= parts.length || (word !== undefined && parts[at] !== word)) {
    code.append(el('mark', {class: 'bad-word'}, word !== undefined ? word : '?'));
    return code;
  }
  parts.forEach((p, i) => {
    if (i) code.append(' ');
    code.append(i === at ? el('mark', {class: 'bad-word'}, p) : p);
  });
  return code;
}

// ---- charts ----

function scheduleDraw() {
  if (S.drawPending) return;
  S.drawPending = true;
  requestAnimationFrame(() => { S.drawPending = false; drawAll(); });
}

function colours() {
  const cs = getComputedStyle(document.documentElement);
  const v = (name) => cs.getPropertyValue(name).trim();
  return {fg: v('--fg'), muted: v('--muted'), grid: v('--grid'), tput: v('--c-tput'),
    offered: v('--c-offered'), cap: v('--c-cap'), p50: v('--c-p50'), p99: v('--c-p99'),
    queue: v('--c-queue'), mark: v('--c-mark')};
}

function drawAll() {
  const c = colours();
  const last = S.samples[S.samples.length - 1];
  const t1 = last ? last.t_s : (S.latest ? S.latest.t_s : 0);
  // A run younger than the window fills the charts (at least a minute), then scrolls.
  const first = S.samples.length ? S.samples[0].t_s : t1;
  const t0 = t1 - Math.min(S.windowS, Math.max(60, Math.ceil((t1 - first) / 30) * 30));
  const shown = S.samples.filter((s) => s.t_s >= t0);
  const marks = S.marks.filter((m) => (!m.link || m.link === S.selected) && m.t_s >= t0 && m.t_s <= t1 + 1)
    .map((m) => m.t_s);
  const gapS = (2.5 * S.intervalMs) / 1000;
  const perS = 1000 / S.intervalMs;
  for (const dir of DIRS) {
    const box = document.querySelector(`#dirs [data-dir="${dir}"]`);
    const series = (key, colour, extra = {}) => Object.assign({colour, gapS,
      points: shown.map((s) => [s.t_s, s.dirs[dir] ? s.dirs[dir][key] : null])}, extra);
    const base = {t0, t1, marks, c};
    drawChart(box.querySelector('.chart-tput'), Object.assign({}, base, {fmt: fmtBpsShort, series: [
      series('cap_bps', c.cap, {dash: [5, 4]}), series('offered_bps', c.offered, {dash: [2, 3]}),
      series('tput_bps', c.tput, {width: 2})]}));
    drawChart(box.querySelector('.chart-delay'), Object.assign({}, base, {fmt: (v) => `${fmtNum(v)}ms`,
      series: [series('delay_p99_ms', c.p99), series('delay_p50_ms', c.p50, {width: 2})]}));
    drawChart(box.querySelector('.chart-queue'), Object.assign({}, base, {fmt: fmtNum, whole: true,
      series: [series('queue_packets', c.queue, {width: 2, fill: true})]}));
    const fates = [...new Set(shown.flatMap((s) => Object.keys((s.dirs[dir] && s.dirs[dir].drops) || {})))].sort();
    drawChart(box.querySelector('.chart-drops'), Object.assign({}, base, {fmt: fmtNum, series: [],
      stacks: {barS: S.intervalMs / 1000, layers: fates.map((f) => ({colour: fateColour(f),
        points: shown.map((s) => [s.t_s, ((s.dirs[dir] && s.dirs[dir].drops) || {})[f] * perS || 0])}))}}));
    const keys = box.querySelector('.drop-keys');
    keys.replaceChildren(...fates.map((f) => {
      const k = el('span', {class: 'key'}, f);
      k.style.setProperty('--key', fateColour(f));
      return k;
    }));
  }
}

// 1, 2, 2.5 or 5 times a power of ten; counts (whole packets) keep whole halves.
function niceCeil(v, whole) {
  if (!(v > 0)) return 1;
  if (whole && v <= 2) return 2;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of whole ? [1, 2, 5, 10] : [1, 2, 2.5, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

function drawChart(canvas, o) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth;
  const h = canvas.clientHeight;
  if (!w || !h) return;
  if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
    canvas.width = Math.round(w * dpr); canvas.height = Math.round(h * dpr);
  }
  const ctx = canvas.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  const L = 44; const R = 6; const T = 6; const B = 16;
  const pw = w - L - R; const ph = h - T - B;
  canvas.geometry = {left: L, width: pw, t0: o.t0, t1: o.t1};
  ctx.clearRect(0, 0, w, h);
  let top = 0;
  for (const s of o.series) for (const [, v] of s.points) if (Number.isFinite(v)) top = Math.max(top, v);
  const stackTops = new Map();
  for (const layer of (o.stacks && o.stacks.layers) || []) {
    for (const [t, v] of layer.points) stackTops.set(t, (stackTops.get(t) || 0) + v);
  }
  for (const v of stackTops.values()) top = Math.max(top, v);
  top = niceCeil(top * 1.05, o.whole);
  const span = Math.max(1e-9, o.t1 - o.t0);
  const x = (t) => L + ((t - o.t0) / span) * pw;
  const y = (v) => T + ph - (v / top) * ph;
  ctx.font = '10px system-ui, sans-serif';
  ctx.lineWidth = 1;
  ctx.strokeStyle = o.c.grid; ctx.fillStyle = o.c.muted;
  ctx.textAlign = 'right'; ctx.textBaseline = 'middle';
  for (const f of [0, 0.5, 1]) {
    const yy = Math.round(y(top * f)) + 0.5;
    ctx.beginPath(); ctx.moveTo(L, yy); ctx.lineTo(L + pw, yy); ctx.stroke();
    ctx.fillText(o.fmt(top * f), L - 4, yy);
  }
  const tick = span > 240 ? 60 : span > 100 ? 30 : 15;
  ctx.textAlign = 'center'; ctx.textBaseline = 'top';
  for (let ago = 0; ago <= span + 1e-6; ago += tick) {
    const xx = Math.round(x(o.t1 - ago)) + 0.5;
    ctx.beginPath(); ctx.moveTo(xx, T); ctx.lineTo(xx, T + ph); ctx.stroke();
    ctx.fillText(ago ? `-${ago}s` : 'now', Math.min(Math.max(xx, L + 12), L + pw - 10), T + ph + 3);
  }
  ctx.save();
  ctx.beginPath(); ctx.rect(L, T, pw, ph); ctx.clip();
  if (o.stacks) {
    const bw = Math.max(1, (o.stacks.barS / span) * pw);
    const base = new Map();
    for (const layer of o.stacks.layers) {
      ctx.fillStyle = layer.colour;
      for (const [t, v] of layer.points) {
        if (!v) continue;
        const b = base.get(t) || 0;
        ctx.fillRect(x(t) - bw, y(b + v), bw, y(b) - y(b + v));
        base.set(t, b + v);
      }
    }
  }
  for (const s of o.series) drawSeries(ctx, s, x, y, T + ph);
  ctx.strokeStyle = o.c.mark; ctx.setLineDash([3, 3]); ctx.lineWidth = 1.5;
  for (const t of o.marks) {
    const xx = Math.round(x(t)) + 0.5;
    ctx.beginPath(); ctx.moveTo(xx, T); ctx.lineTo(xx, T + ph); ctx.stroke();
  }
  ctx.restore();
}

function drawSeries(ctx, s, x, y, bottom) {
  ctx.strokeStyle = s.colour; ctx.lineWidth = s.width || 1.25;
  ctx.setLineDash(s.dash || []);
  const runs = [];
  let run = [];
  let prevT = null;
  for (const [t, v] of s.points) {
    if (!Number.isFinite(v) || (prevT !== null && t - prevT > s.gapS)) {
      if (run.length) runs.push(run);
      run = [];
    }
    if (Number.isFinite(v)) run.push([t, v]);
    prevT = t;
  }
  if (run.length) runs.push(run);
  for (const r of runs) {
    ctx.beginPath();
    r.forEach(([t, v], i) => (i ? ctx.lineTo(x(t), y(v)) : ctx.moveTo(x(t), y(v))));
    if (r.length === 1) ctx.lineTo(x(r[0][0]) + 1, y(r[0][1]));
    ctx.stroke();
    if (s.fill && r.length > 1) {
      ctx.lineTo(x(r[r.length - 1][0]), bottom); ctx.lineTo(x(r[0][0]), bottom); ctx.closePath();
      ctx.globalAlpha = 0.15; ctx.fillStyle = s.colour; ctx.fill(); ctx.globalAlpha = 1;
    }
  }
  ctx.setLineDash([]);
}

// The values of the sample nearest the pointer, in a box beside it.
function hover(e) {
  const canvas = e.currentTarget;
  const g = canvas.geometry;
  const tip = $('#tip');
  if (!g || !S.samples.length) { tip.hidden = true; return; }
  const rect = canvas.getBoundingClientRect();
  const t = g.t0 + ((e.clientX - rect.left - g.left) / g.width) * (g.t1 - g.t0);
  let best = S.samples[0];
  for (const s of S.samples) if (Math.abs(s.t_s - t) < Math.abs(best.t_s - t)) best = s;
  const dir = canvas.closest('[data-dir]').dataset.dir;
  const d = best.dirs[dir];
  if (!d || Math.abs(best.t_s - t) > 2 * (S.intervalMs / 1000)) { tip.hidden = true; return; }
  const metric = canvas.dataset.metric;
  const lines = [`${(best.t_s - g.t1).toFixed(1)} s (t = ${best.t_s.toFixed(1)} s)`];
  if (metric === 'tput') {
    lines.push(`throughput ${fmtBps(d.tput_bps)}`, `offered ${fmtBps(d.offered_bps)}`,
      `capacity ${d.cap_bps ? fmtBps(d.cap_bps) : 'unlimited'}`);
  } else if (metric === 'delay') {
    lines.push(`delay p50 / p99 ${fmtPairMs(d.delay_p50_ms, d.delay_p99_ms)}`);
  } else if (metric === 'queue') {
    lines.push(`queue ${d.queue_packets || 0} packets`);
  } else {
    const drops = Object.entries(d.drops || {});
    lines.push(drops.length ? `drops ${drops.map(([f, n]) => `${f} ${n}`).join(', ')}` : 'no drops');
  }
  tip.textContent = lines.join('\n');
  tip.hidden = false;
  const x = Math.min(e.clientX + 12, window.innerWidth - tip.offsetWidth - 4);
  tip.style.left = `${Math.max(4, x)}px`;
  tip.style.top = `${e.clientY + 14}px`;
}

// ---- start ----

async function start() {
  S.token = takeToken();
  buildDirs();
  renderMode();
  $('#change-form').addEventListener('submit', submitChange);
  $('#change-verb').addEventListener('change', syncVerb);
  $('#link-select').addEventListener('change', (e) => selectLink(e.target.value, true));
  $('#window').addEventListener('change', (e) => { S.windowS = Number(e.target.value) || 300; scheduleDraw(); });
  window.addEventListener('resize', () => { fitTopology(); scheduleDraw(); });
  // A token given to the page already open (a fragment navigation does not reload it).
  window.addEventListener('hashchange', () => {
    const token = takeToken();
    if (token && token !== S.token) { S.token = token; refreshState(); }
  });
  while (!(await refreshState())) {
    $('#conn').textContent = 'no answer, retrying'; $('#conn').dataset.state = 'down';
    await new Promise((res) => setTimeout(res, 2000));
  }
  renderTopology();
  renderLinkSelect();
  const wanted = new URL(location.href).searchParams.get('link');
  const names = linkNames();
  connect();
  setInterval(watchdog, 1000);
  await selectLink(names.includes(wanted) ? wanted : names[0], false);
}

document.addEventListener('DOMContentLoaded', start);
