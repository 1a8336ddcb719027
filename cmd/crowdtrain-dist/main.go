// Command crowdtrain-dist writes the release archives of `make dist`
// (package internal/dist, docs/DIST.md): the worker build of crowdtrain for
// every volunteer platform, or those named, and their SHA256SUMS.
//
//	go run ./cmd/crowdtrain-dist [--out dist] [--version V] [--commit C] [--targets linux/amd64,...]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/crowdtrain/crowdtrain/internal/dist"
)

func main() {
	out := flag.String("out", "dist", "the `folder` for the archives and SHA256SUMS")
	version := flag.String("version", "", "the version stamped and in the archive names (default: git describe --tags --always --dirty)")
	commit := flag.String("commit", "", "the commit stamped (default: git rev-parse HEAD)")
	targets := flag.String("targets", "", "comma-separated os/arch targets (default: all six)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "crowdtrain-dist: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	root, err := os.Getwd()
	if err != nil {
		fail(err)
	}
	v, c, at := dist.GitVersion(ctx, root)
	if *version != "" {
		v = *version
	}
	if *commit != "" {
		c = *commit
	}
	// SOURCE_DATE_EPOCH, the reproducible-builds convention, wins over
	// the commit's time.
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		var sec int64
		if _, err := fmt.Sscan(s, &sec); err != nil {
			fmt.Fprintf(os.Stderr, "crowdtrain-dist: SOURCE_DATE_EPOCH=%q is not seconds since 1970\n", s)
			os.Exit(2)
		}
		at = time.Unix(sec, 0).UTC()
	}
	var ts []dist.Target
	if *targets != "" {
		for _, s := range strings.Split(*targets, ",") {
			t, err := dist.ParseTarget(s)
			if err != nil {
				fmt.Fprintf(os.Stderr, "crowdtrain-dist: --targets: %v\n", err)
				os.Exit(2)
			}
			ts = append(ts, t)
		}
	}
	names, err := dist.Build(ctx, dist.Options{Root: root, Out: *out, Version: v, Commit: c, Time: at, Targets: ts, Log: os.Stderr})
	if err != nil {
		fail(err)
	}
	fmt.Printf("wrote %d archives and %s to %s/ (version %s, commit %s)\n", len(names), dist.SumsFile, *out, v, c)
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "crowdtrain-dist: %v\n", err)
	os.Exit(1)
}
