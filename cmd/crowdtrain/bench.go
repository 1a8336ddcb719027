package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/crowdtrain/crowdtrain/nativeworker"
	"github.com/crowdtrain/crowdtrain/nn"
)

func bench(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	model := fs.String("model", "mnist-mlp", "model preset `NAME` ("+strings.Join(nn.PresetNames(), ", ")+")")
	batch := fs.Int("batch", 64, "examples per training step")
	threads := fs.Int("threads", 1, "CPU threads (0 = one per CPU)")
	rounds := fs.Int("rounds", 5, "timed rounds; the median is reported")
	round := fs.Duration("round", 500*time.Millisecond, "length of one round")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if _, err := nn.Preset(*model); err != nil {
		return usagef("%v", err)
	}
	if *batch < 1 || *threads < 0 || *rounds < 1 || *round <= 0 {
		return usagef("--batch, --rounds and --round must be positive and --threads >= 0")
	}
	m, err := nativeworker.Measure(*model, *batch, *threads, *rounds, *round)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "model %s (%d parameters), batch %d, %d threads, backend cpu-gonum\n", m.Model, m.NumParams, m.Batch, m.Threads)
	for i, r := range m.Rounds {
		fmt.Fprintf(stdout, "round %d: %.0f examples/s\n", i+1, r)
	}
	fmt.Fprintf(stdout, "examples/s: %.0f\n", m.Median)
	return nil
}
