package webgpu

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/crowdtrain/crowdtrain/worker/gpu"
)

// none is the pointer argument a kernel reads as "absent"
// (embedding_forward's position table): what gpu.Ptr 0 becomes. 0 itself
// is never a buffer (the executor leaves the arena's first bytes unused).
const none = math.MaxUint32

// floatIndex is a pointer as the kernels take it: the index of a float in
// the arena.
func floatIndex(p gpu.Ptr) (uint32, error) {
	if p == 0 {
		return none, nil
	}
	if p%4 != 0 || p/4 >= none {
		return 0, fmt.Errorf("pointer %d is not a float of a 32-bit arena", p)
	}
	return uint32(p / 4), nil
}

// Sizes of a kernel's arguments: a uniform buffer slot of slotBytes (the
// dynamic offset alignment WebGPU guarantees) of which the kernels read
// maxArgs 32-bit words (kernels.wgsl's a: array<vec4<u32>, 8>).
const (
	slotBytes = 256
	maxArgs   = 32
)

// packArgs writes a kernel's arguments into dst as the kernels read them:
// int as i32, float32 as f32, uint32 as u32, gpu.Ptr as the u32 index of
// its float (0: none), uint64 as two u32 (low word first). It returns the words written.
func packArgs(dst []byte, args ...any) (int, error) {
	w := 0
	put := func(v uint32) error {
		if w == maxArgs {
			return fmt.Errorf("more than %d argument words", maxArgs)
		}
		binary.LittleEndian.PutUint32(dst[4*w:], v)
		w++
		return nil
	}
	for i, a := range args {
		var err error
		switch v := a.(type) {
		case int:
			if v < math.MinInt32 || v > math.MaxInt32 {
				return 0, fmt.Errorf("argument %d: %d does not fit 32 bits", i, v)
			}
			err = put(uint32(int32(v)))
		case float32:
			err = put(math.Float32bits(v))
		case gpu.Ptr:
			var u uint32
			if u, err = floatIndex(v); err == nil {
				err = put(u)
			}
		case uint32:
			err = put(v)
		case uint64:
			if err = put(uint32(v)); err == nil {
				err = put(uint32(v >> 32))
			}
		case bool:
			var u uint32
			if v {
				u = 1
			}
			err = put(u)
		default:
			return 0, fmt.Errorf("argument %d: unsupported type %T", i, a)
		}
		if err != nil {
			return 0, err
		}
	}
	return w, nil
}

// Dispatch shapes (kernels.wgsl's workgroup sizes).
const (
	elementGroup  = 256   // elementwise kernels: grid-stride loops
	maxWorkgroups = 65535 // WebGPU's guaranteed maxComputeWorkgroupsPerDimension
	gemmTile      = 64    // gemm: a workgroup's tile of C
)

// elementGroups is the workgroups of an elementwise kernel over total
// elements.
func elementGroups(total int) int {
	return max(1, min((total+elementGroup-1)/elementGroup, maxWorkgroups))
}

// rowGroups is the workgroups of a kernel taking one row per workgroup.
func rowGroups(rows int) int { return max(1, min(rows, maxWorkgroups)) }
