package cuda

import (
	"fmt"
	"time"

	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/worker"
)

// Measurement is the GPU's training speed on one model.
type Measurement struct {
	Model      string
	Batch      int
	LocalSteps int
	Rounds     []float64 // examples/s of each timed round
	Median     float64
	NumParams  int
}

// Measure times leases of localSteps inner steps of batch examples on
// random inputs, as the worker runs them: examples uploaded, forward,
// backward and SGD on the device, the update downloaded; the snapshot stays
// on the device, as it does between leases of one version. It returns the
// median examples/s over rounds of about `round` each after a warm-up.
func Measure(b *Backend, preset string, batch, localSteps, rounds int, round time.Duration) (Measurement, error) {
	spec, err := nn.Preset(preset)
	if err != nil {
		return Measurement{}, err
	}
	if batch < 1 || localSteps < 1 || rounds < 1 {
		return Measurement{}, fmt.Errorf("batch, local steps and rounds must be positive, got %d, %d and %d", batch, localSteps, rounds)
	}
	model, err := nn.NewModel(spec)
	if err != nil {
		return Measurement{}, err
	}
	if err := b.Prepare(model, batch); err != nil {
		return Measurement{}, err
	}
	params := make([]float32, model.NumParams)
	model.Init(params, 1)
	update := make([]float32, model.NumParams)
	n := batch * localSteps
	x, labels := worker.RandomBatch(model, n)
	plan := worker.InnerSteps{BatchSize: batch, Steps: localSteps, UpdateKind: protocol.UpdateGradient,
		Inner: protocol.InnerOptimizer{Type: protocol.InnerSGD, LR: 0.01}}
	lease := func() error {
		_, _, err := b.Steps(worker.SnapshotID(1), params, x, labels, plan, update)
		return err
	}
	// The warm-up's first call uploads the snapshot.
	m := Measurement{Model: preset, Batch: batch, LocalSteps: localSteps, NumParams: model.NumParams}
	if m.Rounds, m.Median, err = worker.TimeRounds(lease, n, rounds, round, round/4); err != nil {
		return Measurement{}, err
	}
	return m, nil
}
