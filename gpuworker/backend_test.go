//go:build linux

package gpuworker

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

	"github.com/crowdtrain/crowdtrain/gpuworker/cuda"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/worker"
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
			"-x", "c", filepath.Join("cuda", "testdata", "fakecuda.c"),
			"-x", "c++", "-fno-exceptions", filepath.Join("testdata", "emu.cpp"), "-lm"}
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
	rng := rand.New(rand.NewPCG(seed, 7))
	params := make([]float32, m.NumParams)
	m.Init(params, int64(seed))
	for _, t := range m.Layout { // non-zero biases, so their use is checked
		if strings.HasSuffix(t.Name, ".bias") {
			for i := range t.Size {
				params[t.Offset+i] = 0.1 * float32(rng.NormFloat64())
			}
		}
	}
	x := make([]float32, n*m.InputSize)
	for i := range x {
		x[i] = rng.Float32()
	}
	labels := make([]int32, n)
	for i := range labels {
		labels[i] = int32(rng.IntN(m.NumClasses))
	}
	return params, x, labels
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
// against the CPU's, within 1e-4 relative.
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

// Models that exercise each layer kind and option, including the input
// gradient of every layer (a layer above another with parameters).
var layerModels = map[string]nn.ModelSpec{
	"dense": {Input: []int{1, 1, 12}, Layers: []nn.LayerSpec{{Type: "dense", Units: 7}, {Type: "dense", Units: 5}}},
	"relu":  {Input: []int{2, 3, 3}, Layers: []nn.LayerSpec{{Type: "dense", Units: 16}, {Type: "relu"}, {Type: "dense", Units: 4}}},
	"conv2d stride 2 padding 1": {Input: []int{3, 9, 8}, Layers: []nn.LayerSpec{
		{Type: "conv2d", Filters: 4, Kernel: 3, Stride: 2, Padding: 1}, {Type: "conv2d", Filters: 5, Kernel: 3, Stride: 1, Padding: 2},
		{Type: "flatten"}, {Type: "dense", Units: 3}}},
	"conv2d 1x1": {Input: []int{3, 5, 5}, Layers: []nn.LayerSpec{
		{Type: "conv2d", Filters: 4, Kernel: 1}, {Type: "conv2d", Filters: 2, Kernel: 1}, {Type: "flatten"}, {Type: "dense", Units: 3}}},
	"maxpool2d": {Input: []int{2, 8, 8}, Layers: []nn.LayerSpec{
		{Type: "conv2d", Filters: 3, Kernel: 3, Padding: 1}, {Type: "relu"}, {Type: "maxpool2d", Kernel: 2},
		{Type: "conv2d", Filters: 4, Kernel: 2}, {Type: "maxpool2d", Kernel: 3, Stride: 2}, // overlapping windows
		{Type: "flatten"}, {Type: "dense", Units: 6}, {Type: "relu"}, {Type: "dense", Units: 3}}},
	"flatten then dense": {Input: []int{2, 4, 4}, Layers: []nn.LayerSpec{
		{Type: "maxpool2d", Kernel: 2}, {Type: "flatten"}, {Type: "dense", Units: 5}, {Type: "relu"}, {Type: "dense", Units: 2}}},
}

func TestLayerGradientsMatchCPU(t *testing.T) {
	for _, dev := range devices() {
		t.Run(dev.name, func(t *testing.T) {
			b := dev.open(t)
			defer b.Close()
			for name, spec := range layerModels {
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
				if m.LabelsPerExample > 1 {
					continue // sequence models: not on this backend yet
				}
				n := 16
				if dev.name == "gpu" {
					n = 64
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

func (c *cpuBackend) Kind() string { return "native" }
func (c *cpuBackend) Name() string { return "cpu-reference" }
func (c *cpuBackend) Threads() int { return 1 }
func (c *cpuBackend) Prepare(m *nn.Model, maxBatch int) error {
	c.m, c.ws = m, m.NewWorkspace(maxBatch)
	return nil
}
func (c *cpuBackend) Gradient(params, x []float32, labels []int32, grad []float32) (float64, int, error) {
	l, h := c.m.Gradient(c.ws, params, x, labels, grad)
	return l, h, nil
}

var (
	innerSGD   = protocol.InnerOptimizer{Type: protocol.InnerSGD, LR: 0.05}
	innerAdamW = protocol.InnerOptimizer{Type: protocol.InnerAdamW, LR: 1e-3, WeightDecay: 0.1, Beta1: 0.9, Beta2: 0.999, Epsilon: 1e-8}
)

// A lease's inner steps on the device (SGD or AdamW, either update kind)
// give the update the CPU worker computes for the same lease.
func TestStepsMatchCPU(t *testing.T) {
	for _, dev := range devices() {
		t.Run(dev.name, func(t *testing.T) {
			b := dev.open(t)
			defer b.Close()
			spec, _ := nn.Preset("mnist-cnn")
			m, _ := nn.NewModel(spec)
			const batch, count = 8, 21 // a short last batch
			params, x, labels := randomBatch(m, count, 5)
			if err := b.Prepare(m, batch); err != nil {
				t.Fatal(err)
			}
			id := worker.SnapshotID(0)
			for _, tc := range []struct {
				inner protocol.InnerOptimizer
				kind  string
				steps int
			}{
				{innerSGD, protocol.UpdateGradient, 1}, {innerSGD, protocol.UpdateGradient, 3}, {innerSGD, protocol.UpdateGradient, 5},
				{innerSGD, protocol.UpdateDelta, 1}, {innerSGD, protocol.UpdateDelta, 3},
				{innerAdamW, protocol.UpdateDelta, 1}, {innerAdamW, protocol.UpdateDelta, 3}, {innerAdamW, protocol.UpdateGradient, 3},
			} {
				what := fmt.Sprintf("%s %s, %d steps", tc.inner.Type, tc.kind, tc.steps)
				n := count
				if tc.steps == 1 {
					n = batch
				}
				lease := protocol.Lease{ID: 1, JobID: "j", Count: n, BatchSize: batch, LocalSteps: tc.steps,
					Inner: tc.inner, UpdateKind: tc.kind, Snapshot: protocol.SnapshotGranted}
				want, err := worker.ComputeLease(&cpuBackend{}, m, lease, params, x[:n*m.InputSize], labels[:n])
				if err != nil {
					t.Fatal(err)
				}
				got := make([]float32, m.NumParams)
				id++
				plan := worker.InnerSteps{BatchSize: batch, Steps: tc.steps, Inner: tc.inner, UpdateKind: tc.kind}
				loss, hits, err := b.Steps(id, params, x[:n*m.InputSize], labels[:n], plan, got)
				if err != nil {
					t.Fatal(err)
				}
				if math.Abs(loss-want.LossSum) > 1e-4*math.Abs(want.LossSum) || hits != want.Correct {
					t.Errorf("%s: loss %v, %d correct; the CPU has %v, %d", what, loss, hits, want.LossSum, want.Correct)
				}
				// Several steps amplify rounding differences a little:
				// the pseudo-gradient divides a difference by lr.
				d := relDiff(got, want.Update)
				if d > 1e-3 || math.IsNaN(d) {
					t.Errorf("%s: update differs from the CPU's by %.3g relative", what, d)
				}
				t.Logf("%s: update within %.2g relative of the CPU's", what, d)
			}
		})
	}
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
	if !errors.Is(err, cuda.ErrOutOfMemory) || !strings.Contains(err.Error(), "CUDA_ERROR_OUT_OF_MEMORY") {
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
	if _, err := Measure(b, "nope", 4, 1, 1, time.Millisecond); err == nil {
		t.Error("an unknown preset was measured")
	}
}
