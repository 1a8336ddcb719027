// Who this browser is to the coordinator: a volunteer key made once and
// kept (credit and standing attach to it), a display name for the
// leaderboard, and the join token when the coordinator asks for one. All
// three live in localStorage and go to the coordinator in each worker's
// hello. Loaded before contribute.js and leaderboard.js, which use it.
'use strict';

const identity = (() => {
  const KEY = 'crowdtrain.volunteerKey';
  const NAME = 'crowdtrain.name';
  const TOKEN = 'crowdtrain.joinToken';
  const MAX_NAME_BYTES = 64; // protocol.MaxVolunteerName
  const memory = {}; // where values live when storage is disabled: this visit only

  function get(k) {
    try {
      const v = localStorage.getItem(k);
      if (v !== null) return v;
    } catch (e) { /* storage disabled */ }
    return memory[k] || '';
  }

  function set(k, v) {
    memory[k] = v;
    try {
      if (v === '') localStorage.removeItem(k);
      else localStorage.setItem(k, v);
    } catch (e) { /* storage disabled: kept for this visit */ }
  }

  // A key is 32 random bytes in base64url without padding (43 characters),
  // the form the coordinator accepts (22 to 128 of [A-Za-z0-9_-]).
  function newKey() {
    const b = new Uint8Array(32);
    crypto.getRandomValues(b);
    let s = '';
    for (const x of b) s += String.fromCharCode(x);
    return btoa(s).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
  }

  // key returns this browser's volunteer key, made on first use. A stored
  // value of the wrong form (edited by hand) is replaced.
  function key() {
    let k = get(KEY);
    if (!/^[A-Za-z0-9_-]{22,128}$/.test(k)) {
      k = newKey();
      set(KEY, k);
    }
    return k;
  }

  // nameProblem says what is wrong with a display name, by the rules the
  // coordinator applies (protocol.CheckVolunteerName), or '' when nothing
  // is. The coordinator has the last word: what it refuses shows as an
  // error from the worker.
  function nameProblem(name) {
    // A lone surrogate has no UTF-8 form.
    if (/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?:^|[^\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(name)) {
      return 'not valid UTF-8 (a broken character); retype it';
    }
    const bytes = new TextEncoder().encode(name).length;
    if (bytes > MAX_NAME_BYTES) {
      return 'too long: ' + bytes + ' bytes, at most ' + MAX_NAME_BYTES + ' allowed';
    }
    const m = name.match(/[\p{Cc}\p{Cf}]/u);
    if (m) {
      const cp = m[0].codePointAt(0).toString(16).toUpperCase().padStart(4, '0');
      return 'holds the control or format character U+' + cp + '; use letters, digits, punctuation and spaces';
    }
    return '';
  }

  // The token from a ?token= link is kept and taken out of the address,
  // so it stays out of the history and of links copied from the bar.
  function takeTokenFromURL() {
    const u = new URL(location.href);
    const t = u.searchParams.get('token');
    if (t === null) return;
    set(TOKEN, t.trim());
    u.searchParams.delete('token');
    history.replaceState(null, '', u.pathname + u.search + u.hash);
  }

  return {
    key,
    nameProblem,
    takeTokenFromURL,
    name: () => get(NAME),
    setName: (v) => set(NAME, v),
    token: () => get(TOKEN),
    setToken: (v) => set(TOKEN, v),
  };
})();
