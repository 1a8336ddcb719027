package main

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/worker"
)

// pythonWithModules returns a Python 3 that imports numpy, websockets and
// msgpack, or skips the test saying what to install (and fails instead
// when CROWDTRAIN_REQUIRE_BROWSER=1 says CI installed them).
func pythonWithModules(t *testing.T) string {
	t.Helper()
	return testenv.NeedPython(t, "numpy", "websockets", "msgpack")
}

// scripts/pyworker.py, written from docs/PROTOCOL.md alone, trains
// mnist-mlp against a real coordinator: alone on the job, its results are
// accepted, none is rejected, and the job's evaluation after 300 of its
// updates (the one at version 250) is well above chance.
func TestPythonWorkerFromTheProtocolDoc(t *testing.T) {
	testenv.Long(t, "starts a coordinator and a Python worker")
	trainWithPython(t, "mnist-mlp", 300, 80*time.Second, 0.85, "SGD on mnist-mlp gets there in 250 steps")
}

// The same for mnist-cnn: pyworker.py's conv2d and maxpool2d train it with
// every result accepted, past 90% test accuracy at version 250.
func TestPythonWorkerTrainsTheCNN(t *testing.T) {
	testenv.Long(t, "starts a coordinator and a Python worker")
	// numpy's convolutions are slow beside the other shards' processes:
	// 227 results in 80 s in one CI run.
	trainWithPython(t, "mnist-cnn", 300, 240*time.Second, 0.90, "the job's default Adam outer steps on mnist-cnn get there in 250 updates; 96% measured")
}

// trainWithPython serves job alone to one pyworker.py until it has results
// accepted results (or for at most seconds), and checks that none was
// rejected and that the job's last evaluation reaches minAcc (why says why
// that is the bar).
func trainWithPython(t *testing.T, job string, results int, seconds time.Duration, minAcc float64, why string) {
	python := pythonWithModules(t)
	const token = "pyworker-test-admin-token"
	addr := freeAddr(t)
	startProc(t, "serve", "--addr", addr, "--job", job, "--db", "", "--admin-token", token)
	waitJob(t, addr, 30*time.Second, "the coordinator", func(coordinator.JobView) bool { return true })

	ctx, cancel := context.WithTimeout(context.Background(), seconds+10*time.Second)
	defer cancel()
	py := exec.CommandContext(ctx, python, filepath.Join("..", "..", "scripts", "pyworker.py"),
		"--coordinator", "ws://"+addr+"/ws", "--seconds", strconv.Itoa(int(seconds.Seconds())), "--results", strconv.Itoa(results))
	var out strings.Builder
	py.Stdout, py.Stderr = &out, &out
	if err := py.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- py.Wait() }()

	// While it works, the admin API shows it with accepted results.
	var seen coordinator.WorkerView
	deadline := time.Now().Add(60 * time.Second)
	for seen.Accepted < 3 && time.Now().Before(deadline) {
		for _, w := range pythonWorkers(t, addr, token) {
			seen = w
		}
		time.Sleep(100 * time.Millisecond)
	}
	if seen.Accepted < 3 {
		t.Fatalf("the Python worker has %d accepted results after 60 s (%+v); its output:\n%s", seen.Accepted, seen, out.String())
	}
	if seen.Rejected != 0 {
		t.Errorf("the Python worker, alone on the job, had %d results rejected; its output:\n%s", seen.Rejected, out.String())
	}
	if err := <-done; err != nil {
		t.Fatalf("pyworker.py: %v\n%s", err, out.String())
	}
	v := waitJob(t, addr, 30*time.Second, "an evaluation of the Python worker's model", func(v coordinator.JobView) bool { return v.Eval != nil })
	if v.UpdatesApplied < int64(results) || v.UpdatesRejected != 0 {
		t.Errorf("job applied %d updates and rejected %d; the Python worker alone had %d accepted", v.UpdatesApplied, v.UpdatesRejected, results)
	}
	if v.Eval.Accuracy < minAcc {
		t.Errorf("%s: test accuracy %.4f at version %d after the Python worker's updates, want > %.2f (%s)", job, v.Eval.Accuracy, v.Eval.Version, minAcc, why)
	}
	t.Logf("pyworker: %s version %d, test accuracy %.4f at version %d; %s", job, v.Version, v.Eval.Accuracy, v.Eval.Version, strings.TrimSpace(out.String()))
}

// pythonWorkers lists the connected workers whose backend is numpy.
func pythonWorkers(t *testing.T, addr, token string) []coordinator.WorkerView {
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/api/v1/workers", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var all []coordinator.WorkerView
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&all) != nil {
		return nil
	}
	var py []coordinator.WorkerView
	for _, w := range all {
		if w.Backend == "numpy" {
			py = append(py, w)
		}
	}
	return py
}

// pyworker.py's inner steps compute what the Go worker computes for the
// same lease: sgd and adamw, both update kinds, over a short last batch, on
// the dense preset and on the convolutional ones (conv2d with and without
// padding, maxpool2d).
func TestPythonWorkerComputesWhatGoComputes(t *testing.T) {
	python := pythonWithModules(t)
	for _, preset := range []string{"mnist-mlp", "mnist-cnn", "fashion-cnn"} {
		t.Run(preset, func(t *testing.T) { comparePythonLeases(t, python, preset) })
	}
}

// comparePythonLeases runs leases of preset through pyworker.py's
// run_lease and worker.ComputeLease and compares updates, losses and hits.
func comparePythonLeases(t *testing.T, python, preset string) {
	spec, err := nn.Preset(preset)
	if err != nil {
		t.Fatal(err)
	}
	m, err := nn.NewModel(spec)
	if err != nil {
		t.Fatal(err)
	}
	const count, batch = 40, 16
	rng := rand.New(rand.NewPCG(3, 4))
	params := make([]float32, m.NumParams)
	m.Init(params, 11)
	x := make([]float32, count*m.InputSize)
	for i := range x {
		x[i] = float32(rng.IntN(256)) / 255
	}
	labels := make([]int32, count)
	for i := range labels {
		labels[i] = int32(rng.IntN(10))
	}
	dir := t.TempDir()
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("params", protocol.EncodeFloats(params))
	write("x", protocol.EncodeFloats(x))
	lb := make([]byte, 0, 4*count)
	for _, l := range labels {
		lb = binary.LittleEndian.AppendUint32(lb, uint32(l))
	}
	write("labels", lb)
	specJSON, _ := json.Marshal(spec)
	write("model.json", specJSON)
	scripts, _ := filepath.Abs(filepath.Join("..", "..", "scripts"))
	// Reads the lease (JSON) from argv, the arrays from dir, and writes the
	// update, loss_sum and correct.
	const probe = `
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import pyworker
d, lease = sys.argv[2], json.loads(sys.argv[3])
spec = json.load(open(d + "/model.json"))
params = np.fromfile(d + "/params", dtype="<f4")
model = pyworker.Model(spec, len(params))
x = np.fromfile(d + "/x", dtype="<f4").reshape(lease["count"], model.input_size)
labels = np.fromfile(d + "/labels", dtype="<i4").astype(np.int64)
update, loss, correct = pyworker.run_lease(model, lease, params, x, labels)
np.asarray(update, dtype="<f4").tofile(d + "/update")
print(json.dumps({"loss_sum": loss, "correct": correct}))
`
	for _, tc := range []struct {
		inner protocol.InnerOptimizer
		kind  string
		steps int
		tol   float64
	}{
		{protocol.InnerOptimizer{Type: protocol.InnerSGD, LR: 0.1}, protocol.UpdateGradient, 1, 1e-5},
		{protocol.InnerOptimizer{Type: protocol.InnerSGD, LR: 0.1}, protocol.UpdateGradient, 3, 1e-4},
		{protocol.InnerOptimizer{Type: protocol.InnerAdamW, LR: 1e-3, WeightDecay: 0.1, Beta1: 0.9, Beta2: 0.999, Epsilon: 1e-8}, protocol.UpdateDelta, 3, 1e-4},
		// clip_norm far under the gradients' norms: every step is clipped.
		{protocol.InnerOptimizer{Type: protocol.InnerSGD, LR: 0.1, ClipNorm: 0.05}, protocol.UpdateGradient, 1, 1e-5},
		{protocol.InnerOptimizer{Type: protocol.InnerAdamW, LR: 1e-3, WeightDecay: 0.1, Beta1: 0.9, Beta2: 0.999, Epsilon: 1e-8, ClipNorm: 0.05}, protocol.UpdateDelta, 3, 1e-4},
	} {
		name := fmt.Sprintf("%s %s %d steps clip_norm %v", tc.inner.Type, tc.kind, tc.steps, tc.inner.ClipNorm)
		lease := protocol.Lease{ID: 1, JobID: "j", Count: count, BatchSize: batch, LocalSteps: tc.steps,
			Inner: tc.inner, UpdateKind: tc.kind, Snapshot: protocol.SnapshotGranted}
		n := count
		if tc.steps == 1 {
			n = batch
		}
		lease.Count = n
		want, err := worker.ComputeLease(&nnBackend{}, m, lease, params, x[:n*m.InputSize], labels[:n])
		if err != nil {
			t.Fatal(err)
		}
		leaseJSON, _ := json.Marshal(map[string]any{"count": n, "batch_size": batch, "local_steps": tc.steps, "update_kind": tc.kind,
			"inner_optimizer": map[string]any{"type": tc.inner.Type, "lr": tc.inner.LR, "weight_decay": tc.inner.WeightDecay,
				"beta1": tc.inner.Beta1, "beta2": tc.inner.Beta2, "epsilon": tc.inner.Epsilon, "clip_norm": tc.inner.ClipNorm}})
		write("x", protocol.EncodeFloats(x[:n*m.InputSize]))
		write("labels", lb[:4*n])
		out, err := exec.Command(python, "-c", probe, scripts, dir, string(leaseJSON)).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
		var stats struct {
			LossSum float64 `json:"loss_sum"`
			Correct int     `json:"correct"`
		}
		if err := json.Unmarshal(out, &stats); err != nil {
			t.Fatalf("%s: %v: %s", name, err, out)
		}
		raw, err := os.ReadFile(filepath.Join(dir, "update"))
		if err != nil {
			t.Fatal(err)
		}
		got := make([]float32, m.NumParams)
		if err := protocol.DecodeFloatsInto(got, raw); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		rel, outliers := updateDistance(got, want.Update, tc.inner, tc.steps, tc.tol)
		t.Logf("%s: update within %.2g relative of Go's, loss %.4f vs %.4f", name, rel, stats.LossSum, want.LossSum)
		if rel > tc.tol {
			t.Errorf("%s: update differs from Go's by %.3g relative, want ≤ %g", name, rel, tc.tol)
		}
		for _, i := range outliers {
			t.Logf("%s: parameter %d set aside as an AdamW rounding outlier: Python %g, Go %g", name, i, got[i], want.Update[i])
		}
		if math.Abs(stats.LossSum-want.LossSum) > 1e-4*want.LossSum || stats.Correct != want.Correct {
			t.Errorf("%s: loss %v, %d correct; Go has %v, %d", name, stats.LossSum, stats.Correct, want.LossSum, want.Correct)
		}
	}
}

// updateDistance returns ‖got − want‖ / ‖want‖ (1 when want is zero) and
// the parameters it set aside to bring that under tol. AdamW divides each
// gradient entry by its own running magnitude, so an entry that float32
// rounding leaves near zero (a pre-activation that cancels to about 0 at a
// relu, summed in another order here than in Go) can move by up to lr per
// step in either direction. For AdamW, at most one parameter in 20,000 may
// differ that way, by no more than 1.5·lr per step: the fewest such,
// largest first, are left out of the distance. Any other difference counts.
func updateDistance(got, want []float32, inner protocol.InnerOptimizer, steps int, tol float64) (float64, []int) {
	type entry struct {
		i int
		d float64
	}
	var diffs []entry
	var diff, norm float64
	for i, w := range want {
		d := float64(got[i]) - float64(w)
		diff += d * d
		norm += float64(w) * float64(w)
		diffs = append(diffs, entry{i, math.Abs(d)})
	}
	if norm == 0 {
		return 1, nil
	}
	var outliers []int
	if inner.Type == protocol.InnerAdamW {
		slices.SortFunc(diffs, func(a, b entry) int { return cmp.Compare(b.d, a.d) })
		bound := 1.5 * float64(steps) * float64(inner.LR)
		for _, e := range diffs[:len(want)/20000] {
			if diff <= tol*tol*norm || e.d > bound {
				break
			}
			outliers = append(outliers, e.i)
			diff -= e.d * e.d
		}
	}
	return math.Sqrt(max(diff, 0) / norm), outliers
}

// nnBackend computes with package nn on one thread.
type nnBackend struct {
	m  *nn.Model
	ws *nn.Workspace
}

func (b *nnBackend) Name() string { return "nn" }
func (b *nnBackend) Threads() int { return 1 }
func (b *nnBackend) Prepare(m *nn.Model, maxBatch int) error {
	b.m, b.ws = m, m.NewWorkspace(maxBatch)
	return nil
}
func (b *nnBackend) Gradient(params, x []float32, labels []int32, grad []float32) (float64, int, error) {
	l, c := b.m.Gradient(b.ws, params, x, labels, grad)
	return l, c, nil
}

// scripts/pyworker.py's shard reader, written from docs/PROTOCOL.md,
// decodes every element type and label kind of format 2 to the inputs and
// labels the Go worker trains on, and refuses format 1.
func TestPythonShardReaderMatchesGo(t *testing.T) {
	python := pythonWithModules(t)
	text, _, err := dataset.TextSplits("t", "dataset.path", []byte("It is a truth universally acknowledged, that a single man"), 8, 0.2)
	if err != nil {
		t.Fatal(err)
	}
	sets := map[string]*dataset.Set{
		"pixels": {Elem: dataset.Pixels, Kind: dataset.ClassLabels, Shape: []int{1, 2, 3}, Classes: 10, N: 3,
			U8: []byte{0, 1, 2, 3, 4, 5, 250, 251, 252, 253, 254, 255, 9, 8, 7, 6, 5, 4}, Labels: []int32{9, 0, 4}},
		"features": {Elem: dataset.Float32, Kind: dataset.ClassLabels, Shape: []int{2}, Classes: 300, N: 2,
			F32: []float32{-1.5, 1e-20, 3, 4.25}, Labels: []int32{299, 256}},
		"tokens16": {Elem: dataset.Tokens16, Kind: dataset.ClassLabels, Shape: []int{2}, Classes: 5, N: 2,
			U16: []uint16{1000, 2, 65535, 4}, Labels: []int32{4, 1}},
		"text": text,
	}
	dir := t.TempDir()
	scripts, _ := filepath.Abs(filepath.Join("..", "..", "scripts"))
	const probe = `
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import pyworker
x, labels = pyworker.parse_shard(open(sys.argv[2], "rb").read())
np.asarray(x, dtype="<f4").tofile(sys.argv[2] + ".x")
np.asarray(labels, dtype="<i4").tofile(sys.argv[2] + ".y")
`
	for name, s := range sets {
		body, err := dataset.AppendShard(nil, s, dataset.Shard{Indices: []int{1, 0}})
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, body, 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(python, "-c", probe, scripts, path).CombinedOutput(); err != nil {
			t.Fatalf("%s: pyworker.parse_shard: %v\n%s", name, err, out)
		}
		d, err := dataset.DecodeShard(body, 10)
		if err != nil {
			t.Fatal(err)
		}
		wantX := make([]float32, d.N*d.ExampleSize())
		wantY := make([]int32, d.N*d.LabelsPerExample())
		d.Fill(wantX, wantY, 0, d.N)
		xb, _ := os.ReadFile(path + ".x")
		yb, _ := os.ReadFile(path + ".y")
		if len(xb) != 4*len(wantX) || len(yb) != 4*len(wantY) {
			t.Fatalf("%s: python gave %d inputs and %d labels, want %d and %d", name, len(xb)/4, len(yb)/4, len(wantX), len(wantY))
		}
		for i, w := range wantX {
			if g := math.Float32frombits(binary.LittleEndian.Uint32(xb[4*i:])); g != w {
				t.Fatalf("%s: input %d: python %v, Go %v", name, i, g, w)
			}
		}
		for i, w := range wantY {
			if g := int32(binary.LittleEndian.Uint32(yb[4*i:])); g != w {
				t.Fatalf("%s: label %d: python %d, Go %d", name, i, g, w)
			}
		}
	}
	// A format 1 shard is refused with a message, not misread.
	old := filepath.Join(dir, "v1")
	v1 := append([]byte("CTSH\x01\x00"), make([]byte, 30)...)
	if err := os.WriteFile(old, v1, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(python, "-c", probe, scripts, old).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "not a format 2 shard") {
		t.Fatalf("a format 1 shard: %v\n%s", err, out)
	}
}

// pyworker.py's maxpool2d sends a window's gradient to its first maximum in
// row-major order, as Go does: a 1x1 conv2d with weights (0.5, 0.5) makes
// the four outputs of a 2x2 window tie at 0.5 from four different input
// pairs, so the conv weight's gradient says which input won.
func TestPythonMaxPoolTiesGoToTheFirstMaximum(t *testing.T) {
	python := pythonWithModules(t)
	spec := nn.ModelSpec{Input: []int{2, 2, 2}, Layers: []nn.LayerSpec{
		{Type: nn.TypeConv2D, Filters: 1, Kernel: 1},
		{Type: nn.TypeMaxPool2D, Kernel: 2},
		{Type: nn.TypeFlatten},
		{Type: nn.TypeDense, Units: 2},
	}}
	m, err := nn.NewModel(spec)
	if err != nil {
		t.Fatal(err)
	}
	// conv weight [1, 2, 1, 1], conv bias, dense weight [2, 1], dense bias.
	params := []float32{0.5, 0.5, 0, 1, -1, 0, 0}
	if m.NumParams != len(params) {
		t.Fatalf("the model has %d parameters, the test sets %d", m.NumParams, len(params))
	}
	// Channel 0 then channel 1; each position's pair sums to 1.
	x := []float32{0.25, 0.75, 0.5, 1, 0.75, 0.25, 0.5, 0}
	labels := []int32{1}
	want := make([]float32, m.NumParams)
	m.Gradient(m.NewWorkspace(1), params, x, labels, want)

	dir := t.TempDir()
	specJSON, _ := json.Marshal(spec)
	if err := os.WriteFile(filepath.Join(dir, "model.json"), specJSON, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "params"), protocol.EncodeFloats(params), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "x"), protocol.EncodeFloats(x), 0o644); err != nil {
		t.Fatal(err)
	}
	scripts, _ := filepath.Abs(filepath.Join("..", "..", "scripts"))
	const probe = `
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import pyworker
d = sys.argv[2]
params = np.fromfile(d + "/params", dtype="<f4")
model = pyworker.Model(json.load(open(d + "/model.json")), len(params))
grad = np.zeros_like(params)
model.gradient(params, np.fromfile(d + "/x", dtype="<f4").reshape(1, -1), np.array([1]), grad)
grad.astype("<f4").tofile(d + "/grad")
`
	if out, err := exec.Command(python, "-c", probe, scripts, dir).CombinedOutput(); err != nil {
		t.Fatalf("pyworker.Model.gradient: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "grad"))
	if err != nil {
		t.Fatal(err)
	}
	got := make([]float32, m.NumParams)
	if err := protocol.DecodeFloatsInto(got, raw); err != nil {
		t.Fatal(err)
	}
	// The winner is input 0, (0.25, 0.75): the conv weight's gradient is
	// dOut times that pair, 1:3.
	if want[1] != 3*want[0] || want[0] == 0 {
		t.Fatalf("Go's conv weight gradient %v is not 1:3; the test's premise (Go picks the first of tied maxima) is wrong", want[:2])
	}
	for i := range want {
		if math.Abs(float64(got[i]-want[i])) > 1e-6 {
			t.Errorf("gradient: Python %v, Go %v (entries 0 and 1 are the conv weight's: the pair of the input that won the tie)", got, want)
			break
		}
	}
}
