// Package store is the coordinator's durable memory: jobs, checkpoints
// (parameters, optimizer state and progress), metrics history and the
// workers seen, in one SQLite file.
//
// It exists so that a coordinator killed at any moment (SIGKILL, OOM,
// power cut of the process) loses at most the seconds since its last
// checkpoint, never a job, and never leaves a damaged database. Every
// write is one SQLite transaction in WAL mode, fsynced before it returns
// (synchronous=FULL), so what a caller was told is written survives an OS
// crash or a power cut too; the WAL is truncated after each checkpoint,
// so it never holds more than about one. Open refuses, without
// writing a byte, files that are not ours, were written by a newer
// crowdtrain, or are corrupt (see ErrNotCrowdtrain, ErrNewerSchema,
// ErrCorrupt). The schema version is PRAGMA user_version; Open upgrades
// an older database in one transaction (schema.go), so a failed upgrade
// leaves it at the version it had. Checkpoint data carries a CRC-32C, so damage inside a
// BLOB, which SQLite cannot see, is an error rather than a model quietly
// resumed from garbage. A checkpoint's parameters and optimizer state are
// written and read in chunks (chunks.go), so neither holds a second copy
// of a large model. Times round-trip to the nanosecond and come back
// in UTC.
//
// store imports nothing of ours, so it stays a leaf that any command or
// test can use. It links SQLite through cgo: it must never be imported by
// the worker packages or anything in the browser (GOOS=js/wasm) build,
// which can neither use cgo nor need a database.
package store
