// The admin page: signs in with the admin token, follows jobs, workers and
// metrics over Server-Sent Events (/api/v1/events), draws them with uPlot,
// and sends the operator's commands to the coordinator's JSON API. Every
// field of the API is treated as optional, so an older coordinator still
// gets a working page.
'use strict';

const $ = (id) => document.getElementById(id);

const HISTORY_POINTS = 2000; // metrics rows, sampled over the whole history, fetched when a job is selected
const LIVE_POINTS = 3600; // throughput points kept from the live feed

const state = {
  jobs: [], // JobView, in the coordinator's order
  workers: [],
  relays: [],
  selected: '', // job id
  userSelected: false, // the operator clicked a job: keep it
  metrics: [], // rows of the selected job, oldest first
  throughput: [], // [t, examples/s, updates/s] of the selected job
  historyLoading: false,
  pendingMetrics: [], // metric events that arrived while the history loaded
  selectToken: 0, // bumps on every selection, so late answers are dropped
  checkpointVersion: null, // last_checkpoint.version the list was fetched for
  events: null, // EventSource
  poll: 0, // fallback polling timer while the event stream is down
  ticker: 0, // re-renders relative times
  charts: {},
  staleness: '', // the histogram last drawn, as JSON
  signedIn: false,
};

// ---- formatting ----

// spanAtLeast is a uPlot range for an x scale that spans at least `span`:
// with one point (a fresh job) uPlot would otherwise stretch it over years.
function spanAtLeast(span) {
  return (u, min, max) => {
    if (min == null || max == null) return [0, span];
    if (max - min >= span) return [min, max];
    const mid = (min + max) / 2;
    return [mid - span / 2, mid + span / 2];
  };
}

const intFmt = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });

function num(v) {
  return typeof v === 'number' && Number.isFinite(v);
}

function fmtInt(v) {
  return num(v) ? intFmt.format(v) : '–';
}

function fmtRate(v) {
  if (!num(v)) return '–';
  if (v >= 100) return intFmt.format(v);
  return v.toFixed(1);
}

function fmtAcc(v) {
  return num(v) ? (v * 100).toFixed(2) + '%' : '–';
}

function fmtLoss(v) {
  return num(v) ? v.toPrecision(4) : '–';
}

function fmtLR(v) {
  return num(v) ? String(Number(v.toPrecision(6))) : '–';
}

// fmtBps is a rate in bits per second.
function fmtBps(v) {
  if (!num(v) || v <= 0) return '–';
  if (v >= 1e9) return (v / 1e9).toPrecision(3) + ' Gbit/s';
  if (v >= 1e6) return (v / 1e6).toPrecision(3) + ' Mbit/s';
  return (v / 1e3).toPrecision(3) + ' kbit/s';
}

// fmtLink is a worker's own estimate of its link; all zero is none yet.
function fmtLink(l) {
  if (!l || !(num(l.down_bps) && l.down_bps > 0)) return '–';
  return fmtBps(l.down_bps) + ' / ' + fmtBps(l.up_bps) + ', ' + (num(l.rtt_ms) ? Math.round(l.rtt_ms) + ' ms' : '–');
}

function fmtBytes(v) {
  if (!num(v)) return '–';
  const units = ['B', 'KB', 'MB', 'GB'];
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return (i === 0 ? v : v.toFixed(1)) + ' ' + units[i];
}

// seconds returns a time from the API (RFC 3339 text, or Unix seconds or
// milliseconds) as Unix seconds, or NaN.
function seconds(v) {
  if (num(v)) return v > 1e12 ? v / 1000 : v;
  if (typeof v === 'string' && v) return Date.parse(v) / 1000;
  return NaN;
}

function ago(v) {
  const t = seconds(v);
  if (!Number.isFinite(t)) return '–';
  const d = Math.max(0, Math.round(Date.now() / 1000 - t));
  if (d < 60) return d + ' s ago';
  if (d < 3600) return Math.floor(d / 60) + ' min ago';
  if (d < 86400) return Math.floor(d / 3600) + ' h ago';
  return Math.floor(d / 86400) + ' d ago';
}

function when(v) {
  const t = seconds(v);
  return Number.isFinite(t) ? new Date(t * 1000).toLocaleString() : '–';
}

function rejectedText(job) {
  const r = job.rejections && typeof job.rejections === 'object' ? job.rejections : {};
  const parts = Object.keys(r).filter((k) => r[k] > 0).sort().map((k) => k.replace(/_/g, ' ') + ' ' + fmtInt(r[k]));
  if (parts.length) return parts.join(', ');
  return num(job.updates_rejected) ? fmtInt(job.updates_rejected) : '–';
}

function jobLR(job) {
  if (num(job.lr)) return job.lr;
  const o = job.spec && (job.spec.outer_optimizer || job.spec.optimizer);
  return o && num(o.lr) ? o.lr : NaN;
}

// jobModeText says the mode and, for a round mode, where its round stands.
function jobModeText(job) {
  const spec = job.spec || {};
  let s = job.mode || spec.mode || 'async';
  if (spec.async_diloco) s += ' (async, Delayed Nesterov)';
  if (num(spec.local_steps) && spec.local_steps > 1) s += ' · H ' + spec.local_steps;
  if (num(job.round) && job.round > 0) s += ' · round ' + job.round + ': ' + fmtInt(job.round_results || 0) + ' of ' + spec.round_size;
  return s;
}

function jobMaxStaleness(job) {
  if (num(job.max_staleness)) return job.max_staleness;
  return job.spec && num(job.spec.max_staleness) ? job.spec.max_staleness : NaN;
}

// jobEnded says a job has stopped for good: done, failed, stopped, or
// ended and still writing its final checkpoint (finishing).
function jobEnded(job) {
  return ['done', 'failed', 'stopped', 'finishing'].includes(job && job.state);
}

// epochText is the epoch and how far into it the job is; once the job has
// ended there is no epoch under way, so it says so with the final figures.
function epochText(job) {
  if (!num(job.epoch)) return '–';
  if (jobEnded(job)) {
    const ev = job.eval;
    const final = ev && num(ev.bits_per_byte) ? ev.bits_per_byte.toFixed(3) + ' bits/byte'
      : ev && num(ev.bits_per_char) ? ev.bits_per_char.toFixed(3) + ' bits/char'
      : ev && num(ev.accuracy) ? 'accuracy ' + fmtAcc(ev.accuracy) : '';
    return fmtInt(job.epoch) + ' complete; ' + (job.state === 'done' ? 'finished' : job.state) + ' after ' + fmtInt(job.examples_seen) + ' examples' +
      (final ? ', final ' + final : '');
  }
  return String(job.epoch) + (num(job.epoch_progress) ? ' (' + Math.round(job.epoch_progress * 100) + '% done)' : '');
}

function jobName(job) {
  return job.name || (job.spec && job.spec.name) || job.id || '?';
}

function text(el, s) {
  if (el && el.textContent !== s) el.textContent = s;
}

// ---- talking to the coordinator ----

class APIError extends Error {
  constructor(status, body, fallback) {
    super((body && body.error) || fallback || 'HTTP ' + status);
    this.status = status;
    this.key = body && typeof body.key === 'string' ? body.key : '';
    this.problem = body && typeof body.problem === 'string' ? body.problem : '';
    this.body = body;
  }
}

// api calls the coordinator and returns the decoded JSON (null for 204). A
// 401 shows the sign-in form and throws; other failures throw APIError.
async function api(method, path, body) {
  const init = { method, credentials: 'same-origin', headers: { Accept: 'application/json' } };
  if (method !== 'GET') init.headers['Content-Type'] = 'application/json';
  if (body !== undefined) init.body = JSON.stringify(body);
  let res;
  try {
    res = await fetch(path, init);
  } catch (e) {
    throw new APIError(0, null, 'cannot reach the coordinator: ' + e.message);
  }
  let data = null;
  const ct = res.headers.get('Content-Type') || '';
  if (res.status !== 204 && ct.includes('json')) {
    try {
      data = await res.json();
    } catch (e) {
      data = null;
    }
  } else if (res.status !== 204 && !res.ok) {
    const t = (await res.text().catch(() => '')).trim();
    data = { error: t || res.status + ' ' + res.statusText };
  }
  if (res.status === 401 && path !== '/admin/login') {
    signedOut(state.signedIn ? 'Your session has ended; sign in again.' : '');
  }
  if (!res.ok) {
    const err = new APIError(res.status, data, res.status + ' ' + res.statusText);
    err.retryAfter = res.headers.get('Retry-After');
    throw err;
  }
  return data;
}

// ---- sign-in ----

async function checkSession() {
  try {
    await api('GET', '/api/v1/session');
    signedIn();
  } catch (e) {
    if (e.status !== 401) signedOut(e.status === 0 ? e.message : 'Sign in to continue (' + e.message + ').');
  }
}

async function signIn(ev) {
  ev.preventDefault();
  const token = $('token').value;
  text($('signin-error'), '');
  if (!token) {
    text($('signin-error'), 'Enter the admin token.');
    return;
  }
  $('signin').disabled = true;
  try {
    await api('POST', '/admin/login', { token });
    $('token').value = '';
    signedIn();
  } catch (e) {
    let msg = e.message;
    if (e.status === 401) msg = 'That token is not right.';
    else if (e.status === 429 && !(e.body && e.body.error)) {
      msg = 'Too many sign-in attempts; try again in ' + (e.retryAfter || 'a few') + ' s.';
    }
    text($('signin-error'), msg);
    $('token').select();
  } finally {
    $('signin').disabled = false;
  }
}

async function signOut() {
  try {
    await api('POST', '/admin/logout');
  } catch (e) { /* the session is forgotten here either way */ }
  signedOut('');
}

function signedIn() {
  state.signedIn = true;
  $('signin-section').hidden = true;
  $('admin').hidden = false;
  $('signout').hidden = false;
  $('live').hidden = false;
  text($('signin-error'), '');
  makeCharts();
  loadPresets();
  refresh();
  connect();
  if (!state.ticker) state.ticker = setInterval(renderWorkers, 1000);
  if (!state.relayTicker) state.relayTicker = setInterval(refreshRelays, 2000);
  if (typeof volunteersStart === 'function') volunteersStart(); // admin-volunteers.js
  if (typeof sweepsStart === 'function') sweepsStart(); // admin-sweeps.js
}

// signedOut shows the sign-in form. The page keeps what the operator typed
// (the job spec), so signing in again loses nothing.
function signedOut(msg) {
  state.signedIn = false;
  disconnect();
  if (typeof volunteersStop === 'function') volunteersStop();
  if (typeof sweepsStop === 'function') sweepsStop();
  clearInterval(state.ticker);
  state.ticker = 0;
  $('admin').hidden = true;
  $('signout').hidden = true;
  $('live').hidden = true;
  $('signin-section').hidden = false;
  text($('signin-error'), msg || '');
  $('token').focus();
}

// ---- live updates ----

function connect() {
  disconnect();
  if (typeof EventSource === 'undefined') {
    startPolling();
    return;
  }
  const es = new EventSource('/api/v1/events');
  state.events = es;
  setLive('connecting…', '');
  let broken = false;
  es.addEventListener('open', () => {
    setLive('live', 'ok');
    stopPolling();
    if (broken && state.selected) {
      // Metrics recorded while the stream was down (a coordinator restart)
      // are only in the history.
      loadHistory(state.selected);
      loadCheckpoints(state.selected);
    }
    broken = false;
  });
  es.addEventListener('jobs', (e) => {
    const jobs = parse(e.data);
    if (Array.isArray(jobs)) setJobs(jobs, true);
  });
  es.addEventListener('workers', (e) => {
    const ws = parse(e.data);
    if (Array.isArray(ws)) setWorkers(ws);
  });
  es.addEventListener('metric', (e) => {
    const m = parse(e.data);
    if (m && m.metric && m.job != null && String(m.job) === state.selected) addMetric(m.metric);
  });
  es.addEventListener('error', () => {
    if (es !== state.events) return;
    broken = true;
    if (es.readyState === EventSource.CLOSED) {
      // The stream was refused (401 when the session ended, or an older
      // coordinator without it): ask why, and poll meanwhile.
      setLive('reconnecting…', 'bad');
      startPolling();
      api('GET', '/api/v1/session').then(() => {
        setTimeout(() => {
          if (state.signedIn && state.events === es) connect();
        }, 5000);
      }, () => { /* api shows the sign-in form on 401 */ });
    } else {
      setLive('reconnecting…', 'bad');
    }
  });
}

function disconnect() {
  if (state.events) state.events.close();
  state.events = null;
  stopPolling();
}

function startPolling() {
  if (!state.poll) state.poll = setInterval(refresh, 2000);
}

function stopPolling() {
  clearInterval(state.poll);
  state.poll = 0;
}

function setLive(msg, cls) {
  const el = $('live');
  text(el, msg);
  el.className = 'live' + (cls ? ' ' + cls : '');
}

function parse(s) {
  try {
    return JSON.parse(s);
  } catch (e) {
    return null;
  }
}

// refresh reads jobs and workers once: at sign-in, and while the event
// stream is down.
async function refresh() {
  try {
    const jobs = await api('GET', '/api/v1/jobs');
    if (Array.isArray(jobs)) setJobs(jobs, state.poll !== 0);
  } catch (e) {
    if (e.status !== 401) text($('job-error'), 'Reading jobs: ' + e.message);
  }
  try {
    const ws = await api('GET', '/api/v1/workers');
    if (Array.isArray(ws)) setWorkers(ws);
    text($('workers-error'), '');
  } catch (e) {
    if (e.status !== 401) text($('workers-error'), 'Reading workers: ' + e.message);
  }
  await refreshRelays();
}

// refreshRelays reads the topology; the event stream does not carry it,
// so it is polled every few seconds while signed in.
async function refreshRelays() {
  try {
    // The operator's list: also relays quarantined or not yet approved.
    const rs = await api('GET', '/api/v1/relays/all');
    if (rs && Array.isArray(rs.relays)) setRelays(rs.relays);
    text($('relays-error'), '');
  } catch (e) {
    if (e.status !== 401) text($('relays-error'), 'Reading relays: ' + e.message);
  }
}

// ---- jobs ----

function findJob(id) {
  return state.jobs.find((j) => j.id === id);
}

// setJobs takes a fresh list of jobs; live says it is a sample of now, to
// extend the throughput chart with.
function setJobs(jobs, live) {
  state.jobs = jobs.filter((j) => j && j.id != null).map((j) => Object.assign({}, j, { id: String(j.id) }));
  if (!state.userSelected || !findJob(state.selected)) {
    const first = state.jobs.find((j) => j.state === 'running') || state.jobs[0];
    const id = first ? first.id : '';
    if (id !== state.selected) select(id, false);
  }
  const job = findJob(state.selected);
  // An ended job's throughput is over: the chart keeps its last picture.
  if (live && job && !jobEnded(job)) {
    const t = Date.now() / 1000;
    const tp = state.throughput;
    if (!tp.length || t - tp[tp.length - 1][0] >= 0.5) {
      tp.push([t, nullable(job.examples_per_sec), nullable(job.updates_per_sec)]);
      if (tp.length > HISTORY_POINTS + LIVE_POINTS) tp.splice(0, tp.length - HISTORY_POINTS - LIVE_POINTS);
      drawThroughput();
    }
  }
  renderJobs();
  renderJob();
}

// putJob replaces one job with the coordinator's answer to a command.
function putJob(job) {
  if (!job || job.id == null) return;
  job = Object.assign({}, job, { id: String(job.id) });
  const i = state.jobs.findIndex((j) => j.id === job.id);
  if (i >= 0) state.jobs[i] = job;
  else state.jobs.push(job);
  renderJobs();
  renderJob();
}

function renderJobs() {
  const cells = (j) => [
    jobName(j),
    j.state || '–',
    num(j.version) ? String(j.version) : '–',
    num(j.epoch) ? j.epoch + (num(j.epoch_progress) && !jobEnded(j) ? ' (' + Math.round(j.epoch_progress * 100) + '%)' : '') : '–',
    fmtRate(j.examples_per_sec),
    fmtRate(j.updates_per_sec),
    fmtInt(j.updates_applied) + (num(j.clipped) && j.clipped > 0 ? ' (' + fmtInt(j.clipped) + ' clipped)' : ''),
    rejectedText(j),
    j.eval && num(j.eval.bits_per_byte) ? j.eval.bits_per_byte.toFixed(3) + ' bits/byte'
      : j.eval && num(j.eval.bits_per_char) ? j.eval.bits_per_char.toFixed(3) + ' bpc' : fmtAcc(j.eval && j.eval.accuracy),
    fmtLoss(j.eval && j.eval.loss),
  ];
  const numeric = [false, false, true, true, true, true, true, false, true, true];
  syncRows($('jobs').tBodies[0], state.jobs, 'jobId', (tr, j) => {
    tr.tabIndex = 0;
    tr.addEventListener('click', () => select(j.id, true));
    tr.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' || e.key === ' ') {
        e.preventDefault();
        select(j.id, true);
      }
    });
    numeric.forEach((n) => {
      const td = tr.insertCell();
      if (n) td.className = 'num';
    });
  }, (tr, j) => {
    cells(j).forEach((s, i) => text(tr.cells[i], s));
    tr.cells[1].className = 'state-' + (j.state || 'unknown');
    const sel = j.id === state.selected;
    tr.classList.toggle('selected', sel);
    tr.setAttribute('aria-selected', String(sel));
  });
  $('jobs-empty').hidden = state.jobs.length > 0;
}

// syncRows makes tbody hold one row per item, keyed by data-<key>, changing
// only what changed: a row under the pointer is never replaced, so a click
// lands on the row it was aimed at.
function syncRows(tbody, items, key, create, update) {
  const old = new Map();
  for (const tr of Array.from(tbody.rows)) old.set(tr.dataset[key], tr);
  let prev = null;
  for (const item of items) {
    const id = String(item.id);
    let tr = old.get(id);
    if (tr) {
      old.delete(id);
    } else {
      tr = document.createElement('tr');
      tr.dataset[key] = id;
      create(tr, item);
    }
    update(tr, item);
    const want = prev ? prev.nextSibling : tbody.firstChild;
    if (want !== tr) tbody.insertBefore(tr, want);
    prev = tr;
  }
  for (const tr of old.values()) tr.remove();
}

function select(id, byUser) {
  if (byUser) state.userSelected = true;
  if (id === state.selected) return;
  state.selected = id;
  state.selectToken++;
  state.metrics = [];
  state.throughput = [];
  state.pendingMetrics = [];
  state.checkpointVersion = null;
  state.staleness = '';
  settingsDirty.lr = settingsDirty.max = settingsDirty.mode = settingsDirty.weight = settingsDirty.priority = false;
  for (const el of [$('lr'), $('max-staleness'), $('mode')]) el.classList.remove('invalid');
  for (const id of ['job-error', 'settings-error', 'settings-done', 'charts-error', 'checkpoints-error']) text($(id), '');
  drawMetrics();
  drawThroughput();
  renderJobs();
  renderJob();
  $('checkpoints').replaceChildren();
  $('job-notes').replaceChildren();
  if (id) {
    loadHistory(id);
    loadCheckpoints(id);
  }
}

function renderJob() {
  const job = findJob(state.selected);
  $('job-panel').hidden = !job;
  if (!job) return;
  const st = job.state || 'unknown';
  text($('job-name'), jobName(job));
  text($('job-state'), st);
  $('job-state').className = 'state state-' + st;
  text($('job-version'), num(job.version) ? String(job.version) : '–');
  $('pause').disabled = st !== 'running';
  $('resume').disabled = st !== 'paused';
  $('stop').disabled = st !== 'running' && st !== 'paused';
  // An ended job's settings cannot change: the form says so rather than
  // letting the operator type into it.
  const closed = st !== 'running' && st !== 'paused';
  for (const el of $('settings-form').elements) el.disabled = closed;
  $('apply-settings').disabled = settingsBusy || closed;
  text($('settings-closed'), closed ? 'This job ' + (jobEnded(job) ? 'has ended (' + st + ')' : 'is ' + st) +
    ': its settings can no longer change. Submit a new job to train with others.' : '');

  text($('job-id'), job.id);
  const spec = job.spec || {};
  // A preset's name, else the layer count of a custom model.
  const layers = spec.model && Array.isArray(spec.model.layers) ? spec.model.layers.length + ' layers' : '';
  const model = spec.model_preset || (typeof spec.model === 'string' ? spec.model : layers);
  const outer = spec.outer_optimizer || spec.optimizer;
  const opt = outer && outer.type;
  text($('job-model'), [model, opt, num(spec.batch_size) ? 'batch ' + spec.batch_size : ''].filter(Boolean).join(' · ') || '–');
  text($('job-epoch'), epochText(job));
  text($('job-examples'), fmtInt(job.examples_seen));
  text($('job-mode'), jobModeText(job));
  text($('job-lr'), fmtLR(jobLR(job)));
  text($('job-staleness'), (num(job.mean_staleness) ? job.mean_staleness.toFixed(2) : '–') +
    (num(jobMaxStaleness(job)) ? ' (max ' + jobMaxStaleness(job) + ')' : ''));
  text($('job-leases'), fmtInt(job.leases_held) + ' held, ' + fmtInt(job.leases_issued) + ' issued, ' + fmtInt(job.leases_expired) + ' expired');
  text($('job-workers'), fmtInt(job.workers));
  // Bytes per example are (bytes_in + bytes_out) / examples_seen. The
  // compression is the fp32 size over the bytes taken, for the updates
  // (update_codec) and the snapshots (snapshot_codec, deltas) apart: an
  // fp32 job's deltas must not read as compressed updates.
  text($('job-wire'), num(job.bytes_in) ? fmtBytes(job.bytes_in) + ' in, ' + fmtBytes(job.bytes_out) + ' out (+' +
    fmtBytes(job.shard_bytes_out) + ' shards) · ' + (num(job.bytes_per_example) && job.bytes_per_example > 0 ? fmtInt(Math.round(job.bytes_per_example)) + ' B/example' : '– B/example') +
    ' · compression: ' + wireCompression(job) : '–');
  if (typeof renderAcks === 'function') renderAcks(job); // admin-volunteers.js
  text($('job-params'), fmtInt(job.num_params) + (num(job.shards) ? ' · ' + fmtInt(job.shards) + ' shards' : ''));
  const ev = job.eval;
  // A text job has no accuracy worth showing: loss and bits per byte
  // (tokenized) or per character (bytes).
  const evText = ev && num(ev.bits_per_byte) ? 'loss ' + fmtLoss(ev.loss) + ' nats/token, ' + ev.bits_per_byte.toFixed(3) + ' bits/byte'
    : ev && num(ev.bits_per_char) ? 'loss ' + fmtLoss(ev.loss) + ' nats, ' + ev.bits_per_char.toFixed(3) + ' bits/char'
    : ev ? 'accuracy ' + fmtAcc(ev.accuracy) + ', loss ' + fmtLoss(ev.loss) : '';
  // An RL job is scored by its held-out prompts' reward and solved share,
  // its rollouts by what became of their groups (the job's rl view).
  const rlText = ev && num(ev.solved) ? 'solved ' + (100 * ev.solved).toFixed(1) + '%' + (num(ev.reward) ? ', reward ' + ev.reward.toFixed(3) : '') + ', ' : '';
  const rl = job.rl;
  $('job-rl-label').hidden = $('job-rl').hidden = !rl;
  if (rl) text($('job-rl'), rlSummary(rl, job.spot_checks && job.spot_checks.rollouts));
  text($('job-eval'), ev ? rlText + evText +
    (num(ev.version) ? ' at version ' + ev.version : '') + (ev.at ? ', ' + ago(ev.at) : '') : 'not yet');
  const sample = ev && typeof ev.sample === 'string' ? ev.sample : '';
  $('job-sample-label').hidden = $('job-sample-box').hidden = !sample;
  text($('job-sample'), sample);
  const cp = job.last_checkpoint;
  text($('job-checkpoint'), cp ? 'version ' + (num(cp.version) ? cp.version : '?') + (cp.at || cp.created_at ? ', ' + ago(cp.at || cp.created_at) : '') : 'none yet');
  // A checkpoint the coordinator could not write (disk full, read-only
  // file system) is retried; until it succeeds the operator must know.
  const cf = job.checkpoint_failure;
  text($('job-checkpoint-failure'), cf ? 'Checkpoint version ' + (num(cf.version) ? cf.version : '?') + ' is NOT written: ' +
    fmtInt(cf.failures) + ' failed attempts' + (cf.pending_since ? ' since ' + when(cf.pending_since) : '') +
    ', retrying' + (cf.next_retry ? ' ' + when(cf.next_retry) : '') + '. Last error: ' + (cf.last_error || 'unknown') +
    (st === 'finishing' ? '. The job has ended but stays “finishing” until its final checkpoint is written.' : '') : '');
  // A job no connected worker can run waits; the coordinator says why.
  text($('job-warning'), job.warning ? 'Waiting: ' + job.warning : '');
  text($('job-placement'), 'weight ' + (num(job.weight) ? job.weight : 1) + ', priority ' + (num(job.priority) ? job.priority : 0));
  text($('job-started'), job.started_at ? when(job.started_at) + (job.done_at ? ', ended ' + when(job.done_at) : '') : '–');
  text($('job-reason'), job.reason || '–');

  // Fill the settings with the live values unless the operator is editing.
  const lr = $('lr');
  const ms = $('max-staleness');
  if (!settingsDirty.lr && document.activeElement !== lr) lr.value = num(jobLR(job)) ? String(jobLR(job)) : '';
  if (!settingsDirty.max && document.activeElement !== ms) ms.value = num(jobMaxStaleness(job)) ? String(jobMaxStaleness(job)) : '';
  const mode = $('mode');
  if (!settingsDirty.mode && document.activeElement !== mode) mode.value = job.mode || 'async';
  const wt = $('weight');
  const pr = $('priority');
  if (!settingsDirty.weight && document.activeElement !== wt) wt.value = String(num(job.weight) ? job.weight : 1);
  if (!settingsDirty.priority && document.activeElement !== pr) pr.value = String(num(job.priority) ? job.priority : 0);

  $('export').href = '/api/v1/jobs/' + encodeURIComponent(job.id) + '/export';
  $('export').setAttribute('download', safeName(jobName(job)) + '-live.safetensors');
  $('export-onnx').href = '/api/v1/jobs/' + encodeURIComponent(job.id) + '/export?format=onnx';
  $('export-onnx').setAttribute('download', safeName(jobName(job)) + '-live.onnx');

  drawStaleness(job);
  const cv = cp && num(cp.version) ? cp.version : null;
  if (cv !== null && state.checkpointVersion !== null && cv !== state.checkpointVersion) loadCheckpoints(job.id);
}

// wireCompression says what the codecs save, updates and snapshots apart;
// an older coordinator has only the two together.
function wireCompression(job) {
  const x = (v) => (num(v) && v > 0 ? v.toFixed(2) + 'x' : '–');
  const spec = job.spec || {};
  if (!num(job.update_compression)) return x(job.compression);
  return 'updates ' + x(job.update_compression) + ' (' + (spec.update_codec || 'fp32') + '), snapshots and deltas ' +
    x(job.snapshot_compression) + ' (' + (spec.snapshot_codec || 'fp32') + ')';
}

function safeName(s) {
  return String(s).replace(/[^A-Za-z0-9._-]+/g, '_').slice(0, 64) || 'job';
}

async function command(verb) {
  const job = findJob(state.selected);
  if (!job) return;
  if (verb === 'stop' && !confirm('Stop job “' + jobName(job) + '”? A stopped job cannot be resumed.')) return;
  text($('job-error'), '');
  const btn = $(verb);
  btn.disabled = true;
  try {
    putJob(await api('POST', '/api/v1/jobs/' + encodeURIComponent(job.id) + '/' + verb));
  } catch (e) {
    if (e.status !== 401) text($('job-error'), 'Could not ' + verb + ': ' + e.message);
    renderJob();
  }
}

// ---- settings ----

const settingsDirty = { lr: false, max: false, mode: false, weight: false, priority: false };
let settingsBusy = false; // a PATCH is on its way

async function applySettings(ev) {
  ev.preventDefault();
  const job = findJob(state.selected);
  if (!job) return;
  const lrEl = $('lr');
  const msEl = $('max-staleness');
  lrEl.classList.remove('invalid');
  msEl.classList.remove('invalid');
  text($('settings-error'), '');
  text($('settings-done'), '');
  const patch = {};
  const lr = lrEl.value.trim() === '' ? NaN : Number(lrEl.value);
  const ms = msEl.value.trim() === '' ? NaN : Number(msEl.value);
  if (!(lr > 0) || !Number.isFinite(lr)) return settingsError('lr', 'lr: must be a number above 0');
  if (!Number.isInteger(ms) || ms < 0) return settingsError('max_staleness', 'max_staleness: must be a whole number, 0 or more');
  const mode = $('mode').value;
  if (mode !== (job.mode || 'async')) patch.mode = mode;
  // A new mode brings its own outer optimizer and rate: send lr with it
  // only when the operator changed it.
  if (lr !== jobLR(job) && (!patch.mode || settingsDirty.lr)) patch.lr = lr;
  if (ms !== jobMaxStaleness(job)) patch.max_staleness = ms;
  const wt = $('weight').value.trim() === '' ? NaN : Number($('weight').value);
  const pr = $('priority').value.trim() === '' ? NaN : Number($('priority').value);
  if (!(wt > 0) || !Number.isFinite(wt)) return settingsError('weight', 'weight: must be a number above 0 (its share of the grid)');
  if (!Number.isInteger(pr)) return settingsError('priority', 'priority: must be a whole number (higher is served first)');
  if (wt !== (num(job.weight) ? job.weight : 1)) patch.weight = wt;
  if (pr !== (num(job.priority) ? job.priority : 0)) patch.priority = pr;
  if (!Object.keys(patch).length) {
    text($('settings-done'), 'Nothing to change.');
    return;
  }
  settingsBusy = true;
  $('apply-settings').disabled = true;
  try {
    const updated = await api('PATCH', '/api/v1/jobs/' + encodeURIComponent(job.id), patch);
    settingsDirty.lr = settingsDirty.max = settingsDirty.mode = settingsDirty.weight = settingsDirty.priority = false;
    if (updated) putJob(updated);
    text($('settings-done'), 'Applied: ' + Object.keys(patch).map((k) => k + ' ' + patch[k]).join(', ') + '.');
  } catch (e) {
    if (e.status !== 401) settingsError(e.key, e.message);
  } finally {
    settingsBusy = false;
    renderJob();
  }
}

function settingsError(key, msg) {
  text($('settings-error'), msg);
  const el = key === 'lr' || /(^|\.)lr$/.test(key || '') ? $('lr') : key === 'max_staleness' ? $('max-staleness') :
    key === 'mode' ? $('mode') : key === 'weight' ? $('weight') : key === 'priority' ? $('priority') : null;
  if (el) {
    el.classList.add('invalid');
    el.focus();
  }
}

// ---- charts ----

const COLORS = { acc: '#2f6fdb', loss: '#e5484d', ex: '#2a8a4a', up: '#b7791f', bar: '#7c5cd6' };
const AXIS = { stroke: '#888', grid: { stroke: '#8883', width: 1 }, ticks: { stroke: '#8883', width: 1 } };

function axis(extra) {
  return Object.assign({}, AXIS, extra);
}

function makeCharts() {
  if (state.charts.accuracy) return;
  if (typeof uPlot === 'undefined') {
    text($('charts-error'), 'The chart library did not load; numbers above are still live.');
    return;
  }
  const pct = (u, v) => (v == null ? '–' : fmtAcc(v));
  const size = (el) => ({ width: Math.max(200, el.clientWidth || 400), height: 220 });
  const mk = (id, opts, data) => {
    const el = $(id);
    const u = new uPlot(Object.assign(size(el), opts), data, el);
    if (typeof ResizeObserver !== 'undefined') {
      new ResizeObserver(() => {
        const s = size(el);
        if (s.width !== u.width) u.setSize(s);
      }).observe(el);
    }
    return u;
  };
  state.charts.accuracy = mk('chart-accuracy', {
    scales: { x: { time: true, range: spanAtLeast(60) }, acc: { range: [0, 1] }, loss: {} },
    series: [
      {},
      { label: 'accuracy', scale: 'acc', stroke: COLORS.acc, width: 2, spanGaps: true, value: pct },
      { label: 'loss', scale: 'loss', stroke: COLORS.loss, width: 2, spanGaps: true, value: (u, v) => fmtLoss(v) },
    ],
    axes: [axis({}), axis({ scale: 'acc', values: (u, vs) => vs.map((v) => Math.round(v * 100) + '%') }),
      axis({ scale: 'loss', side: 1, grid: { show: false } })],
  }, [[], [], []]);
  state.charts.version = mk('chart-version', {
    scales: { x: { time: false, range: spanAtLeast(10) }, acc: { range: [0, 1] } },
    series: [
      { label: 'version' },
      { label: 'accuracy', scale: 'acc', stroke: COLORS.acc, width: 2, spanGaps: true, value: pct, points: { show: true, size: 4 } },
    ],
    axes: [axis({}), axis({ scale: 'acc', values: (u, vs) => vs.map((v) => Math.round(v * 100) + '%') })],
  }, [[], []]);
  state.charts.throughput = mk('chart-throughput', {
    scales: { x: { time: true, range: spanAtLeast(60) }, ex: { range: (u, min, max) => [0, Math.max(1, max) * 1.1] }, up: { range: (u, min, max) => [0, Math.max(1, max) * 1.1] } },
    series: [
      {},
      { label: 'examples/s', scale: 'ex', stroke: COLORS.ex, width: 2, spanGaps: true, value: (u, v) => fmtRate(v) },
      { label: 'updates/s', scale: 'up', stroke: COLORS.up, width: 2, spanGaps: true, value: (u, v) => fmtRate(v) },
    ],
    axes: [axis({}), axis({ scale: 'ex' }), axis({ scale: 'up', side: 1, grid: { show: false } })],
  }, [[], [], []]);
  const bars = uPlot.paths && uPlot.paths.bars ? uPlot.paths.bars({ size: [0.7, 60] }) : undefined;
  state.charts.staleness = mk('chart-staleness', {
    scales: {
      x: { time: false, range: (u) => [-0.5, Math.max(1, u.data[0].length) - 0.5] },
      y: { range: (u, min, max) => [0, Math.max(1, max) * 1.1] },
    },
    series: [
      { label: 'staleness', value: (u, v) => stalenessLabel(u, v) },
      { label: 'updates', stroke: COLORS.bar, fill: COLORS.bar + '88', paths: bars, points: { show: false }, value: (u, v) => fmtInt(v) },
    ],
    axes: [
      axis({ incrs: [1, 2, 5, 10, 20, 50, 100], values: (u, vs) => vs.map((v) => stalenessLabel(u, v)) }),
      axis({ values: (u, vs) => vs.map((v) => (Number.isInteger(v) ? fmtInt(v) : '')) }),
    ],
  }, [[], []]);
  drawMetrics();
  drawThroughput();
  const job = findJob(state.selected);
  if (job) drawStaleness(job);
}

// stalenessLabel names a bucket; the last one holds everything at or above it.
function stalenessLabel(u, v) {
  if (v == null || !Number.isInteger(v) || v < 0) return '';
  const n = u.data[0].length;
  return n && v === n - 1 ? '≥' + v : String(v);
}

function nullable(v) {
  return num(v) ? v : null;
}

async function loadHistory(id) {
  const token = state.selectToken;
  state.historyLoading = true;
  try {
    const rows = await api('GET', '/api/v1/jobs/' + encodeURIComponent(id) + '/metrics?points=' + HISTORY_POINTS);
    if (token !== state.selectToken) return;
    const hist = Array.isArray(rows) ? rows.filter((r) => r && Number.isFinite(seconds(r.at))) : [];
    const last = hist.length ? seconds(hist[hist.length - 1].at) : -Infinity;
    state.metrics = hist.concat(state.pendingMetrics.filter((r) => seconds(r.at) > last));
    const tp = hist.map((r) => [seconds(r.at), nullable(r.examples_per_sec), nullable(r.updates_per_sec)]);
    state.throughput = tp.concat(state.throughput.filter((p) => p[0] > last));
    text($('charts-error'), '');
  } catch (e) {
    if (token === state.selectToken && e.status !== 401) text($('charts-error'), 'Reading the metrics history: ' + e.message);
  } finally {
    if (token === state.selectToken) {
      state.historyLoading = false;
      state.pendingMetrics = [];
      drawMetrics();
      drawThroughput();
    }
  }
}

function addMetric(row) {
  if (!row || !Number.isFinite(seconds(row.at))) return;
  if (state.historyLoading) {
    state.pendingMetrics.push(row);
    return;
  }
  state.metrics.push(row);
  if (state.metrics.length > HISTORY_POINTS * 2) state.metrics.splice(0, state.metrics.length - HISTORY_POINTS * 2);
  drawMetrics();
}

// widenSinglePoint centres a lone point in a span: uPlot skips the range
// function when min equals max and would stretch one point over years.
function widenSinglePoint(u, xs, span) {
  if (xs.length === 1) u.setScale('x', { min: xs[0] - span / 2, max: xs[0] + span / 2 });
}

function drawMetrics() {
  const rows = state.metrics;
  const c = state.charts;
  if (c.accuracy) {
    const t = [];
    const acc = [];
    const loss = [];
    for (const r of rows) {
      if (!num(r.accuracy) && !num(r.loss)) continue;
      t.push(seconds(r.at));
      acc.push(nullable(r.accuracy));
      loss.push(nullable(r.loss));
    }
    c.accuracy.setData([t, acc, loss]);
    widenSinglePoint(c.accuracy, t, 60);
  }
  if (c.version) {
    const byVersion = new Map(); // the latest evaluation of each version
    for (const r of rows) if (num(r.version) && num(r.accuracy)) byVersion.set(r.version, r.accuracy);
    const vs = Array.from(byVersion.keys()).sort((a, b) => a - b);
    c.version.setData([vs, vs.map((v) => byVersion.get(v))]);
    widenSinglePoint(c.version, vs, 100);
  }
  renderNotes(rows);
}

function drawThroughput() {
  const u = state.charts.throughput;
  if (!u) return;
  const tp = state.throughput;
  u.setData([tp.map((p) => p[0]), tp.map((p) => p[1]), tp.map((p) => p[2])]);
}

function drawStaleness(job) {
  const u = state.charts.staleness;
  if (!u) return;
  const h = Array.isArray(job.staleness_histogram) ? job.staleness_histogram.map((v) => (num(v) ? v : 0)) : [];
  const key = JSON.stringify(h);
  if (key === state.staleness) return;
  state.staleness = key;
  u.setData([h.map((_, i) => i), h]);
}

function renderNotes(rows) {
  const notes = rows.filter((r) => typeof r.note === 'string' && r.note);
  const ul = $('job-notes');
  if (ul.childElementCount === notes.length && (notes.length === 0 || ul.lastChild.dataset.at === String(notes[notes.length - 1].at))) return;
  const items = notes.slice(-200).reverse().map((r) => {
    const li = document.createElement('li');
    li.dataset.at = String(r.at);
    li.textContent = when(r.at) + (num(r.version) ? ' · v' + r.version : '') + ' · ' + r.note;
    return li;
  });
  if (!items.length) {
    const li = document.createElement('li');
    li.className = 'muted';
    li.textContent = 'No setting changes recorded.';
    items.push(li);
  }
  ul.replaceChildren(...items);
}

// ---- checkpoints ----

async function loadCheckpoints(id) {
  const token = state.selectToken;
  const job = findJob(id);
  state.checkpointVersion = job && job.last_checkpoint && num(job.last_checkpoint.version) ? job.last_checkpoint.version : -1;
  try {
    const list = await api('GET', '/api/v1/jobs/' + encodeURIComponent(id) + '/checkpoints');
    if (token !== state.selectToken) return;
    text($('checkpoints-error'), '');
    renderCheckpoints(id, Array.isArray(list) ? list : []);
  } catch (e) {
    if (token === state.selectToken && e.status !== 401) text($('checkpoints-error'), 'Reading checkpoints: ' + e.message);
  }
}

function renderCheckpoints(id, list) {
  const job = findJob(id);
  const items = list.filter((c) => c && num(c.version)).map((c) => {
    const li = document.createElement('li');
    li.dataset.version = String(c.version);
    const parts = ['version ' + c.version];
    if (num(c.epoch)) parts.push('epoch ' + c.epoch);
    if (num(c.bytes)) parts.push(fmtBytes(c.bytes));
    const at = c.created_at || c.at;
    if (at) parts.push(when(at));
    li.append(parts.join(' · '));
    for (const format of ['safetensors', 'onnx']) {
      const a = document.createElement('a');
      a.className = 'download-checkpoint';
      a.href = '/api/v1/jobs/' + encodeURIComponent(id) + '/checkpoints/' + encodeURIComponent(c.version) + '/' + format;
      a.setAttribute('download', safeName(job ? jobName(job) : id) + '-v' + c.version + '.' + format);
      a.textContent = format === 'onnx' ? 'onnx' : 'download safetensors';
      li.append(a);
    }
    return li;
  });
  if (!items.length) {
    const li = document.createElement('li');
    li.className = 'muted';
    li.textContent = 'No checkpoints yet.';
    items.push(li);
  }
  $('checkpoints').replaceChildren(...items);
}

// ---- workers ----

function setWorkers(ws) {
  state.workers = ws.filter((w) => w && w.id != null).map((w) => Object.assign({}, w, { id: String(w.id) }));
  renderWorkers();
}

function renderWorkers() {
  if (!state.signedIn) return;
  const names = new Map(state.jobs.map((j) => [j.id, jobName(j)]));
  const numeric = [false, false, false, true, false, false, false, true, true, true, true, false, true, true, false, false, false];
  syncRows($('workers').tBodies[0], state.workers, 'workerId', (tr, w) => {
    numeric.forEach((n) => {
      const td = tr.insertCell();
      if (n) td.className = 'num';
    });
    tr.cells[4].className = 'clip';
    const b = document.createElement('button');
    b.type = 'button';
    b.className = 'disconnect danger';
    b.textContent = 'Disconnect';
    b.addEventListener('click', () => disconnectWorker(tr.dataset.workerId, b));
    tr.cells[16].append(b);
  }, (tr, w) => {
    const leases = Array.isArray(w.leases) ? w.leases : [];
    const cells = [
      w.id,
      w.kind || '–',
      w.backend || '–',
      num(w.threads) ? String(w.threads) : '–',
      w.client || '–',
      w.remote || '–',
      w.job != null && w.job !== '' ? names.get(String(w.job)) || String(w.job) : '–',
      fmtRate(w.examples_per_sec),
      fmtInt(w.accepted),
      fmtInt(w.rejected),
      fmtBytes(w.bytes_in) + ' / ' + fmtBytes(w.bytes_out),
      fmtLink(w.link),
      num(w.local_steps) && w.local_steps > 0 ? String(w.local_steps) : '–',
      num(w.comm_fraction) && w.comm_fraction > 0 ? (w.comm_fraction * 100).toFixed(1) + '%' : '–',
      leases.length ? leases.join(', ') : 'none',
      ago(w.last_seen),
    ];
    cells.forEach((s, i) => text(tr.cells[i], s));
    tr.cells[4].title = w.client || '';
    tr.cells[15].title = when(w.last_seen) + (w.connected_at ? '; connected ' + when(w.connected_at) : '');
  });
  $('workers-empty').hidden = state.workers.length > 0;
}

// rlSummary says what an RL job's rollouts did: completions scored, the
// groups a learn lease took and how stale, those dropped, and the checks
// of their log-probabilities.
function rlSummary(rl, checks) {
  const n = (v) => (num(v) ? v : 0);
  const used = (rl.used_staleness || []).map((c, s) => 'staleness ' + s + ': ' + fmtInt(c)).join(', ');
  let s = fmtInt(n(rl.rollouts)) + ' completions scored (' + fmtInt(n(rl.solved)) + ' solved) in ' + fmtInt(n(rl.rollout_results)) +
    ' results of ' + fmtBytes(n(rl.rollout_bytes)) + ' · ' + fmtInt(n(rl.groups_used)) + ' groups learnt from' + (used ? ' (' + used + ')' : '') +
    ', ' + fmtInt(n(rl.flat_groups)) + ' flat, ' + fmtInt(n(rl.stale_groups)) + ' stale, ' + fmtInt(n(rl.buffered_groups)) + ' buffered · ' +
    fmtInt(n(rl.refused)) + ' refused (' + fmtInt(n(rl.forged)) + ' forged)';
  if (checks) s += ' · ' + fmtInt(n(checks.checked)) + ' checked in ' + n(checks.seconds).toFixed(1) + ' s';
  return s;
}

// ---- topology: the root, its relays and their workers ----

function setRelays(rs) {
  state.relays = rs.filter((r) => r && r.name != null).map((r) => Object.assign({}, r, { id: String(r.name) }));
  renderRelays();
}

function renderRelays() {
  if (!state.signedIn) return;
  const relays = state.relays || [];
  const behind = relays.reduce((n, r) => n + (num(r.workers) ? r.workers : 0), 0);
  text($('topology-root'), 'This coordinator: ' + fmtInt(state.workers.length) + ' workers connected here' +
    (relays.length ? '; ' + fmtInt(relays.length) + ' relays with ' + fmtInt(behind) + ' workers behind them' : '') + '.');
  const numeric = [false, false, true, true, true, true, false, false];
  syncRows($('relays').tBodies[0], relays, 'relayName', (tr) => {
    numeric.forEach((n) => {
      const td = tr.insertCell();
      if (n) td.className = 'num';
    });
    // The operator's say over a relay: vouch for its URL, let it back in
    // after a quarantine, cut it off.
    for (const [cls, label, act] of [['approve', 'Approve', relayApprove], ['lift', 'Lift quarantine', relayLift],
      ['revoke danger', 'Revoke', relayRevoke]]) {
      const b = document.createElement('button');
      b.type = 'button';
      b.className = cls;
      b.textContent = label;
      b.addEventListener('click', () => act(tr.dataset.relayName, b));
      tr.cells[7].append(b);
    }
  }, (tr, r) => {
    const cells = [
      r.name + (r.quarantined ? ' (quarantined)' : (r.approved === false ? ' (awaiting approval)' : '')),
      r.url || '–',
      fmtInt(r.workers),
      fmtBytes(Math.round(r.upstream_bytes_per_sec)) + '/s (' + fmtBytes(r.upstream_bytes) + ' in all)',
      fmtInt(r.aggregates_applied) + ' / ' + fmtInt(r.aggregates_refused) + ' / ' + fmtInt(r.aggregates_duplicate) +
        (num(r.aggregates_forged) && r.aggregates_forged > 0 ? ' (' + fmtInt(r.aggregates_forged) + ' forged)' : ''),
      r.max_aggregates_per_round ? fmtInt(r.max_aggregates_per_round) : '–',
      ago(r.last_seen),
    ];
    cells.forEach((s, i) => text(tr.cells[i], s));
    tr.cells[0].title = r.quarantined ? 'Quarantined: ' + (r.quarantine_reason || '') +
      '. DELETE /api/v1/relays/' + r.name + '/quarantine lets it back in.' :
      (r.approved === false ? 'Not listed to volunteers: POST /api/v1/relays/' + r.name + '/approve vouches for its URL.' : '');
    tr.classList.toggle('error', !!r.quarantined);
    tr.cells[6].title = when(r.last_seen);
    const approve = tr.querySelector('button.approve');
    approve.textContent = r.approved ? 'Withdraw' : 'Approve';
    approve.dataset.approved = r.approved ? '1' : '';
    tr.querySelector('button.lift').hidden = !r.quarantined;
  });
  $('relays-empty').hidden = relays.length > 0;
}

// relayAction calls the admin API for a relay and reads the list again.
async function relayAction(method, path, btn, doing) {
  text($('relays-error'), '');
  btn.disabled = true;
  try {
    await api(method, path);
    await refreshRelays();
  } catch (e) {
    if (e.status !== 401) text($('relays-error'), doing + ': ' + e.message);
  } finally {
    btn.disabled = false;
  }
}

function relayApprove(name, btn) {
  const approved = btn.dataset.approved === '1';
  if (approved && !confirm('Withdraw relay ' + name + '? Volunteers no longer find it, and pages may no longer connect to it.')) return;
  return relayAction(approved ? 'DELETE' : 'POST', '/api/v1/relays/' + encodeURIComponent(name) + '/approve', btn,
    (approved ? 'Withdrawing ' : 'Approving ') + name);
}

function relayLift(name, btn) {
  return relayAction('DELETE', '/api/v1/relays/' + encodeURIComponent(name) + '/quarantine', btn, 'Lifting ' + name + "'s quarantine");
}

function relayRevoke(name, btn) {
  if (!confirm('Revoke relay ' + name + "'s credential? It is disconnected at once, its leases go back to the queue, and it needs a new credential to come back.")) return;
  return relayAction('DELETE', '/api/v1/relays/' + encodeURIComponent(name) + '/credential', btn, 'Revoking ' + name);
}

async function disconnectWorker(id, btn) {
  const w = state.workers.find((x) => x.id === id);
  const what = w ? (w.kind || 'worker') + ' ' + id + (w.remote ? ' at ' + w.remote : '') : 'worker ' + id;
  if (!confirm('Disconnect ' + what + '? Its leases go back to the queue.')) return;
  text($('workers-error'), '');
  btn.disabled = true;
  try {
    await api('DELETE', '/api/v1/workers/' + encodeURIComponent(id));
    dropWorker(id);
  } catch (e) {
    btn.disabled = false;
    if (e.status === 404) dropWorker(id);
    else if (e.status !== 401) text($('workers-error'), 'Could not disconnect ' + id + ': ' + e.message);
  }
}

function dropWorker(id) {
  state.workers = state.workers.filter((x) => x.id !== id);
  renderWorkers();
}

// ---- submitting jobs ----

async function loadPresets() {
  const sel = $('submit-preset');
  try {
    const names = await api('GET', '/api/v1/presets');
    if (!Array.isArray(names)) return;
    const keep = sel.value;
    const opts = [sel.options[0]];
    for (const n of names) {
      const name = typeof n === 'string' ? n : n && n.name;
      if (!name) continue;
      const o = document.createElement('option');
      o.value = name;
      o.textContent = name;
      opts.push(o);
    }
    sel.replaceChildren(...opts);
    sel.value = keep;
    if (sel.value !== keep) sel.value = '';
    labelSubmit();
  } catch (e) { /* presets are a convenience; a spec still works */ }
}

async function loadFile() {
  const f = $('submit-file').files[0];
  if (!f) return;
  try {
    $('submit-spec').value = await f.text();
    $('submit-preset').value = '';
    labelSubmit();
    clearSubmitError();
    text($('submit-done'), 'Loaded ' + f.name + '.');
  } catch (e) {
    text($('submit-error'), 'Could not read ' + f.name + ': ' + e.message);
  }
}

function clearSubmitError() {
  const err = $('submit-error');
  err.replaceChildren();
  err.removeAttribute('data-key');
  err.removeAttribute('data-line');
  $('submit-spec').classList.remove('invalid');
  $('submit-spec').removeAttribute('aria-invalid');
  $('submit-backdrop').replaceChildren();
}

async function submitJob(ev) {
  ev.preventDefault();
  clearSubmitError();
  text($('submit-done'), '');
  const preset = $('submit-preset').value;
  const spec = $('submit-spec').value;
  let body;
  if (preset) body = { preset };
  else if (spec.trim()) body = { spec };
  else {
    text($('submit-error'), 'Paste a spec, load a file, or pick a preset.');
    return;
  }
  $('submit').disabled = true;
  try {
    const job = await api('POST', '/api/v1/jobs', body);
    if (job && job.kind === 'sweep') {
      // A sweep's trials are jobs; the sweep itself shows under Sweeps.
      text($('submit-done'), 'Submitted sweep ' + job.name + ' (' + job.id + '): ' + (job.trials || []).length + ' trials.');
      if (typeof loadSweeps === 'function') loadSweeps(); // admin-sweeps.js
      refresh();
    } else if (job && job.id != null) {
      putJob(job);
      select(String(job.id), true);
      text($('submit-done'), 'Submitted job ' + jobName(job) + ' (' + job.id + ').');
      const row = $('jobs').querySelector('tr[data-job-id="' + CSS.escape(String(job.id)) + '"]');
      if (row) row.scrollIntoView({ block: 'nearest' });
    } else {
      text($('submit-done'), 'Submitted.');
      refresh();
    }
  } catch (e) {
    if (e.status !== 401) showSubmitError(e, body.spec !== undefined);
  } finally {
    $('submit').disabled = false;
  }
}

// labelSubmit says on the button what Submit sends: the preset or the text.
function labelSubmit() {
  const p = $('submit-preset').value;
  text($('submit'), p ? 'Submit preset ' + p : 'Submit');
}

// showSubmitError puts the coordinator's complaint next to the spec and,
// when it names a key, marks the line that holds the key.
function showSubmitError(e, fromText) {
  const err = $('submit-error');
  const key = e.key || '';
  const msg = key && e.problem ? key + ': ' + e.problem : e.message;
  err.replaceChildren(msg);
  if (!key) return;
  err.dataset.key = key;
  const ta = $('submit-spec');
  ta.classList.add('invalid');
  ta.setAttribute('aria-invalid', 'true');
  if (!fromText) return;
  const line = findKeyLine(ta.value, key);
  if (line < 0) return;
  err.dataset.line = String(line + 1);
  const where = document.createElement('span');
  where.className = 'where';
  where.textContent = ' — line ' + (line + 1) + ': ' + ta.value.split('\n')[line].trim();
  err.append(where);
  markLine(ta, line);
}

// findKeyLine returns the index of the line that holds key ("batch_size",
// "optimizer.lr", "layers[1].units") in YAML or JSON text, or -1: each part
// of the key is looked for after the line of the part before it.
function findKeyLine(src, key) {
  const lines = src.split('\n');
  const parts = key.split(/[.[\]]+/).filter((p) => p && !/^\d+$/.test(p));
  if (!parts.length) return -1;
  const esc = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  let from = 0;
  let found = -1;
  for (const p of parts) {
    const re = new RegExp('^\\s*(-\\s+)?(' + esc(p) + '|"' + esc(p) + '"|\'' + esc(p) + '\')\\s*:|[{,]\\s*"?' + esc(p) + '"?\\s*:');
    let hit = -1;
    for (let i = from; i < lines.length; i++) {
      if (re.test(lines[i])) {
        hit = i;
        break;
      }
    }
    if (hit < 0) return found;
    found = hit;
    from = hit;
  }
  return found;
}

// markLine highlights one line of the textarea through its backdrop and
// scrolls it into view.
function markLine(ta, line) {
  const lines = ta.value.split('\n');
  const bd = $('submit-backdrop');
  const before = lines.slice(0, line).join('\n') + (line > 0 ? '\n' : '');
  const mark = document.createElement('mark');
  mark.textContent = lines[line] || ' ';
  bd.replaceChildren(before, mark, '\n' + lines.slice(line + 1).join('\n') + '\n');
  const lh = parseFloat(getComputedStyle(ta).lineHeight) || 18;
  ta.scrollTop = Math.max(0, line * lh - ta.clientHeight / 2);
  bd.scrollTop = ta.scrollTop;
  bd.scrollLeft = ta.scrollLeft;
  const start = before.length;
  ta.focus();
  ta.setSelectionRange(start, start + (lines[line] || '').length);
}

// ---- wiring ----

function init() {
  $('signin-form').addEventListener('submit', signIn);
  $('signout').addEventListener('click', signOut);
  for (const verb of ['pause', 'resume', 'stop']) $(verb).addEventListener('click', () => command(verb));
  $('settings-form').addEventListener('submit', applySettings);
  $('lr').addEventListener('input', () => {
    settingsDirty.lr = true;
    $('lr').classList.remove('invalid');
  });
  $('mode').addEventListener('change', () => {
    settingsDirty.mode = true;
    $('mode').classList.remove('invalid');
  });
  $('max-staleness').addEventListener('input', () => {
    settingsDirty.max = true;
    $('max-staleness').classList.remove('invalid');
  });
  for (const k of ['weight', 'priority']) {
    $(k).addEventListener('input', () => {
      settingsDirty[k] = true;
      $(k).classList.remove('invalid');
    });
  }
  $('submit-form').addEventListener('submit', submitJob);
  $('submit-preset').addEventListener('change', labelSubmit);
  $('submit-file').addEventListener('change', loadFile);
  $('submit-spec').addEventListener('input', () => {
    // Editing the text means submitting it, and the old mark is stale.
    $('submit-preset').value = '';
    labelSubmit();
    if ($('submit-backdrop').firstChild) $('submit-backdrop').replaceChildren();
    $('submit-spec').classList.remove('invalid');
  });
  $('submit-spec').addEventListener('scroll', () => {
    $('submit-backdrop').scrollTop = $('submit-spec').scrollTop;
    $('submit-backdrop').scrollLeft = $('submit-spec').scrollLeft;
  });
  window.addEventListener('beforeunload', () => disconnect());
  checkSession();
}

if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init);
else init();
