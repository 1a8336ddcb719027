package worker

import (
	"errors"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/crowdtrain/crowdtrain/nn"
)

// TimeRounds measures a backend's speed the same way for every worker kind
// (crowdtrain bench, the browser's bench control): it runs step for about
// warmup (at least three times; engines compile hot code in tiers, devices
// upload on first use), sizes a round from that so the clock is read
// rarely, then times rounds rounds of about round each. step does
// examplesPerStep examples; the result is each round's examples/s and
// their median.
func TimeRounds(step func() error, examplesPerStep, rounds int, round, warmup time.Duration) (rates []float64, median float64, err error) {
	if examplesPerStep < 1 || rounds < 1 || round <= 0 {
		return nil, 0, errors.New("timing: examples per step, rounds and the round's length must be positive")
	}
	n, start := 0, time.Now()
	for time.Since(start) < warmup || n < 3 {
		if err := step(); err != nil {
			return nil, 0, err
		}
		n++
	}
	perRound := max(1, int(float64(n)*float64(round)/float64(time.Since(start))))
	for range rounds {
		t0 := time.Now()
		for range perRound {
			if err := step(); err != nil {
				return nil, 0, err
			}
		}
		rates = append(rates, float64(perRound*examplesPerStep)/time.Since(t0).Seconds())
	}
	sorted := slices.Clone(rates)
	slices.Sort(sorted)
	return rates, sorted[len(sorted)/2], nil
}

// RandomBatch is the batch speed measurements time: n examples of inputs
// in [0, 1) (token ids in [0, vocab) for a model that starts with an
// embedding) and labels among the model's classes, one per label position,
// the same on every call.
func RandomBatch(m *nn.Model, n int) (x []float32, labels []int32) {
	rng := rand.New(rand.NewPCG(1, 2))
	vocab := 0
	if plan := m.Plan(); len(plan) > 0 && plan[0].Type == nn.TypeEmbedding {
		vocab = plan[0].Vocab
	}
	x = make([]float32, n*m.InputSize)
	for i := range x {
		if vocab > 0 {
			x[i] = float32(rng.IntN(vocab))
		} else {
			x[i] = rng.Float32()
		}
	}
	labels = make([]int32, n*m.LabelsPerExample)
	for i := range labels {
		labels[i] = int32(rng.IntN(m.NumClasses))
	}
	return x, labels
}
