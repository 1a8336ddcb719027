// Runs the SIMD module's block on the operands in a file and writes C.
// node block.js simd.wasm in.bin out.bin; in.bin is int32 kb, mt, nt, then
// the packed A and B as float32s (little-endian).
const fs = require("fs");
const [wasmPath, inPath, outPath] = process.argv.slice(2);
const input = fs.readFileSync(inPath);
const hdr = new Int32Array(input.buffer, input.byteOffset, 3);
const [kb, mt, nt] = hdr;
const aLen = kb * mt * 4, bLen = kb * nt * 8, cLen = mt * 4 * nt * 8;
const bytes = 4 * (aLen + bLen + cLen) + 3 * 64;
const memory = new WebAssembly.Memory({ initial: Math.ceil(bytes / 65536) + 1 });
const mod = new WebAssembly.Module(fs.readFileSync(wasmPath));
const inst = new WebAssembly.Instance(mod, { env: { mem: memory } });
// Start A at 16 bytes, B and C 16-aligned after it: Go's slices are
// 8-aligned at least, and the module must not need more.
const aOff = 16, bOff = aOff + 4 * aLen + 8, cOff = bOff + 4 * bLen + 8;
const f = new Float32Array(memory.buffer);
f.set(new Float32Array(input.buffer.slice(input.byteOffset + 12, input.byteOffset + 12 + 4 * aLen)), aOff / 4);
f.set(new Float32Array(input.buffer.slice(input.byteOffset + 12 + 4 * aLen, input.byteOffset + 12 + 4 * (aLen + bLen))), bOff / 4);
inst.exports.block(kb, mt, nt, aOff, bOff, cOff);
fs.writeFileSync(outPath, Buffer.from(memory.buffer, cOff, 4 * cLen));
