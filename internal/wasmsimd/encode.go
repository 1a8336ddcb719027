package wasmsimd

// A minimal encoder of the WebAssembly binary format (version 1, with the
// fixed-width SIMD proposal's instructions): just what the kernels use.

// Value types.
const (
	i32  byte = 0x7f
	v128 byte = 0x7b
)

// code is a function body under construction.
type code struct {
	b []byte
}

func uleb(b []byte, v uint64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}

func sleb(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func (c *code) op(b ...byte) *code   { c.b = append(c.b, b...); return c }
func (c *code) get(l int) *code      { c.b = uleb(append(c.b, 0x20), uint64(l)); return c }
func (c *code) set(l int) *code      { c.b = uleb(append(c.b, 0x21), uint64(l)); return c }
func (c *code) i32c(v int32) *code   { c.b = sleb(append(c.b, 0x41), int64(v)); return c }
func (c *code) block() *code         { return c.op(0x02, 0x40) }
func (c *code) loop() *code          { return c.op(0x03, 0x40) }
func (c *code) end() *code           { return c.op(0x0b) }
func (c *code) br(depth int) *code   { c.b = uleb(append(c.b, 0x0c), uint64(depth)); return c }
func (c *code) brIf(depth int) *code { c.b = uleb(append(c.b, 0x0d), uint64(depth)); return c }
func (c *code) add() *code           { return c.op(0x6a) } // i32.add
func (c *code) sub() *code           { return c.op(0x6b) } // i32.sub
func (c *code) mul() *code           { return c.op(0x6c) } // i32.mul
func (c *code) shl() *code           { return c.op(0x74) } // i32.shl
func (c *code) eqz() *code           { return c.op(0x45) } // i32.eqz
func (c *code) geU() *code           { return c.op(0x4f) } // i32.ge_u
func (c *code) ltU() *code           { return c.op(0x49) } // i32.lt_u

// i32load loads an i32 at the address on the stack plus offset.
func (c *code) i32load(offset uint32) *code { return c.op(0x28).memarg(2, offset) }

// simd emits a SIMD instruction (prefix 0xfd, LEB128 opcode).
func (c *code) simd(opcode uint32) *code {
	c.b = uleb(append(c.b, 0xfd), uint64(opcode))
	return c
}

// memarg is a load's or store's alignment (log2 bytes) and offset.
func (c *code) memarg(align, offset uint32) *code {
	c.b = uleb(uleb(c.b, uint64(align)), uint64(offset))
	return c
}

// SIMD opcodes (WebAssembly 2.0, 5.4.8).
const (
	v128Load        = 0x00
	v128Load32Splat = 0x09
	v128Store       = 0x0b
	v128Const       = 0x0c
	f32x4Add        = 0xe4
	f32x4Mul        = 0xe6
)

func (c *code) load(offset uint32) *code      { return c.simd(v128Load).memarg(4, offset) }
func (c *code) loadSplat(offset uint32) *code { return c.simd(v128Load32Splat).memarg(2, offset) }
func (c *code) store(offset uint32) *code     { return c.simd(v128Store).memarg(4, offset) }
func (c *code) zero() *code                   { c.simd(v128Const); c.b = append(c.b, make([]byte, 16)...); return c }
func (c *code) fadd() *code                   { return c.simd(f32x4Add) }
func (c *code) fmul() *code                   { return c.simd(f32x4Mul) }

// function is a function's type, its locals past the parameters, and body.
type function struct {
	name   string // exported as
	params []byte
	locals []byte
	body   code
}

// section appends section id with contents.
func section(b []byte, id byte, contents []byte) []byte {
	b = append(b, id)
	b = uleb(b, uint64(len(contents)))
	return append(b, contents...)
}

func name(b []byte, s string) []byte {
	return append(uleb(b, uint64(len(s))), s...)
}

// module encodes a module importing memory env.mem and exporting fns.
func module(fns []function) []byte {
	out := []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}
	var types, funcs, exports, codes []byte
	types = uleb(types, uint64(len(fns)))
	funcs = uleb(funcs, uint64(len(fns)))
	exports = uleb(exports, uint64(len(fns)))
	codes = uleb(codes, uint64(len(fns)))
	for i, f := range fns {
		types = append(types, 0x60)
		types = uleb(types, uint64(len(f.params)))
		types = append(types, f.params...)
		types = append(types, 0x00) // no results
		funcs = uleb(funcs, uint64(i))
		exports = name(exports, f.name)
		exports = append(exports, 0x00) // a function
		exports = uleb(exports, uint64(i))
		// Locals, run-length encoded.
		var body []byte
		var runs [][2]int
		for _, t := range f.locals {
			if n := len(runs); n > 0 && byte(runs[n-1][1]) == t {
				runs[n-1][0]++
				continue
			}
			runs = append(runs, [2]int{1, int(t)})
		}
		body = uleb(body, uint64(len(runs)))
		for _, r := range runs {
			body = uleb(body, uint64(r[0]))
			body = append(body, byte(r[1]))
		}
		body = append(body, f.body.b...)
		body = append(body, 0x0b) // the function's end
		codes = uleb(codes, uint64(len(body)))
		codes = append(codes, body...)
	}
	// One import: memory env.mem, at least 0 pages, no maximum: the Go
	// module's, which grows as Go's heap does.
	var imports []byte
	imports = uleb(imports, 1)
	imports = name(imports, "env")
	imports = name(imports, "mem")
	imports = append(imports, 0x02, 0x00, 0x00)
	out = section(out, 1, types)
	out = section(out, 2, imports)
	out = section(out, 3, funcs)
	out = section(out, 7, exports)
	out = section(out, 10, codes)
	return out
}
