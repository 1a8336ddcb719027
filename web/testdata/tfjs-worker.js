// TensorFlow.js 4.22's wasm backend (SIMD where the browser has it, one
// thread) timing the same training steps as crowdtrain's {type: "bench"}
// control: forward, softmax cross-entropy, backward and an SGD update at the
// given batch, on random inputs or on the batch the message carries (xBytes:
// float32 pixels, labelBytes: one label per byte), with mnist-mlp's or
// mnist-cnn's layers.
'use strict';
importScripts('/tfjs/@tensorflow/tfjs/dist/tf.min.js', '/tfjs/@tensorflow/tfjs-backend-wasm/dist/tf-backend-wasm.min.js');

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

self.onmessage = async (e) => {
  try {
    const { model, batch, rounds, seconds } = e.data;
    if (!models[model]) throw new Error('no model ' + model);
    tf.wasm.setWasmPaths('/tfjs/@tensorflow/tfjs-backend-wasm/dist/');
    tf.wasm.setThreadsCount(1);
    if (!(await tf.setBackend('wasm'))) throw new Error('the wasm backend did not start');
    await tf.ready();
    const simd = await tf.env().getAsync('WASM_HAS_SIMD_SUPPORT');
    const multithread = await tf.env().getAsync('WASM_HAS_MULTITHREAD_SUPPORT');
    const { xBytes, labelBytes } = e.data;
    const data = xBytes ? new Float32Array(xBytes.buffer, xBytes.byteOffset, xBytes.byteLength / 4) : null;
    const m = models[model](batch, data);
    const labels = labelBytes ? tf.oneHot(tf.tensor1d(Array.from(labelBytes), 'int32'), 10)
      : tf.oneHot(tf.randomUniform([batch], 0, 10, 'int32'), 10);
    const opt = tf.train.sgd(0.01);
    const lossFn = m.loss(labels);
    const step = () => opt.minimize(lossFn, false);
    const sync = () => m.params[0].dataSync();
    // Warm up for about one round, and size a round from it.
    let n = 0;
    const t0 = performance.now();
    while (performance.now() - t0 < seconds * 1000 || n < 3) { step(); n++; }
    sync();
    const perRound = Math.max(1, Math.round(n * seconds * 1000 / (performance.now() - t0)));
    const rates = [];
    for (let r = 0; r < rounds; r++) {
      const s = performance.now();
      for (let i = 0; i < perRound; i++) step();
      sync();
      rates.push(perRound * batch / ((performance.now() - s) / 1000));
    }
    self.postMessage({
      type: 'bench', model, batch, kernel: 'tfjs-' + tf.version.tfjs + ' ' + tf.getBackend() + (simd ? ' simd' : ' no-simd'),
      simd, multithread, threads: tf.wasm.getThreadsCount(), tensors: tf.memory().numTensors,
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
