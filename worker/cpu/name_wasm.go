//go:build js && wasm

package cpu

// namePrefix names the backend in a browser: "wasm-go" (the pure-Go kernel)
// is what the contribute page and GET /api/v1/workers show.
const namePrefix = "wasm-"
