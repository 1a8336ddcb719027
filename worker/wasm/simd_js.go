//go:build js && wasm

package wasm

import (
	"errors"
	"syscall/js"
	"unsafe"

	"github.com/crowdtrain/crowdtrain/internal/wasmsimd"
	"github.com/crowdtrain/crowdtrain/nn"
)

// The browser's CPU backends: nn's pure-Go kernel, and the wasm SIMD
// module (web/static/simd.wasm, package wasmsimd) that worker.js
// instantiates on this module's memory and hands over as
// globalThis.crowdtrainSIMDBlock.
const (
	BackendGo   = "wasm-go"
	BackendSIMD = "wasm-simd"
	// KernelSIMD is nn's name of the SIMD kernel ("wasm-" + it is the
	// backend's name).
	KernelSIMD = "simd"
)

var errNoSIMD = errors.New("the SIMD module was not loaded (globalThis.crowdtrainSIMDBlock and crowdtrainSIMDSparse are not functions)")

// RegisterSIMD registers the SIMD module's functions as nn's KernelSIMD:
// block for dense GEMMs and sparse for those whose left operand is mostly
// zeros. Each is called once per packed block of a GEMM with the addresses
// of Go's slices: the module reads and writes this module's memory in
// place. No garbage collection runs during the call (Go's wasm has one
// thread, and it waits for the call), so the slices stay where they are.
func RegisterSIMD() error {
	block, sparse := js.Global().Get("crowdtrainSIMDBlock"), js.Global().Get("crowdtrainSIMDSparse")
	if block.Type() != js.TypeFunction || sparse.Type() != js.TypeFunction {
		return errNoSIMD
	}
	return nn.RegisterBlockKernel(KernelSIMD, nn.BlockKernel{
		MR: wasmsimd.MR, NR: wasmsimd.NR,
		Dense: func(kb, mt, nt int, a, b, c []float32) {
			block.Invoke(kb, mt, nt, addr(a), addr(b), addr(c))
		},
		SparseMinZeros: SIMDSparseMinZeros,
		Sparse: func(mb, nt, kb, stride int, vals []float32, idx, cnt []int32, b, c []float32) {
			sparse.Invoke(mb, nt, kb, stride, addr(vals), addr(idx), addr(cnt), addr(b), addr(c))
		},
	})
}

// SIMDSparseMinZeros is the share of zeros in a GEMM's left operand from
// which the SIMD kernel computes from its non-zeros alone (sparse).
// Measured under Node (examples/s of a training step, batch 64, MNIST's
// images, three runs each): at 0.5, mnist-mlp 8,146-8,598 and mnist-cnn
// 612-665; at 0.75, 8,153-8,474 and 587-619; at 0.9, 6,188-7,873 and
// 586-613; never (0), 6,353-8,318 and 593-678.
var SIMDSparseMinZeros = 0.5

// addr is the address of s's first element in this module's memory.
func addr[T float32 | int32](s []T) int { return int(uintptr(unsafe.Pointer(unsafe.SliceData(s)))) }

// useBackend switches this instance to the backend the page asked for and
// returns the one in use: wasm-simd when asked for and the module is
// loaded, else wasm-go (with why, when that was not what was asked).
func useBackend(want string) (string, error) {
	if want == BackendSIMD {
		err := RegisterSIMD()
		if err == nil {
			err = nn.UseKernel(KernelSIMD)
		}
		if err == nil {
			return BackendSIMD, nil
		}
		if err2 := nn.UseKernel(nn.KernelGo); err2 != nil {
			return "", err2
		}
		return BackendGo, err
	}
	return BackendGo, nn.UseKernel(nn.KernelGo)
}
