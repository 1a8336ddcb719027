// TensorFlow.js 4.22 timing the same training steps as crowdtrain's
// {type: "bench"} control: forward, softmax cross-entropy, backward and an
// SGD update at the given batch, on random inputs or on the batch the
// message carries (xBytes: float32 pixels, labelBytes: one label per byte),
// with mnist-mlp's or mnist-cnn's layers. The message's backend picks
// TF.js's backend: "" or "wasm", the wasm backend (SIMD where the browser
// has it, one thread); "webgpu", @tensorflow/tfjs-backend-webgpu on the
// adapter navigator.gpu gives this Web Worker (in headless Chromium with
// --enable-unsafe-webgpu, SwiftShader: a GPU emulated on the CPU, on
// threads of its own). Where a backend cannot start or cannot train a
// model, the reply says so in unsupported.
'use strict';
importScripts('/tfjs/@tensorflow/tfjs/dist/tf.min.js', '/tfjs/@tensorflow/tfjs-backend-wasm/dist/tf-backend-wasm.min.js');

const WEBGPU_SCRIPT = '/tfjs/@tensorflow/tfjs-backend-webgpu/dist/tf-backend-webgpu.min.js';

function median(a) { const s = [...a].sort((x, y) => x - y); return s[Math.floor(s.length / 2)]; }

function he(shape, fanIn) { return tf.variable(tf.randomNormal(shape, 0, Math.sqrt(2 / fanIn))); }

// Each model returns its input batch and a loss function over variables.
const models = {
  'mnist-mlp': (B, data) => {
    const sizes = [784, 256, 128, 10];
    const p = [];
    for (let i = 0; i + 1 < sizes.length; i++) p.push(he([sizes[i], sizes[i + 1]], sizes[i]), tf.variable(tf.zeros([sizes[i + 1]])));
    const x = data ? tf.tensor(data, [B, 784]) : tf.randomUniform([B, 784]);
    return { x, loss: (labels) => () => {
      let h = x;
      for (let l = 0; l < 3; l++) {
        h = tf.add(tf.matMul(h, p[2 * l]), p[2 * l + 1]);
        if (l < 2) h = tf.relu(h);
      }
      return tf.losses.softmaxCrossEntropy(labels, h);
    }, params: p };
  },
  // conv 5x5x8 pad 2, relu, maxpool 2; conv 5x5x16, relu, maxpool 2; dense 64, relu; dense 10
  'mnist-cnn': (B, data) => {
    const p = [he([5, 5, 1, 8], 25), tf.variable(tf.zeros([8])), he([5, 5, 8, 16], 200), tf.variable(tf.zeros([16])),
      he([400, 64], 400), tf.variable(tf.zeros([64])), he([64, 10], 64), tf.variable(tf.zeros([10]))];
    const x = data ? tf.tensor(data, [B, 28, 28, 1]) : tf.randomUniform([B, 28, 28, 1]);
    return { x, loss: (labels) => () => {
      let h = tf.maxPool(tf.relu(tf.add(tf.conv2d(x, p[0], 1, 'same'), p[1])), 2, 2, 'valid');
      h = tf.maxPool(tf.relu(tf.add(tf.conv2d(h, p[2], 1, 'valid'), p[3])), 2, 2, 'valid');
      h = tf.relu(tf.add(tf.matMul(tf.reshape(h, [B, 400]), p[4]), p[5]));
      return tf.losses.softmaxCrossEntropy(labels, tf.add(tf.matMul(h, p[6]), p[7]));
    }, params: p };
  },
};

// startWebGPU switches TF.js to its webgpu backend (loading it first: the
// wasm rows never load it) and returns the adapter it runs on, or
// {unsupported: why}.
async function startWebGPU() {
  if (!self.navigator || !navigator.gpu) {
    return { unsupported: 'this Web Worker has no navigator.gpu (WebGPU needs a secure context, and headless Chromium --enable-unsafe-webgpu)' };
  }
  // The same request TF.js makes, to name the adapter in the report.
  const adapter = await navigator.gpu.requestAdapter({ powerPreference: 'high-performance' });
  if (!adapter) return { unsupported: 'navigator.gpu.requestAdapter() found no adapter' };
  let info = adapter.info;
  if (!info && adapter.requestAdapterInfo) info = await adapter.requestAdapterInfo();
  info = info || {};
  const name = [info.vendor, info.architecture, info.device, info.description].filter((v) => v).join(' ') || 'unnamed adapter';
  importScripts(WEBGPU_SCRIPT);
  // A backend that fails to start only logs a warning; keep it for the reply.
  const warnings = [];
  const warn = console.warn;
  console.warn = (...a) => { warnings.push(a.map(String).join(' ')); warn.apply(console, a); };
  let ok = false;
  try {
    ok = await tf.setBackend('webgpu');
    await tf.ready();
  } catch (err) {
    warnings.push(String(err && err.message || err));
  } finally {
    console.warn = warn;
  }
  const got = ok ? tf.getBackend() : 'none';
  if (got !== 'webgpu') {
    return { unsupported: `tf.setBackend('webgpu') left TF.js on ${got} (adapter ${name})` + (warnings.length ? ': ' + warnings.join('; ') : '') };
  }
  return { adapter: name, fallbackAdapter: !!adapter.isFallbackAdapter };
}

self.onmessage = async (e) => {
  try {
    const { model, batch, rounds, seconds } = e.data;
    const want = e.data.backend || 'wasm';
    if (!models[model]) throw new Error('no model ' + model);
    let simd = false, multithread = false, threads = 0, gpu = null;
    if (want === 'webgpu') {
      gpu = await startWebGPU();
      if (gpu.unsupported) {
        self.postMessage({ type: 'bench', unsupported: gpu.unsupported, model, batch, backend: 'none', rounds: [], median: 0 });
        return;
      }
    } else if (want === 'wasm') {
      tf.wasm.setWasmPaths('/tfjs/@tensorflow/tfjs-backend-wasm/dist/');
      tf.wasm.setThreadsCount(1);
      if (!(await tf.setBackend('wasm'))) throw new Error('the wasm backend did not start');
      await tf.ready();
      simd = await tf.env().getAsync('WASM_HAS_SIMD_SUPPORT');
      multithread = await tf.env().getAsync('WASM_HAS_MULTITHREAD_SUPPORT');
      threads = tf.wasm.getThreadsCount();
    } else {
      throw new Error('no TF.js backend ' + want + ' here (wasm, webgpu)');
    }
    const { xBytes, labelBytes } = e.data;
    const data = xBytes ? new Float32Array(xBytes.buffer, xBytes.byteOffset, xBytes.byteLength / 4) : null;
    const m = models[model](batch, data);
    const labels = labelBytes ? tf.oneHot(tf.tensor1d(Array.from(labelBytes), 'int32'), 10)
      : tf.oneHot(tf.randomUniform([batch], 0, 10, 'int32'), 10);
    const opt = tf.train.sgd(0.01);
    const lossFn = m.loss(labels);
    let step, sync;
    if (gpu) {
      // On the GPU a step only records and submits work: without waiting,
      // the clock would time how fast TF.js queues dispatches, not how fast
      // the adapter runs them. So every timed step reads its loss back
      // (await loss.data(): the read is queued after the step's SGD
      // update, and the GPU's queue runs in order, so it resolves once the
      // whole step, update included, has run), as a training loop that
      // reports its loss does.
      step = async () => {
        const loss = opt.minimize(lossFn, true);
        await loss.data();
        loss.dispose();
      };
      sync = async () => { await m.params[0].data(); };
    } else {
      step = () => opt.minimize(lossFn, false);
      sync = () => m.params[0].dataSync();
    }
    // Warm up for about one round (on the GPU this compiles the shaders),
    // and size a round from it.
    let n = 0;
    const t0 = performance.now();
    while (performance.now() - t0 < seconds * 1000 || n < 3) { await step(); n++; }
    await sync();
    const perRound = Math.max(1, Math.round(n * seconds * 1000 / (performance.now() - t0)));
    const rates = [];
    for (let r = 0; r < rounds; r++) {
      const s = performance.now();
      for (let i = 0; i < perRound; i++) await step();
      await sync();
      rates.push(perRound * batch / ((performance.now() - s) / 1000));
    }
    const backend = tf.getBackend();
    self.postMessage({
      type: 'bench', model, batch, backend,
      kernel: 'tfjs-' + tf.version.tfjs + ' ' + backend + (gpu ? ' (' + gpu.adapter + ')' : simd ? ' simd' : ' no-simd'),
      adapter: gpu ? gpu.adapter : '', fallbackAdapter: gpu ? gpu.fallbackAdapter : false,
      simd, multithread, threads, tensors: tf.memory().numTensors,
      rounds: rates, median: median(rates),
    });
  } catch (err) {
    const msg = String(err && err.message || err);
    // The wasm backend lacks some gradients (conv2d's filter gradient in
    // 4.22): say so as a result, not as a harness failure.
    if (/not registered for backend/.test(msg)) {
      self.postMessage({ type: 'bench', unsupported: msg, model: e.data.model, batch: e.data.batch, rounds: [], median: 0 });
      return;
    }
    self.postMessage({ type: 'error', message: String(err && err.stack || err) });
  }
};
