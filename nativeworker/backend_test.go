package nativeworker

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/crowdtrain/crowdtrain/nn"
)

// Splitting a batch across threads must give the single-thread gradient.
func TestThreadsGiveTheSameGradient(t *testing.T) {
	for _, preset := range []string{"mnist-mlp", "mnist-cnn"} {
		spec, _ := nn.Preset(preset)
		model, err := nn.NewModel(spec)
		if err != nil {
			t.Fatal(err)
		}
		params := make([]float32, model.NumParams)
		model.Init(params, 3)
		rng := rand.New(rand.NewPCG(1, 1))
		const batch = 37 // not divisible by the thread counts
		x := make([]float32, batch*model.InputSize)
		for i := range x {
			x[i] = rng.Float32()
		}
		labels := make([]int32, batch)
		for i := range labels {
			labels[i] = int32(rng.IntN(10))
		}
		want := make([]float32, model.NumParams)
		one, _ := New(1)
		one.Prepare(model, batch)
		wantLoss, wantHits, _ := one.Gradient(params, x, labels, want)
		for _, threads := range []int{2, 3, 8} {
			b, _ := New(threads)
			if err := b.Prepare(model, 64); err != nil {
				t.Fatal(err)
			}
			got := make([]float32, model.NumParams)
			loss, hits, err := b.Gradient(params, x, labels, got)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(loss-wantLoss) > 1e-3*math.Abs(wantLoss) || hits != wantHits {
				t.Errorf("%s, %d threads: loss %v hits %d, want %v %d", preset, threads, loss, hits, wantLoss, wantHits)
			}
			var maxDiff, maxAbs float64
			for i := range got {
				maxDiff = max(maxDiff, math.Abs(float64(got[i]-want[i])))
				maxAbs = max(maxAbs, math.Abs(float64(want[i])))
			}
			if maxDiff > 1e-4*maxAbs {
				t.Errorf("%s, %d threads: gradient differs by %g (max |g| %g)", preset, threads, maxDiff, maxAbs)
			}
		}
	}
}

func TestNewRejectsNegativeThreads(t *testing.T) {
	if _, err := New(-1); err == nil {
		t.Fatal("New(-1) succeeded")
	}
	if b, _ := New(0); b.Threads() < 1 {
		t.Fatalf("New(0) has %d threads, want one per CPU", b.Threads())
	}
}
