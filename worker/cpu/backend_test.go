package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/crowdtrain/crowdtrain/compute"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/worker"
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

// dropoutModel has dropout on a sequence and on per-position dense
// outputs.
var dropoutModel = nn.ModelSpec{Input: []int{8}, Layers: []nn.LayerSpec{
	{Type: nn.TypeEmbedding, Vocab: 11, Units: 16, Positions: 8}, {Type: nn.TypeDropout, Rate: 0.5},
	{Type: nn.TypeDense, Units: 16}, {Type: nn.TypeDropout, Rate: 0.3}, {Type: nn.TypeDense, Units: 11}}}

// A lease's dropout masks come from the lease: one thread and several
// compute the same update for it (the threads' parts number their values
// as in the whole batch), and another lease over the same examples draws
// other masks.
func TestLeaseDropoutMasks(t *testing.T) {
	m, err := nn.NewModel(dropoutModel)
	if err != nil {
		t.Fatal(err)
	}
	const batch = 13 // not divisible by the thread counts
	rng := rand.New(rand.NewPCG(2, 2))
	params := make([]float32, m.NumParams)
	m.Init(params, 4)
	for _, tc := range []struct {
		steps int
		kind  string
	}{{1, protocol.UpdateGradient}, {3, protocol.UpdateDelta}} {
		n := batch * tc.steps
		x := make([]float32, n*m.InputSize)
		for i := range x {
			x[i] = float32(rng.IntN(11))
		}
		labels := make([]int32, n*m.LabelsPerExample)
		for i := range labels {
			labels[i] = int32(rng.IntN(11))
		}
		lease := protocol.Lease{ID: 41, JobID: "j", ShardID: 2, Start: 130, Count: n, BatchSize: batch, LocalSteps: tc.steps,
			Inner: protocol.InnerOptimizer{Type: protocol.InnerSGD, LR: 0.1}, UpdateKind: tc.kind, Snapshot: protocol.SnapshotGranted}
		compute := func(threads int, l protocol.Lease) *protocol.Result {
			b, err := New(threads)
			if err != nil {
				t.Fatal(err)
			}
			r, err := worker.ComputeLease(b, m, l, params, x, labels)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		want := compute(1, lease)
		for _, threads := range []int{2, 3, 8} {
			got := compute(threads, lease)
			if d := relDiff(got.Update, want.Update); d > 1e-5 || math.Abs(got.LossSum-want.LossSum) > 1e-5*want.LossSum {
				t.Errorf("%d steps: %d threads: loss %v, update %.3g relative from one thread's (loss %v)", tc.steps, threads, got.LossSum, d, want.LossSum)
			}
		}
		other := lease
		other.ID++
		if worker.DropoutSeed(other) == worker.DropoutSeed(lease) {
			t.Fatalf("leases %d and %d have the same dropout seed", lease.ID, other.ID)
		}
		got := compute(1, other)
		if d := relDiff(got.Update, want.Update); d < 0.1 {
			t.Errorf("%d steps: leases %d and %d over the same examples differ by %.3g relative: the same masks?", tc.steps, lease.ID, other.ID, d)
		}
	}
}

func relDiff(a, b []float32) float64 {
	var d, n float64
	for i := range b {
		d += (float64(a[i]) - float64(b[i])) * (float64(a[i]) - float64(b[i]))
		n += float64(b[i]) * float64(b[i])
	}
	return math.Sqrt(d / n)
}

// The coordinator's pinned backend (compute.Reference) computes what a
// one-thread CPU worker on the pure-Go kernel computes, bit for bit: a
// disputed lease recomputed there is the lease an honest browser worker
// (which runs that kernel) sends. Checked with local AdamW steps and
// dropout, and with the process on another kernel where there is one.
func TestReferenceIsTheOneThreadGoKernel(t *testing.T) {
	m, err := nn.NewModel(dropoutModel)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 3))
	params := make([]float32, m.NumParams)
	m.Init(params, 5)
	const batch, steps = 7, 3
	n := batch * steps
	x := make([]float32, n*m.InputSize)
	for i := range x {
		x[i] = float32(rng.IntN(11))
	}
	labels := make([]int32, n*m.LabelsPerExample)
	for i := range labels {
		labels[i] = int32(rng.IntN(11))
	}
	lease := protocol.Lease{ID: 9, JobID: "j", ShardID: 1, Start: 70, Count: n, BatchSize: batch, LocalSteps: steps,
		Inner:      protocol.InnerOptimizer{Type: protocol.InnerAdamW, LR: 0.01, Beta1: 0.9, Beta2: 0.95, Epsilon: 1e-8, WeightDecay: 0.1, ClipNorm: 1},
		UpdateKind: protocol.UpdateDelta, Snapshot: protocol.SnapshotGranted}
	old := nn.KernelName()
	defer nn.UseKernel(old)
	if err := nn.UseKernel(nn.KernelGo); err != nil {
		t.Fatal(err)
	}
	b, err := New(1)
	if err != nil {
		t.Fatal(err)
	}
	want, err := worker.ComputeLease(b, m, lease, params, x, labels)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range nn.Kernels() {
		if err := nn.UseKernel(k); err != nil {
			t.Fatal(err)
		}
		got, err := compute.Lease(&compute.Reference{}, m, lease, params, x, labels)
		if err != nil {
			t.Fatal(err)
		}
		if got.LossSum != want.LossSum || got.Correct != want.Correct {
			t.Errorf("process kernel %s: loss %v, correct %d; the go worker's %v, %d", k, got.LossSum, got.Correct, want.LossSum, want.Correct)
		}
		for i := range want.Update {
			if math.Float32bits(got.Update[i]) != math.Float32bits(want.Update[i]) {
				t.Fatalf("process kernel %s: update[%d] = %v, the go worker's %v", k, i, got.Update[i], want.Update[i])
			}
		}
	}
}
