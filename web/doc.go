// Package web serves the pages a browser meets: the contribute page at /,
// its scripts, and the browser worker (Go compiled to WebAssembly, with the
// wasm_exec.js of the toolchain that built it).
//
// The pages and scripts are embedded from static/. The worker is embedded
// from dist/, which `make build` fills (see the Makefile's wasm target); a
// binary built without it still serves the page, which then says so, and
// NewHandler logs it. Every asset is served with a strong ETag and
// "Cache-Control: no-cache" (revalidated, so an upgrade is seen at once),
// gzip-compressed when the browser accepts it.
//
// web imports nothing of ours: the coordinator mounts its Handler.
package web
