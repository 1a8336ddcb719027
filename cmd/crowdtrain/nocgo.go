//go:build !cgo

package main

import (
	"context"
	"io"
)

// A build without cgo is a worker build (docs/DIST.md): every command a
// volunteer runs, but not those that hold a SQLite database, which is
// linked through cgo.

// noDatabase is the answer of serve, relay, relay-credential, export and backup
// in this build.
func noDatabase(cmd string) error {
	return usagef("this build cannot hold a database (built without cgo), so it has no %s: "+
		"build crowdtrain from source with CGO_ENABLED=1 and a C compiler (README, \"Contribute with a native worker\"); "+
		"this binary runs work, bench, status, submit, sample, jobs, tokens, volunteers, tokenizer and version", cmd)
}

func serve(context.Context, []string, io.Writer, io.Writer) error  { return noDatabase("serve") }
func relay(context.Context, []string, io.Writer, io.Writer) error  { return noDatabase("relay") }
func export(context.Context, []string, io.Writer, io.Writer) error { return noDatabase("export") }
func relayCredential(context.Context, []string, io.Writer, io.Writer) error {
	return noDatabase("relay-credential")
}

func backup(context.Context, []string, io.Writer, io.Writer) error { return noDatabase("backup") }
