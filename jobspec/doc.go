// Package jobspec is the job spec: what an operator submits to train a
// model (a model, the data, the mode and its settings), its presets, its
// parsing from YAML or JSON, its mode-dependent defaults and its
// validation. Every key is defined once, in keys.go, and documented in
// docs/JOBS.md; a bad key or value is an *Error that names it.
//
// jobspec imports nn (model and optimizer specs) and yaml.v3; it knows no
// HTTP, protocol message or database, so the coordinator, the CLI and the
// tests share it.
package jobspec
