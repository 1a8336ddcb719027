package wasmworker

import (
	"fmt"
	"time"

	"github.com/crowdtrain/crowdtrain/cpubackend"

	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/worker"
)

// BenchResult is the training speed of the browser backend on one model.
type BenchResult struct {
	Model  string
	Batch  int
	Kernel string    // nn's GEMM kernel that ran
	Rounds []float64 // examples/s of each timed round
	Median float64
}

// Bench times training steps (forward, backward, SGD update) of the
// browser's CPU backend (package cpubackend on one thread), the work of one local step, and returns the examples/s
// of rounds of about round each after a warm-up of about one round. It is
// what the page's {type: "bench"} control runs, so that the worker can be
// compared with other engines in the same browser.
//
// The batch is x and labels when given (batch examples), else random
// inputs in [0, 1) and random labels. The two differ in speed: the kernels
// skip zero operands, and real images (MNIST is 81% zeros) have many.
func Bench(preset string, batch, rounds int, round time.Duration, x []float32, labels []int32) (BenchResult, error) {
	spec, err := nn.Preset(preset)
	if err != nil {
		return BenchResult{}, err
	}
	if batch < 1 || rounds < 1 || round <= 0 {
		return BenchResult{}, fmt.Errorf("bench: batch, rounds and round must be positive, got %d, %d, %v", batch, rounds, round)
	}
	model, err := nn.NewModel(spec)
	if err != nil {
		return BenchResult{}, err
	}
	b, err := cpubackend.New(1)
	if err != nil {
		return BenchResult{}, err
	}
	if err := b.Prepare(model, batch); err != nil {
		return BenchResult{}, err
	}
	params := make([]float32, model.NumParams)
	model.Init(params, 1)
	grad := make([]float32, model.NumParams)
	switch {
	case x == nil && labels == nil:
		x, labels = worker.RandomBatch(model, batch)
	case len(x) != batch*model.InputSize || len(labels) != batch:
		return BenchResult{}, fmt.Errorf("bench: a batch of %d needs %d inputs and %d labels, got %d and %d",
			batch, batch*model.InputSize, batch, len(x), len(labels))
	}
	for _, l := range labels {
		if l < 0 || int(l) >= model.NumClasses {
			return BenchResult{}, fmt.Errorf("bench: label %d is not a class of %s", l, preset)
		}
	}
	step := func() error {
		if _, _, err := b.Gradient(params, x, labels, grad); err != nil {
			return err
		}
		nn.SGDStep(params, grad, 0.01)
		return nil
	}
	r := BenchResult{Model: preset, Batch: batch, Kernel: nn.KernelName()}
	if r.Rounds, r.Median, err = worker.TimeRounds(step, batch, rounds, round, round); err != nil {
		return BenchResult{}, err
	}
	return r, nil
}

// GradientResult is one gradient the browser's backend computed.
type GradientResult struct {
	Backend string // the backend's name, e.g. wasm-simd
	LossSum float64
	Correct int
	Grad    []float32
}

// Gradient computes one gradient of preset, its parameters initialised
// from seed 1, on the batch x, labels (labels per example as the model
// has), with the backend in use: what a test compares with a native
// worker's numbers.
func Gradient(preset string, x []float32, labels []int32) (GradientResult, error) {
	spec, err := nn.Preset(preset)
	if err != nil {
		return GradientResult{}, err
	}
	model, err := nn.NewModel(spec)
	if err != nil {
		return GradientResult{}, err
	}
	lpe := model.LabelsPerExample
	n := len(labels) / max(lpe, 1)
	if n < 1 || len(labels) != n*lpe || len(x) != n*model.InputSize {
		return GradientResult{}, fmt.Errorf("a batch of %s needs %d inputs and %d labels per example, got %d and %d in all",
			preset, model.InputSize, lpe, len(x), len(labels))
	}
	for _, l := range labels {
		if l < 0 || int(l) >= model.NumClasses {
			return GradientResult{}, fmt.Errorf("label %d is not a class of %s", l, preset)
		}
	}
	b, err := cpubackend.New(1)
	if err != nil {
		return GradientResult{}, err
	}
	if err := b.Prepare(model, n); err != nil {
		return GradientResult{}, err
	}
	params := make([]float32, model.NumParams)
	model.Init(params, 1)
	r := GradientResult{Backend: b.Name(), Grad: make([]float32, model.NumParams)}
	r.LossSum, r.Correct, err = b.Gradient(params, x, labels, r.Grad)
	return r, err
}
