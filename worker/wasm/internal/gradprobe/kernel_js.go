//go:build js && wasm

package main

import (
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/worker/wasm"
)

// useKernel switches to nn's kernel name; simd registers the SIMD module's
// kernel first, as the browser worker does.
func useKernel(name string) error {
	if name == wasm.KernelSIMD {
		if err := wasm.RegisterSIMD(); err != nil {
			return err
		}
	}
	return nn.UseKernel(name)
}
