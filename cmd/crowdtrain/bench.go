package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"strings"
	"time"

	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/worker/cpu"
	"github.com/crowdtrain/crowdtrain/worker/cpu/native"
	"github.com/crowdtrain/crowdtrain/worker/cuda"
)

func bench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newCLIFlags("bench", "bench [--model NAME] [flags]")
	model := fs.String("model", "mnist-mlp", "model preset `NAME` ("+strings.Join(nn.PresetNames(), ", ")+")")
	batch := fs.Int("batch", 64, "examples per training step")
	threads := fs.Int("threads", 1, "CPU threads (0 = one per CPU)")
	rounds := fs.Int("rounds", 5, "timed rounds; the median is reported")
	round := fs.Duration("round", 500*time.Millisecond, "length of one round")
	backend := fs.String("backend", backendCPU, "cpu, cuda, or auto (the GPU if usable, else the CPU)")
	device := fs.Int("device", 0, "CUDA device number")
	localSteps := fs.Int("local-steps", 1, "GPU: inner steps per lease (the update is downloaded once per lease)")
	kernel := fs.String("kernel", native.KernelAuto, "CPU: the GEMM `KERNEL` (auto, avx512, avx2, neon, openblas, gonum, go)")
	if err := fs.parse(ctx, args, stderr); err != nil {
		return err
	}
	if _, err := nn.Preset(*model); err != nil {
		return usagef("%v", err)
	}
	if *batch < 1 || *threads < 0 || *rounds < 1 || *round <= 0 || *localSteps < 1 {
		return usagef("--batch, --rounds, --round and --local-steps must be positive and --threads >= 0")
	}
	logger := log.New(stderr, "", log.LstdFlags)
	b, release, err := openBackend(*backend, *device, *threads, *kernel, logger.Printf)
	if err != nil {
		return err
	}
	defer release()
	var rs []float64
	var median float64
	if g, ok := b.(*cuda.Backend); ok {
		m, err := cuda.Measure(g, *model, *batch, *localSteps, *rounds, *round)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "model %s (%d parameters), batch %d, %d local steps per lease, backend %s\n", m.Model, m.NumParams, m.Batch, m.LocalSteps, g.Name())
		rs, median = m.Rounds, m.Median
	} else {
		m, err := cpu.Measure(*model, *batch, *threads, *rounds, *round, logger.Printf)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "model %s (%d parameters), batch %d, %d threads, backend %s\n", m.Model, m.NumParams, m.Batch, m.Threads, b.Name())
		fmt.Fprintf(stdout, "kernel: %s\n", m.Kernel)
		rs, median = m.Rounds, m.Median
	}
	for i, r := range rs {
		fmt.Fprintf(stdout, "round %d: %.*f examples/s\n", i+1, rateDigits(r), r)
	}
	fmt.Fprintf(stdout, "examples/s: %.*f\n", rateDigits(median), median)
	return nil
}

// rateDigits is how many decimals a rate is printed with: one below 100
// (a large model's few examples a second), none above.
func rateDigits(r float64) int {
	if r < 100 {
		return 1
	}
	return 0
}
