// Package dataset loads labelled data sets and cuts them into the shards
// the coordinator serves to workers: the built-in MNIST and Fashion-MNIST
// (IDX files), bible-kjv and go-source (text), and a job's own data as IDX,
// .npy or UTF-8 text, a file or a tree of files selected by a glob and
// split by file, or a verifiable task's problems written as text
// (docs/JOBS.md). Text is bytes, or with a tokenizer in
// Options (an Encoder: package tokenizer, which dataset does not import)
// its token ids, encoded once as it loads into uint16 windows.
//
// The coordinator loads each data set a job names once (LoadBuiltin for
// the built-in ones, each from its own place), fixes a seeded permutation of
// the training examples (MakeShards) and serves each shard as an immutable
// HTTP resource in a compact byte format (EncodeShard; the format is
// documented there). Workers decode a shard (DecodeShard or ReadShard) and
// turn it into float32 inputs only when they train (ShardData.Floats), so a
// shard costs 1 byte per pixel on the wire and in memory, not 4.
//
// Everything that reads bytes from outside (data files, shard bodies) checks
// sizes before allocating and returns an error that says what was wrong and
// what to do; no input makes a decoder panic.
//
// dataset imports only the standard library and rltask (whose problems
// the task data set writes as text), and it builds for js/wasm: the browser worker decodes shards with it. File-system
// searching (FindMNIST) uses only os and path/filepath, which compile there
// too (it just finds nothing without a file system).
package dataset
