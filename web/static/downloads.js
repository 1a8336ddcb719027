// The contribute page's offer of a native worker: the release archive for
// the visitor's OS and architecture from this coordinator's /downloads/
// (serve --downloads), with a one-line install that already names this
// coordinator, and the join token when it asks for one. Without downloads
// it says where to get the worker. Loaded after identity.js.
'use strict';

const downloads = (() => {
  const $ = (id) => document.getElementById(id);
  const OS_NAMES = { linux: 'Linux', darwin: 'macOS', windows: 'Windows' };
  const ARCH_NAMES = { amd64: 'x86-64', arm64: 'ARM64' };
  const ARCHIVE = /^crowdtrain_[A-Za-z0-9._+-]+_(linux|darwin|windows)_(amd64|arm64)\.(tar\.gz|zip)$/;

  // detect guesses the visitor's platform: navigator.userAgentData where
  // the browser has it (Chromium: the real architecture too), else the
  // user agent string. Macs name "Intel" in it whatever their chip, so a
  // Mac without userAgentData is taken for Apple silicon, and the page
  // says the guess.
  async function detect() {
    let os = '';
    let arch = '';
    let guessed = false;
    const uad = navigator.userAgentData;
    if (uad && uad.platform) {
      const p = uad.platform.toLowerCase();
      if (p === 'macos') os = 'darwin';
      else if (p === 'windows') os = 'windows';
      else if (p === 'linux' || p === 'chrome os' || p === 'chromeos') os = 'linux';
      if (os && uad.getHighEntropyValues) {
        try {
          const h = await uad.getHighEntropyValues(['architecture', 'bitness']);
          if (h.bitness !== '32' && h.architecture === 'arm') arch = 'arm64';
          if (h.bitness !== '32' && h.architecture === 'x86') arch = 'amd64';
        } catch (e) { /* not told: the user agent string below */ }
      }
    }
    const ua = navigator.userAgent || '';
    if (!os) {
      if (/Windows NT/.test(ua)) os = 'windows';
      else if (/Macintosh|Mac OS X/.test(ua) && !/iPhone|iPad|iPod/.test(ua)) os = 'darwin';
      else if (/Linux|X11|CrOS/.test(ua) && !/Android/.test(ua)) os = 'linux';
    }
    if (!arch && os) {
      if (/aarch64|arm64/i.test(ua)) arch = 'arm64';
      else if (os !== 'darwin' && /x86_64|x64|Win64|WOW64|amd64/i.test(ua)) arch = 'amd64';
      else {
        arch = os === 'darwin' ? 'arm64' : 'amd64';
        guessed = true;
      }
    }
    return { os, arch, guessed };
  }

  // archives reads /downloads/SHA256SUMS: null when this coordinator
  // offers no downloads.
  async function archives() {
    try {
      const resp = await fetch('/downloads/SHA256SUMS', { cache: 'no-cache' });
      if (!resp.ok) return null;
      const out = [];
      for (const line of (await resp.text()).split('\n')) {
        const m = /^([0-9a-f]{64}) [ *](\S+)$/.exec(line.trim());
        const a = m && ARCHIVE.exec(m[2]);
        if (a) out.push({ sha: m[1], name: m[2], os: a[1], arch: a[2] });
      }
      return out;
    } catch (e) {
      return null;
    }
  }

  async function joinMode() {
    try {
      const resp = await fetch('/api/v1/join');
      if (!resp.ok) return '';
      const body = await resp.json();
      return body && typeof body.mode === 'string' ? body.mode : '';
    } catch (e) {
      return '';
    }
  }

  // command is the one line that installs the worker for os from this
  // coordinator; token goes in when the coordinator asks for one.
  function command(os, tokenMode, token) {
    const origin = location.origin;
    const t = token && /^[A-Za-z0-9._~+=-]+$/.test(token) ? token : 'YOUR_JOIN_TOKEN';
    if (os === 'windows') {
      return tokenMode
        ? `& ([scriptblock]::Create((irm ${origin}/install.ps1))) -JoinToken ${t}`
        : `irm ${origin}/install.ps1 | iex`;
    }
    return tokenMode
      ? `curl -fsSL ${origin}/install.sh | sh -s -- --join-token ${t}`
      : `curl -fsSL ${origin}/install.sh | sh`;
  }

  function label(a) {
    return (OS_NAMES[a.os] || a.os) + ' ' + (ARCH_NAMES[a.arch] || a.arch);
  }

  async function show() {
    const [plat, list, mode] = await Promise.all([detect(), archives(), joinMode()]);
    const box = $('native');
    box.dataset.os = plat.os;
    box.dataset.arch = plat.arch;
    if (list === null || list.length === 0) {
      $('native-none').hidden = false;
      box.dataset.state = 'none';
      return;
    }
    const mine = list.find((a) => a.os === plat.os && a.arch === plat.arch);
    const tokenMode = mode === 'token';
    if (mine) {
      $('native-platform').textContent = label(mine) + (plat.guessed ? ' (a guess: pick another below if it is wrong)' : '');
      const link = $('native-download');
      link.href = '/downloads/' + mine.name;
      link.textContent = mine.name;
      $('native-sha').textContent = mine.sha;
      $('native-command').textContent = command(mine.os, tokenMode, identity.token());
      $('native-offer').hidden = false;
      $('native-service').textContent = mine.os === 'windows'
        ? 'Add -Service (with the second form, as for -JoinToken) to start it at every logon.'
        : 'Add --service (sh -s -- --service) to run it in the background at every login.';
      box.dataset.state = 'offer';
    } else {
      $('native-unknown').hidden = false;
      box.dataset.state = 'unknown';
    }
    $('native-token').hidden = !tokenMode;
    const others = $('native-list');
    others.textContent = '';
    for (const a of list) {
      if (a === mine) continue;
      if (others.childNodes.length) others.append(', ');
      const link = document.createElement('a');
      link.href = '/downloads/' + a.name;
      link.textContent = label(a);
      link.title = a.name + ', SHA-256 ' + a.sha;
      others.append(link);
    }
    $('native-others').hidden = !others.childNodes.length;
  }

  return { show, detect, command };
})();

downloads.show();
