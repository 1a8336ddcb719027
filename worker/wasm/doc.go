// Package wasm is the browser worker: the shared worker loop of
// package worker with the shared CPU backend (package worker/cpu) on one
// thread, driven from a Web Worker (web/static/worker.js) through two
// JavaScript functions.
//
// The page sends control messages ({type: "start" | "pause" | "resume" |
// "duty" | "stop"}) that worker.js passes to crowdtrainControl; the worker
// reports its counters about once a second through crowdtrainReport as
// {type: "stats", state, computed, accepted, rejected, rate, version, ...}.
//
// Go's js/wasm has no threads and no SIMD: the page runs one Web Worker per
// core it may use, each its own Go instance. The worker loop reuses its
// parameter, batch and gradient buffers, so the heap stays flat however long
// the tab trains.
//
// Everything but Bench builds only for GOOS=js GOARCH=wasm. It must not
// import database/sql, SQLite or os/exec (internal/arch checks).
package wasm
