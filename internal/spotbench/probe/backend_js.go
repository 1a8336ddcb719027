//go:build js && wasm

package main

import (
	"github.com/crowdtrain/crowdtrain/wasmworker"
	"github.com/crowdtrain/crowdtrain/worker"
)

func newBackend() worker.Backend { return &wasmworker.Backend{} }
