// The leaderboard on the contribute page: the coordinator's public credit
// list (GET /api/v1/volunteers: display names and credit only), read every
// 10 s. Names are the volunteers' own words, so they go in as text, never
// as markup. The row whose name is this browser's is marked. Uses
// identity.js and units.js.
'use strict';

const leaderboard = (() => {
  const REFRESH_MS = 10000;
  const intFmt = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });

  function cell(tr, text, cls) {
    const td = tr.insertCell();
    td.textContent = text;
    if (cls) td.className = cls;
    return td;
  }

  function render(list) {
    const me = identity.name();
    const rows = list.map((v, i) => {
      const tr = document.createElement('tr');
      const name = typeof v.name === 'string' ? v.name : '';
      cell(tr, String(i + 1), 'num');
      const td = tr.insertCell();
      const span = document.createElement('span');
      span.className = name ? 'name' : 'name anonymous';
      span.textContent = name || 'anonymous';
      td.append(span);
      if (name && name === me) {
        tr.classList.add('me');
        const you = document.createElement('span');
        you.className = 'you';
        you.textContent = '(you)';
        td.append(you);
      }
      cell(tr, typeof v.examples === 'number' ? intFmt.format(v.examples) : '–', 'num examples');
      const flops = cell(tr, fmtFlops(v.flops), 'num flops');
      if (typeof v.flops === 'number') flops.title = intFmt.format(v.flops) + ' floating-point operations';
      return tr;
    });
    document.querySelector('#leaderboard tbody').replaceChildren(...rows);
    document.getElementById('leaderboard-empty').hidden = rows.length > 0;
  }

  async function refresh() {
    const err = document.getElementById('leaderboard-error');
    try {
      const resp = await fetch('/api/v1/volunteers', { headers: { Accept: 'application/json' } });
      if (!resp.ok) throw new Error(resp.status + ' ' + resp.statusText + ': ' + (await resp.text()).slice(0, 200));
      const body = await resp.json();
      render(body && Array.isArray(body.volunteers) ? body.volunteers : []);
      err.textContent = '';
    } catch (e) {
      err.textContent = 'Could not read the leaderboard: ' + e.message;
    }
  }

  function start() {
    refresh();
    setInterval(refresh, REFRESH_MS);
  }

  return { start, refresh };
})();
