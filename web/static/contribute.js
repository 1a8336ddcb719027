// The contribute page: starts Web Workers (static/worker.js), each running
// one Go browser worker, relays Pause/Resume and the CPU-use setting to them,
// and shows their combined counters. Settings live in localStorage; the
// volunteer's key, name and join token come from identity.js.
'use strict';

const SETTINGS_KEY = 'crowdtrain.settings.v1';
const $ = (id) => document.getElementById(id);

const settings = Object.assign({ cpu: '1', workers: '1', pauseHidden: false, job: '', backend: '', useGPU: true }, load());
const workers = []; // { worker, stats }
let running = false; // Contribute pressed and not stopped
let userPaused = false; // Pause pressed
let hiddenPaused = false; // paused because the tab is hidden
let failure = '';
let joinMode = ''; // "open" or "token" from GET /api/v1/join; '' until known

function load() {
  try {
    return JSON.parse(localStorage.getItem(SETTINGS_KEY)) || {};
  } catch (e) {
    return {};
  }
}

function save() {
  try {
    localStorage.setItem(SETTINGS_KEY, JSON.stringify(settings));
  } catch (e) { /* storage disabled: settings last for this visit */ }
}

function wsURL() {
  return (location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/ws';
}

// coordinators is where the tab's workers connect: this coordinator's
// relays, the least busy first, then this coordinator itself, which a
// worker falls back to when no relay can be reached (findRelays).
let coordinators = wsURL();

// findRelays asks this coordinator for its relays (docs/RELAYS.md).
async function findRelays() {
  try {
    const resp = await fetch('/api/v1/relays', { cache: 'no-store' });
    if (!resp.ok) return;
    const body = await resp.json();
    const relays = (Array.isArray(body.relays) ? body.relays : [])
      .filter((r) => r && typeof r.url === 'string' && /^wss?:\/\//.test(r.url))
      .map((r) => ({ url: r.url, workers: Number(r.workers) || 0, tie: Math.random() }))
      .sort((a, b) => a.workers - b.workers || a.tie - b.tie);
    coordinators = relays.map((r) => r.url).concat([wsURL()]).join(',');
    // A native worker given this coordinator's http URL joins its relays too.
    if (relays.length) $('ws-url').textContent = location.origin;
  } catch (e) { /* an older coordinator: connect to it */ }
}

function paused() {
  return userPaused || hiddenPaused;
}

function post(msg) {
  for (const w of workers) w.worker.postMessage(msg);
}

function spawn() {
  const entry = { worker: new Worker('/static/worker.js'), stats: null, stopping: false };
  entry.worker.onmessage = (e) => {
    const m = e.data;
    if (entry.stopping) return; // said bye: what it says now is of no use
    if (m.type === 'stats') {
      entry.stats = m;
    } else if (m.type === 'error') {
      failure = m.message;
      if (m.code === 'join_token') {
        showTokenError(m.detail || m.message);
        failure = 'The coordinator did not let this tab in: it refused the join token (see below).';
      }
    } else if (m.type === 'log') {
      console.log('crowdtrain worker:', m.message);
    }
    render();
  };
  entry.worker.onerror = (e) => {
    // A stopped Go program can still be called by a fetch that settles
    // after it exited; that is no failure of the page.
    if (entry.stopping) return;
    failure = 'worker script failed: ' + (e.message || 'unknown error');
    render();
  };
  const b = requestedBackend();
  // One worker drives the GPU; the others train on the CPU's other cores
  // (unless ?backend= forces a backend on all of them).
  const gpuTaken = workers.length > 0 && !forcedBackend();
  if (gpuTaken && b.want === 'webgpu') {
    b.want = '';
    b.why = 'the first worker has the GPU';
  }
  entry.worker.postMessage({
    type: 'start',
    backend: b.want,
    backendWhy: b.why,
    gpu: !!settings.useGPU && !gpuTaken,
    simd: new URLSearchParams(location.search).get('simd') !== 'off',
    webgpu: new URLSearchParams(location.search).get('webgpu') || '',
    coordinator: coordinators,
    duty: Number(settings.cpu),
    client: 'crowdtrain-browser (' + navigator.userAgent + ')',
    paused: paused(),
    job: settings.job,
    memoryMB: memoryMB(),
    ...who(),
  });
  workers.push(entry);
}

// The backends a tab may train on: ?backend= forces one (a forced one
// that is not available falls back as the page would, and says why);
// without it the page asks for the one it chose on an earlier visit, or
// for the best there is, and remembers what the workers then use. The
// GPU is used only while "use my GPU" is on (remembered too).
// ?webgpu=off|lost stands in for a browser without WebGPU or with a GPU
// that fails (for tests).
const BACKENDS = ['wasm-go', 'wasm-simd', 'webgpu'];

function forcedBackend() {
  return new URLSearchParams(location.search).get('backend') !== null;
}

function requestedBackend() {
  const forced = new URLSearchParams(location.search).get('backend');
  if (forced !== null) {
    if (BACKENDS.includes(forced)) return { want: forced, why: '?backend=' + forced + ' asked for it' };
    return { want: '', why: '?backend=' + forced.slice(0, 40) + ' names no backend (' + BACKENDS.join(', ') + ')' };
  }
  if (BACKENDS.includes(settings.backend) && (settings.backend !== 'webgpu' || settings.useGPU)) {
    return { want: settings.backend, why: 'remembered from this browser\'s earlier choice' };
  }
  return { want: '', why: 'chosen automatically' };
}

// memoryMB is the memory a job may use in this tab, told to the
// coordinator so that it never sends a model the tab cannot hold: half
// the device's (navigator.deviceMemory, in GB, where the browser says),
// at most the 4 GB a wasm instance can address, 2 GB where unknown;
// ?memory_mb= overrides it (for debugging and tests).
function memoryMB() {
  const forced = Number(new URLSearchParams(location.search).get('memory_mb'));
  if (forced > 0) return Math.floor(forced);
  const gb = navigator.deviceMemory;
  return gb ? Math.min(4096, Math.floor((gb * 1024) / 2)) : 2048;
}

// fit starts or stops Web Workers until there are as many as the setting asks.
function fit() {
  const want = running ? Number(settings.workers) : 0;
  while (workers.length < want) spawn();
  while (workers.length > want) {
    const w = workers.pop();
    w.stopping = true;
    w.worker.postMessage({ type: 'stop' }); // says bye, then the page ends it
    setTimeout(() => w.worker.terminate(), 3000);
  }
}

// who is the identity each worker sends in its hello. A token goes only
// where the coordinator asks for one (or has not said yet).
function who() {
  return {
    volunteerKey: identity.key(),
    name: identity.name(),
    token: joinMode === 'open' ? '' : identity.token(),
  };
}

// reidentify reconnects the running workers under the current name and
// token: the hello is where the coordinator learns them.
function reidentify() {
  if (!running) return;
  failure = '';
  post({ type: 'identity', ...who() });
  render();
}

function showTokenError(msg) {
  $('token-box').hidden = false;
  $('token-error').textContent = 'The coordinator refused the join token: ' + msg;
  $('join-token').classList.add('invalid');
}

function setPaused() {
  post({ type: paused() ? 'pause' : 'resume' });
  render();
}

function sum(key) {
  let s = 0;
  for (const w of workers) s += (w.stats && w.stats[key]) || 0;
  return s;
}

function state() {
  if (failure) return 'error';
  if (workers.some((w) => w.stats && w.stats.banned)) return 'banned';
  if (!running) return workers.length ? 'stopping' : 'not started';
  if (paused()) return hiddenPaused && !userPaused ? 'paused (tab hidden)' : 'paused';
  const states = workers.map((w) => (w.stats ? w.stats.state : 'loading'));
  for (const s of ['training', 'generating', 'waiting for work', 'connecting', 'reconnecting', 'loading']) {
    if (states.includes(s)) return s;
  }
  return states[0] || 'loading';
}

function render() {
  $('state').textContent = state();
  $('examples').textContent = sum('computed').toLocaleString('en-US');
  $('rate').textContent = Math.round(paused() ? 0 : sum('rate')).toLocaleString('en-US');
  $('accepted').textContent = sum('accepted').toLocaleString('en-US');
  $('rejected').textContent = sum('rejected').toLocaleString('en-US');
  $('cached').textContent = sum('cacheHits').toLocaleString('en-US');
  $('memory').textContent = (sum('memoryBytes') / 1048576).toFixed(0) + ' MB';
  let version = -1;
  let reason = '';
  for (const w of workers) {
    if (!w.stats) continue;
    version = Math.max(version, w.stats.version);
    if (w.stats.jobName) {
      $('job').textContent = w.stats.jobName;
      $('helping').textContent = w.stats.jobName + ' (' + w.stats.jobId + ')';
    }
    if (w.stats.lastReason) reason = w.stats.lastReason;
  }
  if (version >= 0) $('version').textContent = String(version);
  const first = workers.find((w) => w.stats && w.stats.backend);
  if (first) {
    $('backend').textContent = first.stats.backend;
    $('backend-reason').textContent = first.stats.backendReason || '';
    // Remember the automatic choice; a forced one is the URL's to keep.
    if (new URLSearchParams(location.search).get('backend') === null && settings.backend !== first.stats.backend) {
      settings.backend = first.stats.backend;
      save();
    }
  }
  $('last-reason').textContent = reason ? 'Last rejection: ' + reason : '';
  $('contribute').disabled = running || $('contribute').dataset.blocked === '1';
  $('pause').disabled = !running;
  $('pause').textContent = userPaused ? 'Resume' : 'Pause';
  $('stop').disabled = !running;
  const banned = workers.map((w) => w.stats && w.stats.banned).find(Boolean);
  const notice = $('notice');
  if (notice.dataset.reason !== 'no-worker') {
    const msg = failure || (banned ? 'Banned. The coordinator says: ' + banned.replace(/[.\s]+$/, '') +
      '. This tab asks again every minute, in case the ban is lifted.' : '');
    notice.dataset.reason = failure ? 'error' : banned ? 'banned' : '';
    if (notice.textContent !== msg) notice.textContent = msg;
    notice.hidden = !msg;
  }
}

// showJoin asks how the coordinator admits volunteers, and shows the
// token field where it wants a token.
async function showJoin() {
  try {
    const resp = await fetch('/api/v1/join');
    if (!resp.ok) return; // a coordinator without join modes: no token field
    const body = await resp.json();
    joinMode = body && typeof body.mode === 'string' ? body.mode : '';
  } catch (e) {
    return;
  }
  $('token-box').hidden = joinMode !== 'token';
}

function initIdentity() {
  identity.takeTokenFromURL();
  const name = $('volunteer-name');
  name.value = identity.name();
  const check = () => {
    const v = name.value.trim();
    const problem = identity.nameProblem(v);
    $('name-error').textContent = problem ? 'This name cannot be used: ' + problem + '.' : '';
    name.classList.toggle('invalid', !!problem);
    return problem ? null : v;
  };
  name.addEventListener('input', check);
  name.addEventListener('change', () => {
    const v = check();
    if (v === null || v === identity.name()) return;
    identity.setName(v);
    name.value = v;
    leaderboard.refresh(); // the mark moves to the new name
    reidentify();
  });

  const token = $('join-token');
  token.value = identity.token();
  if (token.value) $('token-box').hidden = false;
  token.addEventListener('change', () => {
    const v = token.value.trim();
    token.value = v;
    $('token-error').textContent = '';
    token.classList.remove('invalid');
    if (v === identity.token()) return;
    identity.setToken(v);
    reidentify();
  });
}

async function showJob() {
  try {
    const resp = await fetch('/api/v1/jobs');
    const jobs = await resp.json();
    const job = jobs.find((j) => j.state === 'running') || jobs[0];
    if (!workers.some((w) => w.stats && w.stats.jobName)) {
      if (job) {
        $('job').textContent = job.name;
        $('version').textContent = String(job.version);
      } else {
        $('job').textContent = 'nothing yet (no job is running)';
      }
    }
    let sweeps = [];
    const sr = await fetch('/api/v1/sweeps');
    if (sr.ok) sweeps = await sr.json();
    fillPicker(jobs, sweeps);
  } catch (e) { /* the counters still work without the summary */ }
}

// fillPicker lists the running jobs and sweeps the volunteer may pin this
// tab to; the choice is remembered, and kept in the list while it exists.
function fillPicker(jobs, sweeps) {
  const pick = $('job-pick');
  const inSweep = new Set();
  for (const s of sweeps) for (const id of s.trials || []) inSweep.add(id);
  const options = [['', 'any (the coordinator chooses)']];
  for (const s of sweeps) {
    if (s.state === 'running' || s.id === settings.job) options.push([s.id, 'sweep ' + s.name + ' (' + s.trials.length + ' trials)']);
  }
  for (const j of jobs) {
    if (inSweep.has(j.id)) continue;
    if (j.state === 'running' || j.id === settings.job) options.push([j.id, j.name + ' (' + j.id + ')']);
  }
  const key = JSON.stringify(options);
  if (pick.dataset.key !== key) {
    pick.dataset.key = key;
    pick.innerHTML = '';
    for (const [value, label] of options) {
      const o = document.createElement('option');
      o.value = value;
      o.textContent = label;
      pick.appendChild(o);
    }
  }
  pick.value = options.some(([v]) => v === settings.job) ? settings.job : '';
}

function init() {
  const notice = $('notice');
  if (notice.dataset.reason === 'no-worker') {
    $('contribute').dataset.blocked = '1';
  }
  $('ws-url').textContent = wsURL();
  findRelays();

  const cores = Math.max(1, navigator.hardwareConcurrency || 1);
  const sel = $('workers');
  sel.innerHTML = '';
  for (let n = 1; n <= cores; n++) {
    const o = document.createElement('option');
    o.value = o.textContent = String(n);
    sel.appendChild(o);
  }
  settings.workers = String(Math.min(Number(settings.workers) || 1, cores));
  sel.value = settings.workers;
  sel.disabled = cores === 1;
  $('cpu').value = ['0.25', '0.5', '1'].includes(settings.cpu) ? settings.cpu : '1';
  $('pause-hidden').checked = !!settings.pauseHidden;
  $('use-gpu').checked = !!settings.useGPU;

  $('contribute').addEventListener('click', () => {
    running = true;
    userPaused = false;
    hiddenPaused = settings.pauseHidden && document.hidden;
    failure = '';
    fit();
    render();
  });
  $('pause').addEventListener('click', () => {
    userPaused = !userPaused;
    setPaused();
  });
  $('stop').addEventListener('click', () => {
    running = false;
    fit();
    render();
  });
  $('cpu').addEventListener('change', () => {
    settings.cpu = $('cpu').value;
    save();
    post({ type: 'duty', value: Number(settings.cpu) });
  });
  sel.addEventListener('change', () => {
    settings.workers = sel.value;
    save();
    fit();
    render();
  });
  $('job-pick').addEventListener('change', () => {
    settings.job = $('job-pick').value;
    save();
    // The hello names the job: the running workers reconnect pinned to it.
    if (running) post({ type: 'job', job: settings.job });
    render();
  });
  $('use-gpu').addEventListener('change', () => {
    settings.useGPU = $('use-gpu').checked;
    settings.backend = ''; // choose again, with or without the GPU
    save();
    // The workers start again on the backend the new setting gives.
    if (running) {
      running = false;
      fit();
      running = true;
      fit();
    }
    render();
  });
  $('pause-hidden').addEventListener('change', () => {
    settings.pauseHidden = $('pause-hidden').checked;
    save();
    onVisibility();
  });
  document.addEventListener('visibilitychange', onVisibility);
  // Closing the tab: each worker says bye so its leases return at once
  // (the browser also closes the sockets when the page goes).
  window.addEventListener('pagehide', () => post({ type: 'stop' }));

  initIdentity();
  setInterval(render, 1000);
  showJob();
  setInterval(showJob, 5000);
  showJoin();
  leaderboard.start();
  render();
}

function onVisibility() {
  const want = running && settings.pauseHidden && document.hidden;
  if (want !== hiddenPaused) {
    hiddenPaused = want;
    setPaused();
  }
}

init();
