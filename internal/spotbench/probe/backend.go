package main

import (
	"github.com/crowdtrain/crowdtrain/worker"
	"github.com/crowdtrain/crowdtrain/worker/cpu"
)

// newBackend is the CPU backend every worker of this build runs: under
// GOOS=js GOARCH=wasm the browser worker's.
func newBackend() worker.Backend {
	b, err := cpu.New(1)
	if err != nil {
		panic(err) // 1 thread is always valid
	}
	return b
}
