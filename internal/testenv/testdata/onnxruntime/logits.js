// Runs an ONNX model with ONNX Runtime (onnxruntime-node) on one batch and
// writes its first output, for the Go tests that compare an exported model
// with nn's forward pass.
//
//   node logits.js MODEL INPUT DTYPE SHAPE OUTPUT
//
// INPUT is the batch as raw little-endian values of DTYPE (float32 or
// int64) in the JSON array SHAPE; OUTPUT receives the output's float32
// values, raw little-endian. It prints one JSON line: the model's input and
// output names and the output's dims.
'use strict';
const fs = require('node:fs');
const ort = require('onnxruntime-node');

async function main() {
  const [model, input, dtype, shapeJSON, output] = process.argv.slice(2);
  if (!output) {
    throw new Error('usage: node logits.js MODEL INPUT DTYPE SHAPE OUTPUT');
  }
  const session = await ort.InferenceSession.create(model);
  const raw = fs.readFileSync(input);
  // A copy, so the typed array starts on an aligned offset.
  const bytes = new Uint8Array(raw).buffer;
  let data;
  if (dtype === 'int64') {
    data = new BigInt64Array(bytes);
  } else if (dtype === 'float32') {
    data = new Float32Array(bytes);
  } else {
    throw new Error(`dtype ${dtype}: want float32 or int64`);
  }
  const feeds = { [session.inputNames[0]]: new ort.Tensor(dtype, data, JSON.parse(shapeJSON)) };
  const results = await session.run(feeds);
  const y = results[session.outputNames[0]];
  if (y.type !== 'float32') {
    throw new Error(`output ${session.outputNames[0]} is ${y.type}, want float32`);
  }
  fs.writeFileSync(output, Buffer.from(y.data.buffer, y.data.byteOffset, y.data.byteLength));
  console.log(JSON.stringify({ inputs: session.inputNames, outputs: session.outputNames, dims: y.dims }));
}

main().catch((err) => {
  console.error(err && err.stack ? err.stack : String(err));
  process.exit(1);
});
