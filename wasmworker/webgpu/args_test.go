package webgpu

import (
	"encoding/binary"
	"math"
	"testing"
)

// Arguments reach the kernels as kernels.wgsl reads them: i32, f32, u32,
// and a 64-bit seed as its low word then its high word.
func TestPackArgs(t *testing.T) {
	buf := make([]byte, slotBytes)
	n, err := packArgs(buf, -3, float32(0.5), ptr(1234), uint32(7), uint64(0x1122334455667788), true)
	if err != nil {
		t.Fatal(err)
	}
	want := []uint32{uint32(0xfffffffd), math.Float32bits(0.5), 1234, 7, 0x55667788, 0x11223344, 1}
	if n != len(want) {
		t.Fatalf("%d words, want %d", n, len(want))
	}
	for i, w := range want {
		if got := binary.LittleEndian.Uint32(buf[4*i:]); got != w {
			t.Errorf("word %d = %#x, want %#x", i, got, w)
		}
	}
	if _, err := packArgs(buf, 1<<40); err == nil {
		t.Error("an int beyond 32 bits was packed")
	}
	if _, err := packArgs(buf, "x"); err == nil {
		t.Error("a string was packed")
	}
	many := make([]any, maxArgs+1)
	for i := range many {
		many[i] = 1
	}
	if _, err := packArgs(buf, many...); err == nil {
		t.Errorf("%d arguments were packed into %d words", len(many), maxArgs)
	}
}

// The layout keeps offset 0 free (0 means "no buffer") and aligns every
// buffer to 256 bytes.
func TestLayoutIsAligned(t *testing.T) {
	bl := &builder{nt: &net{floats: guardFloats}}
	a, b := bl.alloc(3), bl.alloc(100)
	if a == 0 || a%64 != 0 || b%64 != 0 || b-a != 64 || bl.nt.floats != int(b)+128 {
		t.Errorf("allocations at %d and %d, arena %d floats", a, b, bl.nt.floats)
	}
	if elementGroups(0) != 1 || elementGroups(257) != 2 || elementGroups(1<<30) != maxWorkgroups || rowGroups(70000) != maxWorkgroups {
		t.Error("dispatch sizes out of WebGPU's bounds")
	}
}
