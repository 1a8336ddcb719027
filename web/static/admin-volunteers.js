// The admin page's volunteers: their standing and credit (GET
// /api/v1/volunteers/standing, read every 5 s while signed in), Ban (with a
// reason the volunteer sees) and Pardon, the join tokens (issue, list,
// revoke), and each job's results by ack reason. Loaded after admin.js,
// whose helpers (api, text, num, fmtInt, ago, when, syncRows) it calls and
// which calls volunteersStart, volunteersStop and renderAcks once they
// exist; fmtFlops is from units.js.
'use strict';

// The reasons an ack can give besides a plain rejection; each job shows
// all of them, zeros included, so the operator sees what is not happening.
const ACK_REASONS = ['clipped', 'quarantined', 'banned', 'rate_limited', 'duplicate'];
const VOLUNTEERS_MS = 5000;

const vol = {
  list: [], // standing rows, in the coordinator's order
  tokens: [],
  timer: 0,
  banning: '', // the id the ban dialog is for
  acks: '', // the ack counts last drawn, as JSON
};

// ---- ack reasons per job ----

// renderAcks lists job's results by ack reason: clipped (accepted, applied
// clipped) from its own field, the refusals from its rejections map.
function renderAcks(job) {
  const r = job.rejections && typeof job.rejections === 'object' ? job.rejections : {};
  const counts = new Map(ACK_REASONS.map((k) => [k, 0]));
  if (num(job.clipped)) counts.set('clipped', job.clipped);
  for (const k of Object.keys(r).sort()) if (num(r[k])) counts.set(k, r[k]);
  const sig = JSON.stringify([...counts]);
  if (sig === vol.acks) return;
  vol.acks = sig;
  const items = [...counts].map(([k, n]) => {
    const li = document.createElement('li');
    li.dataset.reason = k;
    li.dataset.count = String(n);
    li.className = n > 0 ? '' : 'zero';
    li.textContent = k.replace(/_/g, ' ') + ' ' + fmtInt(n);
    return li;
  });
  $('job-acks').replaceChildren(...items);
}

// ---- volunteers ----

async function loadVolunteers() {
  try {
    const body = await api('GET', '/api/v1/volunteers/standing');
    const list = body && Array.isArray(body.volunteers) ? body.volunteers : [];
    vol.list = list.filter((v) => v && v.id != null).map((v) => Object.assign({}, v, { id: String(v.id) }));
    renderVolunteers();
    text($('volunteers-error'), '');
  } catch (e) {
    if (e.status !== 401) text($('volunteers-error'), 'Reading volunteers: ' + e.message);
  }
}

function renderVolunteers() {
  const numeric = [false, false, false, true, true, true, true, false, false, true, false, false];
  syncRows($('volunteers').tBodies[0], vol.list, 'volunteerId', (tr) => {
    numeric.forEach((n) => {
      const td = tr.insertCell();
      if (n) td.className = 'num';
    });
    tr.cells[0].className = 'clip name';
    tr.cells[1].className = 'id';
    tr.cells[7].className = 'reason standing';
    tr.cells[8].className = 'addresses';
    const ban = document.createElement('button');
    ban.type = 'button';
    ban.className = 'ban danger';
    ban.textContent = 'Ban';
    ban.addEventListener('click', () => askBan(tr.dataset.volunteerId));
    const pardon = document.createElement('button');
    pardon.type = 'button';
    pardon.className = 'pardon';
    pardon.textContent = 'Pardon';
    pardon.addEventListener('click', () => pardonVolunteer(tr.dataset.volunteerId, pardon));
    tr.cells[11].append(ban, pardon);
  }, (tr, v) => {
    const addrs = Array.isArray(v.addresses) ? v.addresses.map(String) : [];
    const refuted = num(v.refuted_examples) ? v.refuted_examples : 0;
    const cells = [
      v.name || 'anonymous',
      v.id,
      v.token_name || '–',
      fmtInt(v.examples),
      fmtFlops(v.flops),
      fmtInt(refuted),
      fmtInt(v.strikes),
      v.banned ? 'banned: ' + (v.ban_reason || 'no reason given') : 'in good standing',
      addrs.length ? addrs.join(', ') : '–',
      fmtInt(v.connected),
      v.last_seen ? ago(v.last_seen) : '–',
    ];
    cells.forEach((s, i) => text(tr.cells[i], s));
    tr.cells[0].title = v.name || '';
    tr.cells[4].title = num(v.flops) ? fmtInt(v.flops) + ' floating-point operations' : '';
    tr.cells[8].title = addrs.join('\n');
    tr.cells[10].title = v.last_seen ? when(v.last_seen) : '';
    tr.classList.toggle('banned', !!v.banned);
    tr.dataset.banned = v.banned ? '1' : '0';
    tr.querySelector('button.ban').hidden = !!v.banned;
    tr.querySelector('button.pardon').hidden = !v.banned;
  });
  $('volunteers-empty').hidden = vol.list.length > 0;
}

function askBan(id) {
  const v = vol.list.find((x) => x.id === id);
  vol.banning = id;
  text($('ban-who'), (v && v.name ? v.name + ' ' : '') + '(' + id + ')');
  $('ban-reason').value = '';
  text($('ban-error'), '');
  $('ban-confirm').disabled = false;
  $('ban-dialog').showModal();
  $('ban-reason').focus();
}

async function banVolunteer(ev) {
  ev.preventDefault();
  const reason = $('ban-reason').value.trim();
  if (!reason) {
    text($('ban-error'), 'Say why: the volunteer sees the reason, and so do you later.');
    return;
  }
  const id = vol.banning;
  $('ban-confirm').disabled = true;
  try {
    await api('POST', '/api/v1/volunteers/' + encodeURIComponent(id) + '/ban', { reason });
    $('ban-dialog').close();
    await loadVolunteers();
  } catch (e) {
    if (e.status === 404) text($('ban-error'), 'The coordinator knows no volunteer ' + id + '.');
    else if (e.status !== 401) text($('ban-error'), 'Could not ban ' + id + ': ' + e.message);
  } finally {
    $('ban-confirm').disabled = false;
  }
}

async function pardonVolunteer(id, btn) {
  text($('volunteers-error'), '');
  btn.disabled = true;
  try {
    await api('POST', '/api/v1/volunteers/' + encodeURIComponent(id) + '/pardon');
    await loadVolunteers();
  } catch (e) {
    if (e.status !== 401) text($('volunteers-error'), 'Could not pardon ' + id + ': ' + e.message);
  } finally {
    btn.disabled = false;
  }
}

// ---- join tokens ----

async function loadTokens() {
  try {
    const body = await api('GET', '/api/v1/tokens');
    const list = body && Array.isArray(body.tokens) ? body.tokens : [];
    vol.tokens = list.filter((t) => t && t.id != null).map((t) => Object.assign({}, t, { id: String(t.id) }));
    renderTokens();
  } catch (e) {
    if (e.status !== 401) text($('tokens-error'), 'Reading tokens: ' + e.message);
  }
}

function renderTokens() {
  syncRows($('tokens').tBodies[0], vol.tokens, 'tokenId', (tr) => {
    for (let i = 0; i < 5; i++) tr.insertCell();
    const b = document.createElement('button');
    b.type = 'button';
    b.className = 'revoke danger';
    b.textContent = 'Revoke';
    b.addEventListener('click', () => revokeToken(tr.dataset.tokenId, b));
    tr.cells[4].append(b);
  }, (tr, t) => {
    [t.name || '–', t.id, t.created_at ? when(t.created_at) : '–', t.revoked ? 'revoked' : 'active']
      .forEach((s, i) => text(tr.cells[i], s));
    tr.classList.toggle('revoked', !!t.revoked);
    tr.querySelector('button.revoke').hidden = !!t.revoked;
  });
  $('tokens-empty').hidden = vol.tokens.length > 0;
}

async function issueToken(ev) {
  ev.preventDefault();
  const name = $('token-name').value.trim();
  text($('tokens-error'), '');
  if (!name) {
    text($('tokens-error'), 'Name the volunteer the token is for.');
    $('token-name').focus();
    return;
  }
  $('issue-token').disabled = true;
  try {
    const t = await api('POST', '/api/v1/tokens', { name });
    if (!t || typeof t.token !== 'string') throw new Error('the coordinator sent no token');
    $('token-name').value = '';
    text($('token-issued-name'), t.name || name);
    text($('token-secret'), t.token);
    text($('token-link'), location.origin + '/?token=' + encodeURIComponent(t.token));
    text($('token-copy'), 'Copy');
    $('token-issued').hidden = false;
    await loadTokens();
  } catch (e) {
    if (e.status !== 401) text($('tokens-error'), 'Could not issue a token: ' + e.message);
  } finally {
    $('issue-token').disabled = false;
  }
}

async function copyToken() {
  const secret = $('token-secret').textContent;
  try {
    await navigator.clipboard.writeText(secret);
    text($('token-copy'), 'Copied');
  } catch (e) {
    // No clipboard access (an insecure origin, a denied permission):
    // select it for the operator to copy.
    const r = document.createRange();
    r.selectNodeContents($('token-secret'));
    getSelection().removeAllRanges();
    getSelection().addRange(r);
    text($('token-copy'), 'Selected: press Ctrl+C');
  }
}

async function revokeToken(id, btn) {
  const t = vol.tokens.find((x) => x.id === id);
  if (!confirm('Revoke the token of ' + (t && t.name ? t.name : id) + '? It stops working for new connections.')) return;
  text($('tokens-error'), '');
  btn.disabled = true;
  try {
    await api('DELETE', '/api/v1/tokens/' + encodeURIComponent(id));
    await loadTokens();
  } catch (e) {
    btn.disabled = false;
    if (e.status !== 401) text($('tokens-error'), 'Could not revoke ' + id + ': ' + e.message);
  }
}

// ---- lifecycle ----

function volunteersStart() {
  loadVolunteers();
  loadTokens();
  if (!vol.timer) vol.timer = setInterval(loadVolunteers, VOLUNTEERS_MS);
}

function volunteersStop() {
  clearInterval(vol.timer);
  vol.timer = 0;
  if ($('ban-dialog').open) $('ban-dialog').close();
  // The secret of the last issued token is not left on a signed-out page.
  $('token-issued').hidden = true;
  text($('token-secret'), '');
}

$('ban-form').addEventListener('submit', banVolunteer);
$('ban-cancel').addEventListener('click', () => $('ban-dialog').close());
$('token-form').addEventListener('submit', issueToken);
$('token-copy').addEventListener('click', copyToken);
// Signed in before this script ran: start now.
if (state.signedIn) volunteersStart();
