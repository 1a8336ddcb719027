package webgpu

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/crowdtrain/crowdtrain/worker/gpu"
)

// Arguments reach the kernels as kernels.wgsl reads them: i32, f32, u32,
// and a 64-bit seed as its low word then its high word.
func TestPackArgs(t *testing.T) {
	buf := make([]byte, slotBytes)
	n, err := packArgs(buf, -3, float32(0.5), gpu.Ptr(4*1234), uint32(7), uint64(0x1122334455667788), true, gpu.Ptr(0))
	if err != nil {
		t.Fatal(err)
	}
	want := []uint32{uint32(0xfffffffd), math.Float32bits(0.5), 1234, 7, 0x55667788, 0x11223344, 1, 0xffffffff}
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
	if _, err := packArgs(buf, gpu.Ptr(6)); err == nil {
		t.Error("a pointer between two floats was packed")
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

// Dispatches stay within WebGPU's bounds.
func TestDispatchSizes(t *testing.T) {
	if elementGroups(0) != 1 || elementGroups(257) != 2 || elementGroups(1<<30) != maxWorkgroups || rowGroups(70000) != maxWorkgroups {
		t.Error("dispatch sizes out of WebGPU's bounds")
	}
}
