//go:build !(js && wasm)

package cpu

// namePrefix names the backend of a native worker, e.g. "cpu-avx512".
const namePrefix = "cpu-"
