package cpu

import (
	"math"
	"testing"

	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/nn/nntest"
)

// A transformer with its output tied to the embedding: the backend, on
// every kernel the machine has and split over threads, computes what
// package nn's one-thread pure-Go path computes. The shared token table's
// gradient sums the two layers' parts from every thread's examples.
func TestTiedTransformerMatchesReference(t *testing.T) {
	m, err := nn.NewModel(nn.Transformer(nn.TransformerConfig{Context: 8, Width: 16, Blocks: 2, Heads: 2, Vocab: 40, Tied: true}))
	if err != nil {
		t.Fatal(err)
	}
	const batch = 11 // not divisible by the thread counts
	params, x, labels := nntest.RandomBatch(m, batch, 5)
	old := nn.KernelName()
	defer nn.UseKernel(old)
	if err := nn.UseKernel(nn.KernelGo); err != nil {
		t.Fatal(err)
	}
	want := make([]float32, m.NumParams)
	wantLoss, wantHits := m.Gradient(m.NewWorkspace(batch), params, x, labels, want)
	for _, k := range nn.Kernels() {
		if err := nn.UseKernel(k); err != nil {
			t.Fatal(err)
		}
		for _, threads := range []int{1, 3} {
			b, err := New(threads)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Prepare(m, batch); err != nil {
				t.Fatal(err)
			}
			got := make([]float32, m.NumParams)
			loss, hits, err := b.Gradient(params, x, labels, got)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(loss-wantLoss) > 1e-5*wantLoss || hits != wantHits {
				t.Errorf("kernel %s, %d threads: loss %v, %d correct; the reference's %v, %d", k, threads, loss, hits, wantLoss, wantHits)
			}
			for _, pt := range m.Layout {
				if d := relDiff(got[pt.Offset:pt.Offset+pt.Size], want[pt.Offset:pt.Offset+pt.Size]); d > 1e-5 || math.IsNaN(d) {
					t.Errorf("kernel %s, %d threads: %s differs from the reference by %.3g relative", k, threads, pt.Name, d)
				}
			}
		}
	}
}
