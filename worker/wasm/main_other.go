//go:build !(js && wasm)

package wasm

import (
	"fmt"
	"os"
)

// Main explains that the browser worker runs only in a browser.
func Main() {
	fmt.Fprintln(os.Stderr, "wasmworker: the browser worker builds only for GOOS=js GOARCH=wasm "+
		"(make wasm); to train from this machine run `crowdtrain work`")
	os.Exit(2)
}
