//go:build !(js && wasm)

package main

import (
	"github.com/crowdtrain/crowdtrain/nativeworker"
	"github.com/crowdtrain/crowdtrain/worker"
)

func newBackend() worker.Backend {
	b, err := nativeworker.New(1)
	if err != nil {
		panic(err) // 1 thread is always valid
	}
	return b
}
