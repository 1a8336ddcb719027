//go:build !(js && wasm)

package cpubackend

// namePrefix names the backend of a native worker, e.g. "cpu-avx512".
const namePrefix = "cpu-"
