// Command gen writes the browser worker's SIMD module (package wasmsimd)
// to the file it is given: go generate ./internal/wasmsimd.
package main

import (
	"fmt"
	"os"

	"github.com/crowdtrain/crowdtrain/internal/wasmsimd"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gen FILE.wasm")
		os.Exit(2)
	}
	if err := os.WriteFile(os.Args[1], wasmsimd.Module(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
