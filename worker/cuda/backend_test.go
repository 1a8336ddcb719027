//go:build linux

package cuda

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/nn/nntest"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/worker"
	"github.com/crowdtrain/crowdtrain/worker/cpu"
	"github.com/crowdtrain/crowdtrain/worker/cuda/driver"
)

var (
	emuOnce sync.Once
	emuDir  string
	emuErr  error
)

// emulatorDir builds the fake CUDA libraries with kernels.cu compiled for
// the CPU (testdata/emu.cpp), once per test binary.
func emulatorDir(t *testing.T) string {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not found: the CPU emulation of the CUDA libraries is built with it (apt-get install gcc)")
	}
	emuOnce.Do(func() {
		dir, err := mkdirTemp()
		if err != nil {
			emuErr = err
			return
		}
		so := filepath.Join(dir, "libfakecuda.so")
		args := []string{"-shared", "-fPIC", "-O2", "-Wl,-Bsymbolic", "-DEMU", "-o", so,
			"-x", "c", filepath.Join("driver", "testdata", "fakecuda.c"),
			"-x", "c++", "-fno-exceptions", filepath.Join("testdata", "emu.cpp"), "-lm", "-lpthread"}
		if out, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
			emuErr = errors.New("gcc " + strings.Join(args, " ") + ": " + err.Error() + "\n" + string(out))
			return
		}
		for _, name := range []string{"libcuda.so.1", "libnvrtc.so.13", "libcublas.so.13"} {
			if err := symlink(so, filepath.Join(dir, name)); err != nil {
				emuErr = err
				return
			}
		}
		emuDir = dir
	})
	if emuErr != nil {
		t.Fatal(emuErr)
	}
	return emuDir
}

// emuVar points at a global of the emulator library.
func emuVar[T any](t *testing.T, name string) *T {
	t.Helper()
	h, err := purego.Dlopen(filepath.Join(emulatorDir(t), "libcuda.so.1"), purego.RTLD_NOW)
	if err != nil {
		t.Fatal(err)
	}
	p, err := purego.Dlsym(h, name)
	if err != nil {
		t.Fatal(err)
	}
	return *(**T)(unsafe.Pointer(&p))
}

// device is one place the backend's numerics are checked: the CPU
// emulation of the kernels (always) and a real GPU (where there is one).
type device struct {
	name string
	open func(t *testing.T) *Backend
}

func devices() []device {
	return []device{
		{"emulator", func(t *testing.T) *Backend {
			b, err := OpenWith(Options{LibDirs: []string{emulatorDir(t)}, CacheDir: "-", Logf: t.Logf})
			if err != nil {
				t.Fatal(err)
			}
			return b
		}},
		{"gpu", func(t *testing.T) *Backend { return openGPU(t) }},
	}
}

// openGPU opens device 0 or skips, saying why.
func openGPU(t testing.TB) *Backend {
	t.Helper()
	b, err := OpenWith(Options{Device: 0, Logf: t.Logf})
	if err != nil {
		t.Skipf("no usable GPU: %v", err)
	}
	t.Logf("GPU: %s", b.Describe())
	return b
}

func randomBatch(m *nn.Model, n int, seed uint64) ([]float32, []float32, []int32) {
	return nntest.RandomBatch(m, n, seed)
}

// relDiff is ‖a−b‖/‖b‖.
func relDiff(a, b []float32) float64 {
	var d, n float64
	for i := range b {
		d += (float64(a[i]) - float64(b[i])) * (float64(a[i]) - float64(b[i]))
		n += float64(b[i]) * float64(b[i])
	}
	if n == 0 {
		return math.Sqrt(d)
	}
	return math.Sqrt(d / n)
}

// compareGradients checks the whole gradient and each tensor of it
// against the CPU's, within 1e-4 relative. Both compute in float32 but
// sum in different orders (the device's reductions are trees, cuBLAS's
// GEMMs block their own way, the CPU's layernorm and loss sum in
// float64), so they differ by rounding: float32's 6e-8 per operation,
// grown along the longest sums (a parameter's gradient sums n*t
// positions) and through the layers. What the emulator measures is about
// 1e-7 for one layer and under 1e-6 for charlm-tiny and charlm; 1e-4 leaves
// room for a GPU's other orders and still fails any real mistake, which
// is off by far more (a wrong mask, scale or index).
func compareGradients(t *testing.T, m *nn.Model, got, want []float32, what string) {
	t.Helper()
	d := relDiff(got, want)
	if d > 1e-4 || math.IsNaN(d) {
		t.Errorf("%s: gradient differs from the CPU's by %.3g relative", what, d)
	}
	t.Logf("%s: gradient within %.2g relative of the CPU's", what, d)
	for _, tn := range m.Layout {
		g, w := got[tn.Offset:tn.Offset+tn.Size], want[tn.Offset:tn.Offset+tn.Size]
		if d := relDiff(g, w); d > 1e-4 || math.IsNaN(d) {
			t.Errorf("%s: %s differs from the CPU's by %.3g relative", what, tn.Name, d)
		}
	}
}

func TestLayerGradientsMatchCPU(t *testing.T) {
	for _, dev := range devices() {
		t.Run(dev.name, func(t *testing.T) {
			b := dev.open(t)
			defer b.Close()
			for name, spec := range nntest.LayerModels {
				m, err := nn.NewModel(spec)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				checkGradient(t, b, m, 13, name)
			}
		})
	}
}

func TestPresetGradientsMatchCPU(t *testing.T) {
	for _, dev := range devices() {
		t.Run(dev.name, func(t *testing.T) {
			b := dev.open(t)
			defer b.Close()
			for _, preset := range nn.PresetNames() {
				spec, _ := nn.Preset(preset)
				m, _ := nn.NewModel(spec)
				n := 16
				switch {
				case preset == "gpt-small" && dev.name == "emulator":
					continue // minutes of plain loops; nntest.LayerModels has its layers at toy size
				case preset == "gpt-small":
					n = 2 // the CPU reference is the slow side
				case dev.name == "gpu":
					n = 64
				case preset == "charlm" || preset == "gpt-mini":
					n = 2 // the emulator's GEMMs are plain loops
				}
				checkGradient(t, b, m, n, preset)
			}
		})
	}
}

func checkGradient(t *testing.T, b *Backend, m *nn.Model, n int, what string) {
	t.Helper()
	params, x, labels := randomBatch(m, n, 3)
	want := make([]float32, m.NumParams)
	wantLoss, wantHits := m.Gradient(m.NewWorkspace(n), params, x, labels, want)
	if err := b.Prepare(m, n+3); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	got := make([]float32, m.NumParams)
	loss, hits, err := b.Gradient(params, x, labels, got)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if math.Abs(loss-wantLoss) > 1e-4*math.Abs(wantLoss) || hits != wantHits {
		t.Errorf("%s: loss %v, %d correct; the CPU has %v, %d", what, loss, hits, wantLoss, wantHits)
	}
	compareGradients(t, m, got, want, what)
}

// cpuBackend is package nn on the host: what worker.ComputeLease runs
// the CPU path with.
type cpuBackend struct {
	m  *nn.Model
	ws *nn.Workspace
}

func (c *cpuBackend) Name() string { return "cpu-reference" }
func (c *cpuBackend) Threads() int { return 1 }
func (c *cpuBackend) Prepare(m *nn.Model, maxBatch int) error {
	c.m, c.ws = m, m.NewWorkspace(maxBatch)
	return nil
}
func (c *cpuBackend) SetDropoutSeed(seed uint64) { c.ws.SetSeed(seed) }
func (c *cpuBackend) Gradient(params, x []float32, labels []int32, grad []float32) (float64, int, error) {
	l, h := c.m.Gradient(c.ws, params, x, labels, grad)
	return l, h, nil
}

// clipped is o with a clip_norm far below any gradient's norm here.
func clipped(o protocol.InnerOptimizer) protocol.InnerOptimizer {
	o.ClipNorm = 1e-5
	return o
}

var (
	innerSGD   = protocol.InnerOptimizer{Type: protocol.InnerSGD, LR: 0.05}
	innerAdamW = protocol.InnerOptimizer{Type: protocol.InnerAdamW, LR: 1e-3, WeightDecay: 0.1, Beta1: 0.9, Beta2: 0.999, Epsilon: 1e-8}
)

// A lease's inner steps on the device (SGD or AdamW, either update kind)
// give the update the CPU worker computes for the same lease.
func TestStepsMatchCPU(t *testing.T) {
	charlm, _ := nn.Preset("charlm-tiny")
	cnn, _ := nn.Preset("mnist-cnn")
	for _, dev := range devices() {
		t.Run(dev.name, func(t *testing.T) {
			b := dev.open(t)
			defer b.Close()
			for _, mc := range []struct {
				name string
				spec nn.ModelSpec
			}{{"mnist-cnn", cnn}, {"charlm-tiny", charlm}, {"dropout", nntest.LayerModels["dropout"]}} {
				m, err := nn.NewModel(mc.spec)
				if err != nil {
					t.Fatal(err)
				}
				checkSteps(t, b, m, mc.name)
			}
		})
	}
}

func checkSteps(t *testing.T, b *Backend, m *nn.Model, model string) {
	const batch, count = 8, 21 // a short last batch
	params, x, labels := randomBatch(m, count, 5)
	lpe := m.LabelsPerExample
	id := worker.SnapshotID(0)
	for _, tc := range []struct {
		inner protocol.InnerOptimizer
		kind  string
		steps int
	}{
		{innerSGD, protocol.UpdateGradient, 1}, {innerSGD, protocol.UpdateGradient, 3}, {innerSGD, protocol.UpdateGradient, 5},
		{innerSGD, protocol.UpdateDelta, 1}, {innerSGD, protocol.UpdateDelta, 3},
		{innerAdamW, protocol.UpdateDelta, 1}, {innerAdamW, protocol.UpdateDelta, 3}, {innerAdamW, protocol.UpdateGradient, 3},
		// Clipped: every gradient's norm is far above 1e-5.
		{clipped(innerSGD), protocol.UpdateGradient, 1}, {clipped(innerSGD), protocol.UpdateGradient, 3},
		{clipped(innerSGD), protocol.UpdateDelta, 3}, {clipped(innerAdamW), protocol.UpdateDelta, 3},
	} {
		what := fmt.Sprintf("%s: %s %s, %d steps, clip_norm %v", model, tc.inner.Type, tc.kind, tc.steps, tc.inner.ClipNorm)
		n := count
		if tc.steps == 1 {
			n = batch
		}
		lease := protocol.Lease{ID: 1, JobID: "j", Count: n, BatchSize: batch, LocalSteps: tc.steps,
			Inner: tc.inner, UpdateKind: tc.kind, Snapshot: protocol.SnapshotGranted}
		// The same lease: the CPU draws the dropout masks of its seed.
		want, err := worker.ComputeLease(&cpuBackend{}, m, lease, params, x[:n*m.InputSize], labels[:n*lpe])
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Prepare(m, batch); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, m.NumParams)
		id++
		plan := worker.InnerSteps{BatchSize: batch, Steps: tc.steps, Inner: tc.inner, UpdateKind: tc.kind, Seed: worker.DropoutSeed(lease)}
		loss, hits, err := b.Steps(id, params, x[:n*m.InputSize], labels[:n*lpe], plan, got)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(loss-want.LossSum) > 1e-4*math.Abs(want.LossSum) || hits != want.Correct {
			t.Errorf("%s: loss %v, %d correct; the CPU has %v, %d", what, loss, hits, want.LossSum, want.Correct)
		}
		var unclipped []float32
		if tc.inner.ClipNorm > 0 {
			// The clip must change the update for the case to test it.
			plain := lease
			plain.Inner.ClipNorm = 0
			u, err := worker.ComputeLease(&cpuBackend{}, m, plain, params, x[:n*m.InputSize], labels[:n*lpe])
			if err != nil {
				t.Fatal(err)
			}
			unclipped = u.Update
		}
		if tc.inner.Type == protocol.InnerAdamW {
			for _, s := range keyBiases(m.Plan()) {
				clear(got[s[0] : s[0]+s[1]])
				clear(want.Update[s[0] : s[0]+s[1]])
				if unclipped != nil {
					clear(unclipped[s[0] : s[0]+s[1]])
				}
			}
		}
		if unclipped != nil {
			if d := relDiff(unclipped, want.Update); d < 0.02 { // 20 times the tolerance below
				t.Fatalf("%s: the clip changes the CPU's update by only %.3g relative", what, d)
			}
		}
		// Several steps amplify rounding differences a little:
		// the pseudo-gradient divides a difference by lr.
		d := relDiff(got, want.Update)
		if d > 1e-3 || math.IsNaN(d) {
			t.Errorf("%s: update differs from the CPU's by %.3g relative", what, d)
		}
		t.Logf("%s: update within %.2g relative of the CPU's", what, d)
	}
}

// A lease's dropout masks are the lease's: the device draws the masks the
// native worker draws for it with one thread or several, in one step or
// several, and another lease draws others.
func TestLeaseDropoutMatchesNative(t *testing.T) {
	m, err := nn.NewModel(nntest.LayerModels["dropout"])
	if err != nil {
		t.Fatal(err)
	}
	const batch = 9
	for _, dev := range devices() {
		t.Run(dev.name, func(t *testing.T) {
			b := dev.open(t)
			defer b.Close()
			for _, tc := range []struct {
				steps int
				kind  string
			}{{1, protocol.UpdateGradient}, {3, protocol.UpdateDelta}} {
				n := batch * tc.steps
				params, x, labels := randomBatch(m, n, 9)
				lease := protocol.Lease{ID: 77, JobID: "j", ShardID: 3, Start: 45, Count: n, BatchSize: batch, LocalSteps: tc.steps,
					Inner: innerSGD, UpdateKind: tc.kind, Snapshot: protocol.SnapshotGranted}
				got, err := worker.ComputeLease(b, m, lease, params, x, labels)
				if err != nil {
					t.Fatal(err)
				}
				for _, threads := range []int{1, 4} {
					cpu, err := cpu.New(threads)
					if err != nil {
						t.Fatal(err)
					}
					want, err := worker.ComputeLease(cpu, m, lease, params, x, labels)
					if err != nil {
						t.Fatal(err)
					}
					d := relDiff(got.Update, want.Update)
					if d > 1e-4 || math.Abs(got.LossSum-want.LossSum) > 1e-4*want.LossSum {
						t.Errorf("%d steps: loss %v, update %.3g relative from the native worker's with %d threads (loss %v)",
							tc.steps, got.LossSum, d, threads, want.LossSum)
					}
				}
				other := lease
				other.ID++
				o, err := worker.ComputeLease(b, m, other, params, x, labels)
				if err != nil {
					t.Fatal(err)
				}
				if d := relDiff(o.Update, got.Update); d < 0.1 {
					t.Errorf("%d steps: leases %d and %d over the same examples differ by %.3g relative: the same masks?", tc.steps, lease.ID, other.ID, d)
				}
			}
		})
	}
}

// keyBiases are the spans of the key block of every attention layer's
// in_proj_bias. Its gradient is zero in exact arithmetic (it adds the same
// q·b to every score of a row, which the softmax ignores), so what a
// backend computes for it is rounding noise, and Adam's step, about
// lr·sign(g) whatever g's size, turns different noise into different
// steps of full size. AdamW updates are compared without them.
func keyBiases(plans []nn.LayerPlan) [][2]int {
	var spans [][2]int
	for _, p := range plans {
		if p.Type == nn.TypeAttention {
			d := p.InShape[1]
			spans = append(spans, [2]int{p.BiasOffset + d, d})
		}
		spans = append(spans, keyBiases(p.Body)...)
	}
	return spans
}

// The same snapshot id reuses the parameters already on the device; a new
// one uploads.
func TestStepsUploadsASnapshotOnce(t *testing.T) {
	b := devices()[0].open(t)
	defer b.Close()
	spec, _ := nn.Preset("mnist-mlp")
	m, _ := nn.NewModel(spec)
	params, x, labels := randomBatch(m, 4, 1)
	other, _, _ := randomBatch(m, 4, 2)
	if err := b.Prepare(m, 4); err != nil {
		t.Fatal(err)
	}
	step := func(id worker.SnapshotID, p []float32) []float32 {
		u := make([]float32, m.NumParams)
		if _, _, err := b.Steps(id, p, x, labels, worker.InnerSteps{BatchSize: 4, Steps: 1, Inner: protocol.InnerOptimizer{Type: protocol.InnerSGD, LR: 0.1}, UpdateKind: protocol.UpdateGradient}, u); err != nil {
			t.Fatal(err)
		}
		return u
	}
	first := step(7, params)
	if d := relDiff(step(7, other), first); d != 0 {
		t.Errorf("same id, other parameters: the update changed (%.3g), so the snapshot was uploaded again", d)
	}
	if d := relDiff(step(8, other), first); d == 0 {
		t.Error("a new id did not upload the new parameters")
	}
	if d := relDiff(step(0, params), first); d != 0 {
		t.Errorf("id 0 must always upload: update differs by %.3g", d)
	}
	// Gradient overwrites the device's working copy, not the snapshot.
	g := make([]float32, m.NumParams)
	b.Gradient(other, x, labels, g)
	if d := relDiff(step(0, params), first); d != 0 {
		t.Errorf("after Gradient: update differs by %.3g", d)
	}
}

func TestBadInputIsAnError(t *testing.T) {
	b := devices()[0].open(t)
	defer b.Close()
	spec, _ := nn.Preset("mnist-mlp")
	m, _ := nn.NewModel(spec)
	params, x, labels := randomBatch(m, 4, 1)
	g := make([]float32, m.NumParams)
	if _, _, err := b.Gradient(params, x, labels, g); err == nil || !strings.Contains(err.Error(), "before Prepare") {
		t.Errorf("Gradient before Prepare: %v", err)
	}
	if err := b.Prepare(m, 4); err != nil {
		t.Fatal(err)
	}
	labels[2] = 10
	if _, _, err := b.Gradient(params, x, labels, g); err == nil || !strings.Contains(err.Error(), "label 10 of example 2") {
		t.Errorf("bad label: %v", err)
	}
	labels[2] = 1
	if _, _, err := b.Gradient(params, x, labels[:3], g); err == nil {
		t.Error("3 labels for 4 examples were accepted")
	}
	lm, _ := nn.NewModel(nntest.LayerModels["embedding without positions"])
	lp, lx, llabels := randomBatch(lm, 2, 1)
	if err := b.Prepare(lm, 2); err != nil {
		t.Fatal(err)
	}
	lg := make([]float32, lm.NumParams)
	if _, _, err := b.Gradient(lp, lx, llabels[:7], lg); err == nil || !strings.Contains(err.Error(), "7 labels is not a whole number of examples of 5 labels") {
		t.Errorf("7 labels for a model of 5 per example: %v", err)
	}
	lx[6] = 9
	if _, _, err := b.Gradient(lp, lx, llabels, lg); err == nil || !strings.Contains(err.Error(), "token 9 at position 1 of example 1 is not an id in [0, 9)") {
		t.Errorf("token 9 of a vocabulary of 9: %v", err)
	}
	lx[6] = 2.5
	if _, _, err := b.Gradient(lp, lx, llabels, lg); err == nil || !strings.Contains(err.Error(), "token 2.5") {
		t.Errorf("token 2.5: %v", err)
	}
	if err := b.Prepare(m, 4); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Steps(1, params, x, labels, worker.InnerSteps{BatchSize: 8, Steps: 1, Inner: innerSGD, UpdateKind: protocol.UpdateGradient}, g); err == nil {
		t.Error("a batch larger than prepared was accepted")
	}
	if _, _, err := b.Steps(1, params, x, labels, worker.InnerSteps{BatchSize: 4, Steps: 1, Inner: protocol.InnerOptimizer{Type: protocol.InnerSGD}, UpdateKind: protocol.UpdateGradient}, g); err == nil {
		t.Error("learning rate 0 was accepted")
	}
	if _, _, err := b.Gradient(params[:5], x, labels, g); err == nil {
		t.Error("short parameters were accepted")
	}
	b.Close()
	if err := b.Prepare(m, 4); err == nil {
		t.Error("Prepare after Close succeeded")
	}
	b.Close() // twice is fine
}

func TestOpenSaysWhatIsMissing(t *testing.T) {
	_, err := OpenWith(Options{LibDirs: []string{t.TempDir()}, Logf: t.Logf})
	if err == nil || !strings.Contains(err.Error(), "libcuda.so.1 not found: install the NVIDIA driver") {
		t.Errorf("no driver: %v", err)
	}
	dir := emulatorDir(t)
	if _, err := OpenWith(Options{Device: 3, LibDirs: []string{dir}, CacheDir: "-", Logf: t.Logf}); !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "device 3 does not exist") {
		t.Errorf("device 3 of 1: %v", err)
	}
	count := emuVar[int32](t, "fake_device_count")
	*count = 0
	_, err = OpenWith(Options{LibDirs: []string{dir}, CacheDir: "-", Logf: t.Logf})
	*count = 1
	if !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "sees no GPU") {
		t.Errorf("no GPU: %v", err)
	}
}

func TestOutOfMemoryIsAnError(t *testing.T) {
	b := devices()[0].open(t)
	defer b.Close()
	limit := emuVar[uint64](t, "fake_memory_limit")
	old := *limit
	*limit = 1 << 20
	defer func() { *limit = old }()
	spec, _ := nn.Preset("mnist-cnn")
	m, _ := nn.NewModel(spec)
	err := b.Prepare(m, 4096)
	if !errors.Is(err, driver.ErrOutOfMemory) || !strings.Contains(err.Error(), "CUDA_ERROR_OUT_OF_MEMORY") {
		t.Errorf("Prepare beyond the device's memory: %v", err)
	}
}

func TestChooseArch(t *testing.T) {
	for _, c := range []struct {
		major, minor int
		supported    []int
		cubinLib     bool
		arch         int
		cubin, fails bool
	}{
		{9, 0, []int{75, 80, 86, 89, 90, 100, 120}, true, 90, true, false},
		{8, 6, []int{75, 80, 90}, true, 80, true, false},   // same major: cubin for 8.0 runs on 8.6
		{12, 1, []int{75, 80, 90}, true, 90, false, false}, // newer than NVRTC knows: PTX
		{9, 0, nil, false, 90, false, false},
		{6, 1, []int{75, 80}, true, 0, false, true},
	} {
		arch, cubin, err := chooseArch(c.major, c.minor, c.supported, c.cubinLib)
		if (err != nil) != c.fails || arch != c.arch || cubin != c.cubin {
			t.Errorf("chooseArch(%d.%d, %v) = %d, %v, %v; want %d, %v, error %v", c.major, c.minor, c.supported, arch, cubin, err, c.arch, c.cubin, c.fails)
		}
	}
}

func TestMeasureReportsSpeed(t *testing.T) {
	b := devices()[0].open(t)
	defer b.Close()
	m, err := Measure(b, "mnist-mlp", 4, 2, 2, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Rounds) != 2 || m.Median <= 0 || m.NumParams == 0 {
		t.Errorf("measurement %+v", m)
	}
	if m, err := Measure(b, "charlm-tiny", 2, 2, 1, 20*time.Millisecond); err != nil || m.Median <= 0 {
		t.Errorf("charlm-tiny: %+v, %v", m, err)
	}
	if _, err := Measure(b, "nope", 4, 1, 1, time.Millisecond); err == nil {
		t.Error("an unknown preset was measured")
	}
}

// The CUDA backend trains charlm-tiny: one lease of 100 AdamW steps on
// windows of a short repeating text, all on the device; the parameters it
// ends with, scored by package nn on the CPU, predict the text far better
// than a uniform guess over bytes (ln 256 = 5.55 nats).
func TestCharLMTrainsOnTheDevice(t *testing.T) {
	for _, dev := range devices() {
		t.Run(dev.name, func(t *testing.T) {
			b := dev.open(t)
			defer b.Close()
			const text = "the quick brown fox jumps. "
			spec, _ := nn.Preset("charlm-tiny")
			m, _ := nn.NewModel(spec)
			T := m.InputSize
			const batch, steps = 8, 100
			r := rand.New(rand.NewPCG(1, 2))
			windows := func(starts []int) ([]float32, []int32) {
				x, labels := make([]float32, len(starts)*T), make([]int32, len(starts)*T)
				for e, s := range starts {
					for p := range T {
						x[e*T+p] = float32(text[(s+p)%len(text)])
						labels[e*T+p] = int32(text[(s+p+1)%len(text)])
					}
				}
				return x, labels
			}
			starts := make([]int, batch*steps)
			for i := range starts {
				starts[i] = r.IntN(len(text))
			}
			x, labels := windows(starts)
			base := make([]float32, m.NumParams)
			m.Init(base, 1)
			if err := b.Prepare(m, batch); err != nil {
				t.Fatal(err)
			}
			adamw := protocol.InnerOptimizer{Type: protocol.InnerAdamW, LR: 3e-3, WeightDecay: 0.01, Beta1: 0.9, Beta2: 0.999, Epsilon: 1e-8}
			update := make([]float32, m.NumParams)
			plan := worker.InnerSteps{BatchSize: batch, Steps: steps, Inner: adamw, UpdateKind: protocol.UpdateDelta}
			trainLoss, _, err := b.Steps(1, base, x, labels, plan, update)
			if err != nil {
				t.Fatal(err)
			}
			trained := make([]float32, m.NumParams)
			for i := range trained {
				trained[i] = base[i] - update[i] // a delta update is base - w
			}
			every := make([]int, len(text))
			for i := range every {
				every[i] = i
			}
			hx, hl := windows(every)
			ws := m.NewWorkspace(len(every))
			before, _ := m.Evaluate(ws, base, hx, hl)
			after, right := m.Evaluate(ws, trained, hx, hl)
			before, after = before/float64(len(hl)), after/float64(len(hl))
			t.Logf("charlm-tiny, %d AdamW steps on the device: training loss %.3f on average; held-out loss %.3f -> %.3f, %d/%d next bytes right",
				steps, trainLoss/float64(len(labels)), before, after, right, len(hl))
			if before < math.Log(256)-1 || after > 0.6 || math.IsNaN(after) {
				t.Errorf("held-out loss %.3f before and %.3f after training; want about ln 256 = %.2f, then under 0.6", before, after, math.Log(256))
			}
		})
	}
}
