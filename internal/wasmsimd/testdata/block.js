// Runs one of the SIMD module's functions on the operands in a file and
// writes C: node block.js simd.wasm in.bin out.bin. in.bin (little-endian)
// is int32 mode, then
//   mode 0 (block):  int32 kb, mt, nt; float32 A (kb*mt*4), B (kb*nt*8)
//   mode 1 (sparse): int32 mb, nt, kb, stride; float32 vals (mb*stride),
//                    int32 idx (mb*stride), int32 cnt (mb), float32 B (kb*nt*8)
const fs = require("fs");
const [wasmPath, inPath, outPath] = process.argv.slice(2);
const input = fs.readFileSync(inPath);
const words = new Int32Array(input.buffer.slice(input.byteOffset, input.byteOffset + input.length));
const mod = new WebAssembly.Module(fs.readFileSync(wasmPath));
const memory = new WebAssembly.Memory({ initial: Math.ceil((3 * input.length) / 65536) + 16 });
const inst = new WebAssembly.Instance(mod, { env: { mem: memory } });
const heap = new Int32Array(memory.buffer);
// Copies n words from the input at word w to a fresh 16-aligned place.
let next = 64;
function place(w, n) {
  const at = next;
  heap.set(words.subarray(w, w + n), at / 4);
  next = at + 4 * n + 24; // 8-aligned, as Go's slices may be, not 16
  return at;
}
let cLen, cOff;
if (words[0] === 0) {
  const [kb, mt, nt] = words.subarray(1, 4);
  const a = place(4, kb * mt * 4);
  const b = place(4 + kb * mt * 4, kb * nt * 8);
  cLen = mt * 4 * nt * 8;
  cOff = next;
  inst.exports.block(kb, mt, nt, a, b, cOff);
} else {
  const [mb, nt, kb, stride] = words.subarray(1, 5);
  let w = 5;
  const vals = place(w, mb * stride); w += mb * stride;
  const idx = place(w, mb * stride); w += mb * stride;
  const cnt = place(w, mb); w += mb;
  const b = place(w, kb * nt * 8);
  cLen = mb * nt * 8;
  cOff = next;
  inst.exports.sparse(mb, nt, kb, stride, vals, idx, cnt, b, cOff);
}
fs.writeFileSync(outPath, Buffer.from(memory.buffer, cOff, 4 * cLen));
