package wasm

import (
	"fmt"
	"time"

	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/worker"
)

// BenchResult is the training speed of the browser backend on one model.
type BenchResult struct {
	Model      string
	Batch      int
	LocalSteps int       // steps per timed call (a GPU backend's lease)
	Backend    string    // the backend's name
	Kernel     string    // nn's GEMM kernel that ran (CPU backends)
	Rounds     []float64 // examples/s of each timed round
	Median     float64
}

// Bench times training steps (forward, backward, SGD update) of the
// browser's backend b, the work of one local step, and returns the
// examples/s of rounds of about round each after a warm-up of about one
// round. It is what the page's {type: "bench"} control runs, so that the
// worker can be compared with other engines in the same browser. A
// backend that runs inner steps itself (the GPU's, worker.Stepper) is
// timed as the worker runs a lease of localSteps steps on the batch: the
// snapshot stays on the device, and each lease's update (all the
// parameters) comes back, so more steps share that download; a CPU
// backend's steps are the same whatever localSteps is.
//
// The batch is x and labels when given (batch examples), else random
// inputs in [0, 1) and random labels. The two differ in speed: the kernels
// skip zero operands, and real images (MNIST is 81% zeros) have many.
func Bench(b worker.Backend, preset string, batch, localSteps, rounds int, round time.Duration, x []float32, labels []int32) (BenchResult, error) {
	spec, err := nn.Preset(preset)
	if err != nil {
		return BenchResult{}, err
	}
	if batch < 1 || localSteps < 1 || rounds < 1 || round <= 0 {
		return BenchResult{}, fmt.Errorf("bench: batch, local steps, rounds and round must be positive, got %d, %d, %d, %v", batch, localSteps, rounds, round)
	}
	model, err := nn.NewModel(spec)
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
	r := BenchResult{Model: preset, Batch: batch, LocalSteps: 1, Backend: b.Name()}
	perCall := batch
	if st, ok := b.(worker.Stepper); ok {
		plan := worker.InnerSteps{BatchSize: batch, Steps: localSteps, UpdateKind: protocol.UpdateDelta,
			Inner: protocol.InnerOptimizer{Type: protocol.InnerSGD, LR: 0.01}}
		lx, llabels := x, labels
		for range localSteps - 1 { // the same batch at each step
			lx, llabels = append(lx, x...), append(llabels, labels...)
		}
		step = func() error {
			_, _, err := st.Steps(1, params, lx, llabels, plan, grad)
			return err
		}
		r.LocalSteps, perCall = localSteps, batch*localSteps
	} else {
		r.Kernel = nn.KernelName()
	}
	if r.Rounds, r.Median, err = worker.TimeRounds(step, perCall, rounds, round, round); err != nil {
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
	Output  []float32 // the model's output, from a backend with Forward; else nil
}

// Gradient computes one gradient of the model spec at params (nil: nn's
// initialisation from seed 1) on the batch x, labels (labels per example as
// the model has), with backend b, and, when b can (the GPU's), the
// model's output on x without dropout: what a test compares with a native
// worker's numbers.
func Gradient(b worker.Backend, spec nn.ModelSpec, params, x []float32, labels []int32) (GradientResult, error) {
	model, err := nn.NewModel(spec)
	if err != nil {
		return GradientResult{}, err
	}
	lpe := model.LabelsPerExample
	n := len(labels) / max(lpe, 1)
	if n < 1 || len(labels) != n*lpe || len(x) != n*model.InputSize {
		return GradientResult{}, fmt.Errorf("a batch of %s needs %d inputs and %d labels per example, got %d and %d in all",
			"the model", model.InputSize, lpe, len(x), len(labels))
	}
	for _, l := range labels {
		if l < 0 || int(l) >= model.NumClasses {
			return GradientResult{}, fmt.Errorf("label %d is not one of the model's %d classes", l, model.NumClasses)
		}
	}
	if err := b.Prepare(model, n); err != nil {
		return GradientResult{}, err
	}
	if params == nil {
		params = make([]float32, model.NumParams)
		model.Init(params, 1)
	} else if len(params) != model.NumParams {
		return GradientResult{}, fmt.Errorf("%d parameters, the model has %d", len(params), model.NumParams)
	}
	r := GradientResult{Backend: b.Name(), Grad: make([]float32, model.NumParams)}
	if sd, ok := b.(worker.Seeder); ok {
		sd.SetDropoutSeed(0) // an nn.Workspace's first seed
	}
	if r.LossSum, r.Correct, err = b.Gradient(params, x, labels, r.Grad); err != nil {
		return r, err
	}
	if f, ok := b.(forwarder); ok {
		r.Output = make([]float32, n*model.LabelsPerExample*model.NumClasses)
		err = f.Forward(params, x, r.Output)
	}
	return r, err
}

// forwarder is a backend that computes a model's output (the GPU's).
type forwarder interface {
	Forward(params, x, out []float32) error
}
