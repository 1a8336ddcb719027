// The admin page's sweeps (GET /api/v1/sweeps, read every 2 s while signed
// in): a row per sweep with its best trial, and for the selected one its
// trials (values, state, metric at each rung, final) and a chart of the
// metric against examples seen, one line per trial. Loaded after admin.js,
// whose helpers (api, text, num, fmtInt, syncRows) it calls and which
// calls sweepsStart and sweepsStop.
'use strict';

const SWEEPS_MS = 2000;
const sw = { list: [], selected: '', newest: '', timer: 0 };

function sweepsStart() {
  if (sw.timer) return;
  loadSweeps();
  sw.timer = setInterval(loadSweeps, SWEEPS_MS);
}

function sweepsStop() {
  clearInterval(sw.timer);
  sw.timer = 0;
}

async function loadSweeps() {
  try {
    const list = await api('GET', '/api/v1/sweeps');
    sw.list = Array.isArray(list) ? list.map((x) => Object.assign({}, x, { id: String(x.id) })) : [];
    text($('sweeps-error'), '');
  } catch (e) {
    if (e.status !== 401) text($('sweeps-error'), 'Reading sweeps: ' + e.message);
    return;
  }
  if (!sw.list.some((x) => x.id === sw.selected)) sw.selected = sw.list.length ? sw.list[sw.list.length - 1].id : '';
  // A newly submitted sweep is shown: the newest is selected once it appears.
  const newest = sw.list.length ? sw.list[sw.list.length - 1].id : '';
  if (newest && newest !== sw.newest) {
    sw.selected = newest;
    sw.newest = newest;
  }
  renderSweeps();
}

function fmtMetric(x, v) {
  if (!num(v)) return '–';
  return x.metric === 'accuracy' ? (100 * v).toFixed(2) + '%' : v.toFixed(4);
}

function renderSweeps() {
  $('sweeps-panel').hidden = sw.list.length === 0;
  syncRows($('sweeps').tBodies[0], sw.list, 'sweepId', (tr, x) => {
    tr.tabIndex = 0;
    tr.addEventListener('click', () => {
      sw.selected = x.id;
      renderSweeps();
    });
    for (let i = 0; i < 7; i++) {
      const td = tr.insertCell();
      if ([3, 4, 6].includes(i)) td.className = 'num';
    }
  }, (tr, x) => {
    const cells = [x.name, x.state, x.method, String((x.trials || []).length), fmtInt(x.examples_seen),
      x.best ? x.best.id : '–', x.best ? fmtMetric(x, x.best.metric) : '–'];
    cells.forEach((c, i) => text(tr.cells[i], c));
    tr.cells[1].className = 'state-' + x.state;
    tr.classList.toggle('selected', x.id === sw.selected);
  });
  const x = sw.list.find((s) => s.id === sw.selected);
  $('sweep-detail').hidden = !x;
  if (!x) return;
  text($('sweep-name'), x.name + ' (' + x.id + '): ' + x.metric + (x.best ? ', best ' + x.best.id : ''));
  const trials = (x.trial_details || []).map((t) => Object.assign({}, t, { id: String(t.id) }));
  syncRows($('sweep-trials').tBodies[0], trials, 'trialId', (tr) => {
    for (let i = 0; i < 7; i++) {
      const td = tr.insertCell();
      if ([3, 5].includes(i)) td.className = 'num';
    }
  }, (tr, t) => {
    const values = Object.keys(t.point || {}).sort().map((k) => k + '=' + t.point[k]).join(', ');
    const rungs = (t.rungs || []).map((r) => fmtMetric(x, r.value) + ' @' + fmtInt(r.examples)).join(' → ');
    const cells = [t.name + (x.best && x.best.id === t.id ? ' ★' : ''), values, t.state + (t.job_state ? ' (' + t.job_state + ')' : ''),
      fmtInt(t.examples_seen), rungs || '–', t.final ? fmtMetric(x, t.final.value) : '–', t.note || ''];
    cells.forEach((c, i) => text(tr.cells[i], c));
    tr.classList.toggle('best', !!(x.best && x.best.id === t.id));
  });
  drawSweepChart(x, trials);
}

// drawSweepChart draws each trial's metric at its rungs and end against
// the examples it had seen then: a small SVG, no library needed.
function drawSweepChart(x, trials) {
  const svg = $('sweep-chart');
  const W = 640, H = 240, L = 48, R = 12, T = 10, B = 28;
  const series = trials.map((t) => {
    const pts = (t.rungs || []).map((r) => [r.examples, r.value]);
    if (t.final) pts.push([t.final.examples, t.final.value]);
    return { t, pts: pts.filter((p) => num(p[0]) && num(p[1])) };
  });
  const all = series.flatMap((s) => s.pts);
  const key = JSON.stringify(all) + (x.best ? x.best.id : '');
  if (svg.dataset.key === key) return;
  svg.dataset.key = key;
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const ns = 'http://www.w3.org/2000/svg';
  const el = (name, attrs, body) => {
    const e = document.createElementNS(ns, name);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
    if (body) e.textContent = body;
    svg.appendChild(e);
    return e;
  };
  if (!all.length) {
    el('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle', class: 'muted' }, 'no trial has reached a rung yet');
    return;
  }
  const xmax = Math.max(...all.map((p) => p[0]));
  let ymin = Math.min(...all.map((p) => p[1]));
  let ymax = Math.max(...all.map((p) => p[1]));
  if (ymax - ymin < 1e-9) { ymin -= 0.01; ymax += 0.01; }
  const px = (v) => L + ((W - L - R) * v) / xmax;
  const py = (v) => T + ((H - T - B) * (ymax - v)) / (ymax - ymin);
  el('line', { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: 'currentColor', 'stroke-opacity': 0.4 });
  el('line', { x1: L, y1: T, x2: L, y2: H - B, stroke: 'currentColor', 'stroke-opacity': 0.4 });
  el('text', { x: L - 4, y: T + 8, 'text-anchor': 'end', 'font-size': 10 }, fmtMetric(x, ymax));
  el('text', { x: L - 4, y: H - B, 'text-anchor': 'end', 'font-size': 10 }, fmtMetric(x, ymin));
  el('text', { x: W - R, y: H - 8, 'text-anchor': 'end', 'font-size': 10 }, fmtInt(xmax) + ' examples');
  series.forEach((s, i) => {
    if (!s.pts.length) return;
    const hue = (i * 137) % 360;
    const best = x.best && x.best.id === s.t.id;
    const d = s.pts.map((p, k) => (k ? 'L' : 'M') + px(p[0]).toFixed(1) + ' ' + py(p[1]).toFixed(1)).join(' ');
    el('path', { d, fill: 'none', stroke: 'hsl(' + hue + ',60%,45%)', 'stroke-width': best ? 3 : 1.5, class: 'trial-line', 'data-trial': s.t.id });
    for (const p of s.pts) el('circle', { cx: px(p[0]), cy: py(p[1]), r: 2.5, fill: 'hsl(' + hue + ',60%,45%)' });
  });
}
