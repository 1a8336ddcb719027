// The browser worker's Web Worker: it loads Go's wasm_exec.js and the worker
// compiled to WebAssembly, caches data shards in Cache Storage, and relays
// control messages from the page to Go (crowdtrainControl) and reports from
// Go to the page (crowdtrainReport). One Go instance per Web Worker: Go's
// wasm has no threads, so the page starts several of these for several cores.
'use strict';

importScripts('wasm_exec.js');

// Shards are immutable: a data set's URL (/api/v1/data/KEY/...) is named by
// its contents, and a job id is never reused. So a reload takes them from
// Cache Storage instead of the network, and jobs that cut the same data
// (a sweep's trials) share them. Their URL names the shard format
// (/shards/v2/N), so a cached shard of another format never matches.
// Snapshots go through the browser's HTTP cache (they are served with
// strong ETags).
const SHARD_PATH = /^\/api\/v1\/(jobs|data)\/[^/]+\/shards\/v\d+\/\d+$/;
const DATA_KEY = /^\/api\/v1\/data\/([0-9a-f]+)\/shards\//;
const SHARD_CACHE = 'crowdtrain-shards-v2';
// The cache of format-1 shards is of no use any more.
if (self.caches) caches.delete('crowdtrain-shards-v1').catch(() => {});
const MAX_CACHED_SHARDS = 512;
const cacheStats = { hits: 0, misses: 0 };
const netFetch = self.fetch.bind(self);

self.fetch = async function (input, init) {
  const url = new URL(typeof input === 'string' ? input : input.url, self.location.href);
  if (!SHARD_PATH.test(url.pathname) || !self.caches) {
    return netFetch(input, init);
  }
  let store;
  try {
    store = await caches.open(SHARD_CACHE);
    const hit = await store.match(url.href);
    if (hit) {
      cacheStats.hits++;
      return hit;
    }
  } catch (e) {
    return netFetch(input, init); // Cache Storage unavailable (private mode): plain fetch
  }
  const resp = await netFetch(input, init);
  if (resp.ok) {
    cacheStats.misses++;
    try {
      await store.put(url.href, resp.clone());
      const keys = await store.keys();
      for (const old of keys.slice(0, Math.max(0, keys.length - MAX_CACHED_SHARDS))) {
        await store.delete(old);
      }
    } catch (e) { /* over quota: train without caching */ }
  }
  return resp;
};

// Called by Go for snapshots and shards: one fetch, one ArrayBuffer, which Go
// copies in one step (net/http's js transport copies a stream chunk by chunk).
// workerId goes in the X-Crowdtrain-Worker header: the coordinator counts the
// bytes for this worker.
self.crowdtrainFetchBytes = async (url, signal, workerId) => {
  const init = { signal };
  if (workerId) init.headers = { 'X-Crowdtrain-Worker': workerId };
  const resp = await fetch(url, init);
  if (!resp.ok) {
    const text = await resp.text();
    throw new Error(resp.status + ' ' + resp.statusText + ': ' + text.slice(0, 500));
  }
  return new Uint8Array(await resp.arrayBuffer());
};

// Messages that arrive before Go is running wait here.
const pending = [];
// Messages are handled in order: a start waits for the cache's keys, and
// what follows it must not overtake it.
let inbox = Promise.resolve();
self.onmessage = (e) => {
  inbox = inbox.then(() => handle(e.data)).catch(() => {});
};

async function handle(m) {
  if (m && m.type === 'start') {
    // The coordinator prefers jobs whose data the tab holds: tell it
    // which data sets Cache Storage has shards of.
    m.data = await cachedDataKeys();
  }
  if (m && (m.type === 'start' || m.type === 'bench' || m.type === 'gradient')) {
    backend = await chooseBackend(m);
    m.backend = backend.name;
    m.backendReason = backend.reason;
  }
  if (self.crowdtrainControl) {
    self.crowdtrainControl(m);
  } else {
    pending.push(m);
  }
}

async function cachedDataKeys() {
  const keys = new Set();
  try {
    if (self.caches) {
      const store = await caches.open(SHARD_CACHE);
      for (const req of await store.keys()) {
        const m = DATA_KEY.exec(new URL(req.url).pathname);
        if (m && keys.size < 64) keys.add(m[1]);
      }
    }
  } catch (e) { /* no Cache Storage: nothing held */ }
  return Array.from(keys);
}

// Called by Go once it has registered crowdtrainControl.
self.crowdtrainReady = () => {
  for (const m of pending.splice(0)) self.crowdtrainControl(m);
};

let wasmMemory = null; // the Go instance's linear memory, once it runs
let memoryReady;
const goMemory = new Promise((resolve) => { memoryReady = resolve; });

// The backends: webgpu, the kernels in WGSL on the GPU (package
// worker/wasm/webgpu, driven by Go on the device handed over here as
// globalThis.crowdtrainGPU); wasm-simd, the GEMM in WebAssembly SIMD
// (simd.wasm, written by package internal/wasmsimd), instantiated on the Go
// module's memory so that it works on Go's slices in place; wasm-go, Go's
// own scalar kernel, everywhere. backend is the one chosen, with why; Go
// may still fall back from webgpu (its kernels fail to build, or its
// self-test on the GPU fails) and then reports its own reason.
let backend = { name: 'wasm-go', reason: '' };
let simdLoad = null; // the SIMD module's load, once tried
let gpuLoad = null; // the GPU's request, once made (made again when its device is lost)

function loadSIMD() {
  simdLoad ??= (async () => {
    const resp = await netFetch('simd.wasm');
    if (!resp.ok) throw new Error('simd.wasm: ' + resp.status);
    const bytes = await resp.arrayBuffer();
    if (!WebAssembly.validate(bytes)) throw new Error('this browser has no WebAssembly SIMD');
    const mem = await goMemory;
    const { instance } = await WebAssembly.instantiate(bytes, { env: { mem } });
    self.crowdtrainSIMDBlock = instance.exports.block;
    self.crowdtrainSIMDSparse = instance.exports.sparse;
  })();
  return simdLoad;
}

// requestGPU asks the browser for a WebGPU adapter and device, with the
// adapter's largest buffers. hook stands in for browsers the test machines
// lack: 'off' a browser without WebGPU, 'lost' an adapter whose device
// fails at once (?webgpu=off|lost).
function requestGPU(hook) {
  gpuLoad ??= openGPU(hook);
  gpuLoad.catch(() => { gpuLoad = null; });
  return gpuLoad;
}

async function openGPU(hook) {
  if (hook === 'off' || !self.navigator || !navigator.gpu) throw new Error('this browser has no WebGPU');
  const adapter = await navigator.gpu.requestAdapter({ powerPreference: 'high-performance' });
  if (!adapter) throw new Error('the browser offers no WebGPU adapter');
  const info = adapter.info || {};
  const name = [info.vendor, info.architecture, info.description].filter(Boolean).join(' ') || 'an unnamed GPU';
  // A software adapter (SwiftShader, or the browser's fallback) runs the
  // kernels on the CPU, slower than wasm-simd.
  const software = !!(info.isFallbackAdapter || adapter.isFallbackAdapter) || /swiftshader|llvmpipe|software/i.test(name);
  const requiredLimits = {};
  for (const k of ['maxStorageBufferBindingSize', 'maxBufferSize']) requiredLimits[k] = adapter.limits[k];
  const device = await adapter.requestDevice({ requiredLimits });
  device.lost.then(() => { gpuLoad = null; });
  if (hook === 'lost') device.destroy();
  self.crowdtrainGPU = device;
  self.crowdtrainGPUName = name + (software ? ' (software)' : '');
  return { name, software };
}

// chooseBackend settles the backend for m.backend ('' the best there is,
// 'wasm-simd', 'wasm-go' or 'webgpu'); m.backendWhy says how it was
// chosen (the page's ?backend=, a remembered choice); m.gpu false is the
// volunteer's "use my GPU" turned off; m.simd false stands in for a
// browser without WebAssembly SIMD (?simd=off, for tests), m.webgpu for a
// browser without WebGPU or with a failing one (requestGPU).
async function chooseBackend(m) {
  const want = m.backend || '', why = m.backendWhy || '', simd = m.simd !== false;
  // The CPU backend is loaded in any case: Go falls back to it when the
  // GPU fails.
  const cpu = (async (prefix) => {
    try {
      if (!simd) throw new Error('WebAssembly SIMD is turned off (?simd=off)');
      await loadSIMD();
      return { name: 'wasm-simd', reason: prefix + 'WebAssembly SIMD (f32x4) kernels, the fastest CPU backend this browser has' };
    } catch (e) {
      return { name: 'wasm-go', reason: prefix + 'wasm-simd is not available (' + e.message + '): the scalar Go kernel' };
    }
  });
  if (want === 'wasm-go') {
    return { name: 'wasm-go', reason: (why || 'asked for') + ': the scalar Go kernel' };
  }
  if (want === 'wasm-simd') return cpu(why ? why + ': ' : '');
  if (want === 'webgpu' || (want === '' && m.gpu !== false)) {
    let gpu;
    try {
      gpu = await requestGPU(m.webgpu || '');
    } catch (e) {
      await cpu('');
      return cpu((why || 'webgpu asked for') + ', but WebGPU is not available (' + e.message + '): ');
    }
    await cpu('');
    if (want === 'webgpu') {
      return { name: 'webgpu', reason: (why || 'asked for') + ': the GPU (' + gpu.name + ') through WebGPU' +
        (gpu.software ? ', a software adapter that emulates a GPU on the CPU' : '') };
    }
    if (!gpu.software) {
      return { name: 'webgpu', reason: (why || 'chosen automatically') + ': the GPU (' + gpu.name + ') through WebGPU' };
    }
    return cpu((why || 'chosen automatically') + ' (the only WebGPU adapter, ' + gpu.name + ', is a software one): ');
  }
  return cpu(why ? why + (m.gpu === false && why === 'chosen automatically' ? ' ("use my GPU" is off)' : '') + ': ' : '');
}

// Called by Go with each report; cache counters and the size of Go's heap
// (wasm memory only grows) are added here, where they are known.
self.crowdtrainReport = (m) => {
  m.cacheHits = cacheStats.hits;
  m.cacheMisses = cacheStats.misses;
  if (wasmMemory) m.memoryBytes = wasmMemory.buffer.byteLength;
  // Go reports its own reason when it fell back from the one chosen here.
  if ((m.type === 'stats' || m.type === 'bench' || m.type === 'gradient') && !m.backendReason) m.backendReason = backend.reason;
  self.postMessage(m);
};

async function load() {
  const go = new Go();
  let result;
  try {
    result = await WebAssembly.instantiateStreaming(fetch('crowdtrain.wasm'), go.importObject);
  } catch (e) {
    // A proxy that rewrites the Content-Type breaks streaming; compile from bytes.
    const resp = await fetch('crowdtrain.wasm');
    if (!resp.ok) {
      throw new Error('crowdtrain.wasm: ' + resp.status + ' ' + (await resp.text()));
    }
    result = await WebAssembly.instantiate(await resp.arrayBuffer(), go.importObject);
  }
  wasmMemory = result.instance.exports.mem;
  memoryReady(wasmMemory);
  await go.run(result.instance);
  self.postMessage({ type: 'exited' });
}

load().catch((e) => self.postMessage({ type: 'error', message: 'could not start the browser worker: ' + e.message }));
