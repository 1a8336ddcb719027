// Command wasmworker is the browser worker's entry point, built with
// GOOS=js GOARCH=wasm into web/dist/crowdtrain.wasm by `make wasm` and
// started by web/static/worker.js inside a Web Worker.
package main

import "github.com/crowdtrain/crowdtrain/worker/wasm"

func main() { wasm.Main() }
