//go:build !(js && wasm)

package main

import "github.com/crowdtrain/crowdtrain/nn"

// useKernel switches to nn's kernel name.
func useKernel(name string) error { return nn.UseKernel(name) }
