package web_test

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/nn/nntest"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/worker"
	"github.com/crowdtrain/crowdtrain/worker/cpu"
)

// webgpuTolerance is the relative L2 distance the WebGPU backend's outputs
// and gradients may have from package nn's: both compute in float32, but
// the GPU's reductions are trees and its GEMM tiles its own way.
const webgpuTolerance = 1e-5

// The WebGPU backend computes nn's numbers: in headless Chromium on
// SwiftShader's adapter (a GPU emulated on the CPU, with WebGPU's rules),
// every layer kind and option (nntest.LayerModels, each layer with one
// above it that has parameters, so its input gradient is used) and the
// presets, forward (the model's output, without dropout) and backward
// (the gradient of the mean loss, with dropout), against nn on the host.
func TestWebGPUMatchesCPU(t *testing.T) {
	testenv.Long(t, "runs every layer on WebGPU in Chromium")
	ctx := numbersPage(t)
	type check struct {
		name string
		spec nn.ModelSpec
		n    int
	}
	var checks []check
	names := make([]string, 0, len(nntest.LayerModels))
	for name := range nntest.LayerModels {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		checks = append(checks, check{name, nntest.LayerModels[name], 13})
	}
	for _, p := range []struct {
		name string
		n    int
	}{{"mnist-mlp", 64}, {"mnist-cnn", 16}, {"charlm-tiny", 8}} {
		spec, err := nn.Preset(p.name)
		if err != nil {
			t.Fatal(err)
		}
		checks = append(checks, check{p.name, spec, p.n})
	}
	for _, c := range checks {
		m, err := nn.NewModel(c.spec)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		params, x, labels := nntest.RandomBatch(m, c.n, 3)
		want := make([]float32, m.NumParams)
		wantLoss, wantCorrect := m.Gradient(m.NewWorkspace(c.n), params, x, labels, want)
		wantOut := m.Forward(m.NewWorkspace(c.n), params, x)
		spec, err := json.Marshal(c.spec)
		if err != nil {
			t.Fatal(err)
		}
		lb := make([]byte, len(labels))
		for i, l := range labels {
			lb[i] = byte(l)
		}
		r := pageGradient(t, ctx, gradientAsk{Spec: string(spec), Backend: "webgpu", X: floatBytes(x), Labels: lb, Params: floatBytes(params), Reuse: true})
		if r.Backend != "webgpu" {
			t.Fatalf("%s: asked for webgpu, computed on %s (%s)", c.name, r.Backend, r.BackendReason)
		}
		got, gotOut := floatsOf(r.Grad), floatsOf(r.Output)
		if len(got) != len(want) || len(gotOut) != len(wantOut) {
			t.Fatalf("%s: %d gradient values and %d outputs, want %d and %d", c.name, len(got), len(gotOut), len(want), len(wantOut))
		}
		dOut, dGrad := relL2(gotOut, wantOut), relL2(got, want)
		t.Logf("%s: output within %.2g, gradient within %.2g (relative L2); loss sum %.6f against %.6f", c.name, dOut, dGrad, r.LossSum, wantLoss)
		if !(dOut < webgpuTolerance) {
			t.Errorf("%s: forward: the output is %.3g from nn's (relative L2), want under %g", c.name, dOut, webgpuTolerance)
		}
		if !(dGrad < webgpuTolerance) {
			t.Errorf("%s: backward: the gradient is %.3g from nn's (relative L2), want under %g", c.name, dGrad, webgpuTolerance)
		}
		// Each tensor on its own, so that a mistake in a small one is not
		// hidden by a large one; small tensors sum few terms, so they get
		// more room.
		for _, tn := range m.Layout {
			if d := relL2(got[tn.Offset:tn.Offset+tn.Size], want[tn.Offset:tn.Offset+tn.Size]); !(d < 10*webgpuTolerance) {
				t.Errorf("%s: the gradient of %s is %.3g from nn's", c.name, tn.Name, d)
			}
		}
		if r.Correct != wantCorrect || math.Abs(r.LossSum-wantLoss) > webgpuTolerance*math.Abs(wantLoss) {
			t.Errorf("%s: loss sum %v and %d correct, nn has %v and %d", c.name, r.LossSum, r.Correct, wantLoss, wantCorrect)
		}
	}
}

// relL2 is ‖got-want‖₂/‖want‖₂ (the distance itself when want is 0).
func relL2(got, want []float32) float64 {
	var d, n float64
	for i, w := range want {
		e := float64(got[i]) - float64(w)
		d += e * e
		n += float64(w) * float64(w)
	}
	if n == 0 {
		return math.Sqrt(d)
	}
	return math.Sqrt(d / n)
}

// A lease's inner steps on the GPU (SGD or AdamW, clipped or not, either
// update kind, dropout drawn from the lease's seed) give the update the
// CPU worker computes for the same lease: worker.ComputeLease on both, on
// 21 examples in batches of 8 (a short last batch).
func TestWebGPULeasesMatchCPU(t *testing.T) {
	ctx := numbersPage(t)
	sgd := protocol.InnerOptimizer{Type: protocol.InnerSGD, LR: 0.05}
	adamw := protocol.InnerOptimizer{Type: protocol.InnerAdamW, LR: 1e-3, WeightDecay: 0.1, Beta1: 0.9, Beta2: 0.999, Epsilon: 1e-8}
	clipped := func(o protocol.InnerOptimizer) protocol.InnerOptimizer { o.ClipNorm = 1e-3; return o }
	cnn, _ := nn.Preset("mnist-cnn")
	for _, c := range []struct {
		name  string
		spec  nn.ModelSpec
		inner protocol.InnerOptimizer
		kind  string
		steps int
	}{
		{"mnist-cnn", cnn, sgd, protocol.UpdateGradient, 1},
		{"mnist-cnn", cnn, sgd, protocol.UpdateDelta, 3},
		{"mnist-cnn", cnn, clipped(adamw), protocol.UpdateDelta, 3},
		{"dropout", nntest.LayerModels["dropout"], clipped(sgd), protocol.UpdateGradient, 3},
		{"dropout", nntest.LayerModels["dropout"], adamw, protocol.UpdateGradient, 3},
	} {
		what := fmt.Sprintf("%s: %s %s, %d steps, clip_norm %v", c.name, c.inner.Type, c.kind, c.steps, c.inner.ClipNorm)
		m, err := nn.NewModel(c.spec)
		if err != nil {
			t.Fatal(err)
		}
		const batch, count = 8, 21
		params, x, labels := nntest.RandomBatch(m, count, 5)
		lease := protocol.Lease{ID: 7, JobID: "j", Count: count, BatchSize: batch, LocalSteps: c.steps,
			Inner: c.inner, UpdateKind: c.kind, Snapshot: protocol.SnapshotGranted}
		cb, err := cpu.New(1)
		if err != nil {
			t.Fatal(err)
		}
		want, err := worker.ComputeLease(cb, m, lease, params, x, labels)
		if err != nil {
			t.Fatal(err)
		}
		spec, _ := json.Marshal(c.spec)
		lj, _ := json.Marshal(lease)
		lb := make([]byte, len(labels))
		for i, l := range labels {
			lb[i] = byte(l)
		}
		r := pageGradient(t, ctx, gradientAsk{Spec: string(spec), Lease: string(lj), Backend: "webgpu",
			X: floatBytes(x), Labels: lb, Params: floatBytes(params), Reuse: true})
		if r.Backend != "webgpu" {
			t.Fatalf("%s: asked for webgpu, computed on %s (%s)", what, r.Backend, r.BackendReason)
		}
		got := floatsOf(r.Grad)
		if len(got) != len(want.Update) {
			t.Fatalf("%s: %d update values, want %d", what, len(got), len(want.Update))
		}
		d := relL2(got, want.Update)
		t.Logf("%s: update within %.2g of the CPU's (relative L2; its norm %.3g)", what, d, l2(want.Update))
		if !(d < webgpuTolerance) {
			t.Errorf("%s: the update is %.3g from the CPU worker's (relative L2), want under %g", what, d, webgpuTolerance)
		}
		if r.Correct != want.Correct || math.Abs(r.LossSum-want.LossSum) > webgpuTolerance*math.Abs(want.LossSum) {
			t.Errorf("%s: loss sum %v and %d correct, the CPU has %v and %d", what, r.LossSum, r.Correct, want.LossSum, want.Correct)
		}
	}
}

func l2(v []float32) float64 {
	var s float64
	for _, f := range v {
		s += float64(f) * float64(f)
	}
	return math.Sqrt(s)
}
