//go:build js && wasm

package main

import (
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/wasmworker"
)

// useKernel switches to nn's kernel name; simd registers the SIMD module's
// kernel first, as the browser worker does.
func useKernel(name string) error {
	if name == wasmworker.KernelSIMD {
		if err := wasmworker.RegisterSIMD(); err != nil {
			return err
		}
	}
	return nn.UseKernel(name)
}
