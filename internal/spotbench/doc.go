// Package spotbench measures how far apart honest results of one task are
// when different backends compute them: the native worker's CPU kernels
// and the browser's wasm build (run under Node). Its test feeds pairs of
// such results through the spot check comparator (engine.SpotChecks) and
// counts false strikes; `make bench-spotcheck` runs it over 10,000 tasks
// and prints the largest relative difference per pair of backends, from
// which the default spot_check_tolerance is fitted (docs/SPOTCHECKS.md).
//
// A plan is a list of tasks, each a lease of the mnist-mlp job (async, or
// diloco with its local steps) from one of a few snapshots of a training
// run. The probe command (./probe) computes a plan's tasks with the
// backend of its build and writes each update to stdout.
//
// It imports the worker, dataset, jobspec, nn and protocol packages (its
// test also the engine); nothing imports it.
package spotbench
