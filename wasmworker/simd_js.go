//go:build js && wasm

package wasmworker

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

var errNoSIMD = errors.New("the SIMD module was not loaded (globalThis.crowdtrainSIMDBlock is not a function)")

// RegisterSIMD registers the SIMD module's block as nn's KernelSIMD. Its
// block is called once per packed block of a GEMM with the addresses of
// Go's slices: the module reads and writes this module's memory in place.
// No garbage collection runs during the call (Go's wasm has one thread, and
// it waits for the call), so the slices stay where they are.
func RegisterSIMD() error {
	f := js.Global().Get("crowdtrainSIMDBlock")
	if f.Type() != js.TypeFunction {
		return errNoSIMD
	}
	return nn.RegisterBlockKernel(KernelSIMD, wasmsimd.MR, wasmsimd.NR, SIMDSparseMinZeros, func(kb, mt, nt int, a, b, c []float32) {
		f.Invoke(kb, mt, nt, addr(a), addr(b), addr(c))
	})
}

// SIMDSparseMinZeros is the share of zeros in op(A) from which a GEMM
// skips them on the pure-Go list kernel instead of running dense on SIMD.
var SIMDSparseMinZeros = 0.75

func addr(s []float32) int { return int(uintptr(unsafe.Pointer(unsafe.SliceData(s)))) }

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
