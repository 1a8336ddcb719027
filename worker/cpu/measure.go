package cpu

import (
	"fmt"
	"time"

	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/worker"
)

// The worker loop seeds each lease's dropout masks through Seeder.
var _ worker.Seeder = (*Backend)(nil)

// Measurement is the training speed of this machine on one model.
type Measurement struct {
	Model     string
	Batch     int
	Threads   int
	Rounds    []float64 // examples/s of each timed round
	Median    float64
	NumParams int
	Kernel    string // the GEMM kernel that ran (nn.KernelName)
}

// Measure times training steps (forward, backward, SGD update) on random
// inputs, the work a volunteer's CPU does for each lease, and returns the
// median examples/s over rounds of about `round` each after a warm-up.
// Under --kernel auto the kernels are timed first, as a worker does, and
// logf (if not nil) gets the figures.
func Measure(preset string, batch, threads, rounds int, round time.Duration, logf func(string, ...any)) (Measurement, error) {
	spec, err := nn.Preset(preset)
	if err != nil {
		return Measurement{}, err
	}
	if batch < 1 || rounds < 1 {
		return Measurement{}, fmt.Errorf("batch and rounds must be positive, got %d and %d", batch, rounds)
	}
	model, err := nn.NewModel(spec)
	if err != nil {
		return Measurement{}, err
	}
	b, err := New(threads)
	if err != nil {
		return Measurement{}, err
	}
	b.SetLog(logf)
	if err := b.Prepare(model, batch); err != nil {
		return Measurement{}, err
	}
	params := make([]float32, model.NumParams)
	model.Init(params, 1)
	grad := make([]float32, model.NumParams)
	x, labels := worker.RandomBatch(model, batch)
	step := func() error {
		if _, _, err := b.Gradient(params, x, labels, grad); err != nil {
			return err
		}
		nn.SGDStep(params, grad, 0.01)
		return nil
	}
	m := Measurement{Model: preset, Batch: batch, Threads: b.Threads(), NumParams: model.NumParams}
	if m.Rounds, m.Median, err = worker.TimeRounds(step, batch, rounds, round, round/4); err != nil {
		return Measurement{}, err
	}
	m.Kernel = nn.KernelName() // after any re-check
	return m, nil
}
