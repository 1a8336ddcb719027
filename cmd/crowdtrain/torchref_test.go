package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/store"
)

const torchReference = "../../scripts/torch_reference.py"

// torchPython is /usr/bin/python3 with torch and numpy (Debian's
// python3-torch), or the test is skipped (failed in CI).
func torchPython(t *testing.T) string {
	t.Helper()
	return testenv.NeedTorch(t)
}

// exportModel stores a job of model spec ms with params as its checkpoint
// at version 7 and runs `crowdtrain export`, returning the file written.
func exportModel(t *testing.T, dir, name string, ms nn.ModelSpec, params []float32) string {
	t.Helper()
	return exportSpec(t, dir, jobspec.Spec{Name: name, Model: ms}, params)
}

// exportSpec is exportModel of a whole job spec.
func exportSpec(t *testing.T, dir string, spec jobspec.Spec, params []float32) string {
	t.Helper()
	dbPath, id := storeJob(t, dir, spec, params)
	out := filepath.Join(dir, spec.Name+".safetensors")
	if code, stdout, stderr := runCmd(t, context.Background(), "export", "--db", dbPath, "--job", id, "--out", out); code != 0 {
		t.Fatalf("export: exit %d\n%s%s", code, stdout, stderr)
	}
	return out
}

// storeJob writes a database, dir/NAME.db, holding a done job of spec
// whose checkpoint at version 7 is params, and returns its path and the
// job's id.
func storeJob(t *testing.T, dir string, spec jobspec.Spec, params []float32) (dbPath, id string) {
	t.Helper()
	ctx := context.Background()
	name := spec.Name
	dbPath = filepath.Join(dir, name+".db")
	db, err := store.Open(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	specJSON, _ := json.Marshal(spec)
	id = name + "-1"
	if err := db.CreateJob(ctx, store.JobRecord{ID: id, Name: name, Spec: specJSON, State: "done", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := db.SaveCheckpoint(ctx, store.Checkpoint{JobID: id, Version: 7, CreatedAt: time.Now(), Params: protocol.EncodeFloats(params)}, 5); err != nil {
		t.Fatal(err)
	}
	db.Close()
	return dbPath, id
}

// randomParams initialises m as training would and moves every parameter
// (biases and layer norms included) by up to ±scale, so that a tensor
// loaded in the wrong place or transposed shows in the loss.
func randomParams(m *nn.Model, scale float32) []float32 {
	p := make([]float32, m.NumParams)
	m.Init(p, 3)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range p {
		p[i] += scale * (2*rng.Float32() - 1)
	}
	return p
}

// presetModel is the built-in model spec name and the model it makes.
func presetModel(t testing.TB, name string) (nn.ModelSpec, *nn.Model) {
	t.Helper()
	ms, err := nn.Preset(name)
	if err != nil {
		t.Fatal(err)
	}
	m, err := nn.NewModel(ms)
	if err != nil {
		t.Fatal(err)
	}
	return ms, m
}

// littleEndian is v's values in little-endian order, an .npy file's data.
func littleEndian(t testing.TB, v any) []byte {
	t.Helper()
	b, err := binary.Append(nil, binary.LittleEndian, v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// torchFigure is the number torch_reference.py printed on its line "name
// NUMBER" in out; the test fails when there is none.
func torchFigure(t testing.TB, out []byte, name string) float64 {
	t.Helper()
	mm := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` ([0-9.eE+-]+)$`).FindSubmatch(out)
	if mm == nil {
		t.Fatalf("torch_reference.py printed no %s line:\n%s", name, out)
	}
	v, err := strconv.ParseFloat(string(mm[1]), 64)
	if err != nil {
		t.Fatalf("torch_reference.py: %s %q: %v", name, mm[1], err)
	}
	return v
}

// The export round trip: a model exported by `crowdtrain export`, rebuilt
// in plain PyTorch by scripts/torch_reference.py from the spec in its
// metadata, scores the same batch with the same mean loss as crowdtrain,
// within 1e-4.
func TestExportScoresTheSameInPyTorch(t *testing.T) {
	py := torchPython(t)
	dir := t.TempDir()
	// The layer forms the presets lack: a tied output layer, dropout
	// (identity when scoring), layernorm's eps, a strided and padded conv
	// and an overlapping pool before a dense layer that flattens.
	tied := nn.ModelSpec{Input: []int{16}, Layers: []nn.LayerSpec{
		{Type: nn.TypeEmbedding, Vocab: 64, Units: 24, Positions: 16},
		{Type: nn.TypeDropout, Rate: 0.1},
		{Type: nn.TypeResidual, Layers: []nn.LayerSpec{{Type: nn.TypeLayerNorm, Eps: 1e-3}, {Type: nn.TypeAttention, Heads: 3, Causal: true}}},
		{Type: nn.TypeResidual, Layers: []nn.LayerSpec{{Type: nn.TypeLayerNorm}, {Type: nn.TypeDense, Units: 40}, {Type: nn.TypeGELU}, {Type: nn.TypeDropout, Rate: 0.2}, {Type: nn.TypeDense, Units: 24}}},
		{Type: nn.TypeLayerNorm},
		{Type: nn.TypeDense, Tied: true},
	}}
	strided := nn.ModelSpec{Input: []int{3, 9, 9}, Layers: []nn.LayerSpec{
		{Type: nn.TypeConv2D, Filters: 4, Kernel: 3, Stride: 2, Padding: 1}, {Type: nn.TypeReLU},
		{Type: nn.TypeMaxPool2D, Kernel: 2, Stride: 1}, {Type: nn.TypeDense, Units: 5}}}
	specs := map[string]nn.ModelSpec{"tied-dropout": tied, "strided-conv": strided}
	for _, name := range []string{"mnist-mlp", "mnist-cnn", "charlm-tiny", "charlm", "tied-dropout", "strided-conv"} {
		t.Run(name, func(t *testing.T) {
			ms, ok := specs[name]
			var err error
			if !ok {
				ms, err = nn.Preset(name)
			}
			if err != nil {
				t.Fatal(err)
			}
			m, err := nn.NewModel(ms)
			if err != nil {
				t.Fatal(err)
			}
			params := randomParams(m, 0.05)
			if name == "charlm" && testing.Short() {
				t.Skip("charlm's batch takes a few seconds in each language; skipped with -short")
			}
			file := exportModel(t, dir, name, ms, params)
			const n = 16
			rng := rand.New(rand.NewPCG(5, 6))
			x := make([]float32, n*m.InputSize)
			seq := len(ms.Input) == 1
			for i := range x {
				if seq {
					x[i] = float32(rng.IntN(m.NumClasses))
				} else {
					x[i] = rng.Float32()
				}
			}
			labels := n
			if seq {
				labels = n * m.InputSize
			}
			y := make([]int32, labels)
			for i := range y {
				y[i] = int32(rng.IntN(m.NumClasses))
			}
			lossSum, _ := m.Evaluate(m.NewWorkspace(n), params, x, y)
			goLoss := lossSum / float64(len(y))

			xf, yf := filepath.Join(dir, name+"-x.npy"), filepath.Join(dir, name+"-y.npy")
			writeNPY(t, xf, "<f4", append([]int{n}, ms.Input...), littleEndian(t, x))
			yshape := []int{n}
			if seq {
				yshape = []int{n, m.InputSize}
			}
			writeNPY(t, yf, "<i4", yshape, littleEndian(t, y))
			out, err := exec.Command(py, torchReference, "score", "--model", file, "--x", xf, "--y", yf).CombinedOutput()
			if err != nil {
				t.Fatalf("torch_reference.py score: %v\n%s", err, out)
			}
			torchLoss := torchFigure(t, out, "loss")
			t.Logf("%s: crowdtrain loss %.7f, PyTorch %.7f", name, goLoss, torchLoss)
			if math.Abs(goLoss-torchLoss) > 1e-4 || math.IsNaN(torchLoss) {
				t.Fatalf("%s: crowdtrain's mean loss %.7f, PyTorch's %.7f: more than 1e-4 apart", name, goLoss, torchLoss)
			}
		})
	}
}

// A GPT with its output tied to the token embedding, exported and rebuilt
// in PyTorch (the output layer reads the embedding's weight, one
// parameter), and the gpt-mini and gpt-small presets: on the same batch,
// crowdtrain's loss and every tensor's gradient, a shared token table's
// included, are PyTorch's float64 ones within float32 rounding.
func TestExportTiedTransformerGradientsMatchPyTorch(t *testing.T) {
	testenv.Long(t, "runs PyTorch")
	py := torchPython(t)
	gptMini, _ := nn.Preset("gpt-mini")
	gptSmall, _ := nn.Preset("gpt-small")
	for _, tc := range []struct {
		name string
		ms   nn.ModelSpec
		n    int
	}{
		{"gpt-tied", nn.Transformer(nn.TransformerConfig{Context: 16, Width: 24, Blocks: 2, Heads: 3, Vocab: 64, Tied: true}), 8},
		{"gpt-mini", gptMini, 4},
		{"gpt-small", gptSmall, 1}, // 12.3M parameters: PyTorch's float64 pass is the slow side
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkGradientsMatchPyTorch(t, py, tc.name, tc.ms, tc.n)
		})
	}
}

func checkGradientsMatchPyTorch(t *testing.T, py, name string, ms nn.ModelSpec, n int) {
	dir := t.TempDir()
	m, err := nn.NewModel(ms)
	if err != nil {
		t.Fatal(err)
	}
	params := randomParams(m, 0.05)
	file := exportModel(t, dir, name, ms, params)
	vocab := m.NumClasses
	rng := rand.New(rand.NewPCG(7, 8))
	x := make([]float32, n*m.InputSize)
	y := make([]int32, n*m.LabelsPerExample)
	for i := range x {
		x[i] = float32(rng.IntN(vocab))
	}
	for i := range y {
		y[i] = int32(rng.IntN(vocab))
	}
	grad := make([]float32, m.NumParams)
	lossSum, _ := m.Gradient(m.NewWorkspace(n), params, x, y, grad)
	goLoss := lossSum / float64(len(y))

	xf, yf, gf := filepath.Join(dir, "x.npy"), filepath.Join(dir, "y.npy"), filepath.Join(dir, "grad.npy")
	writeNPY(t, xf, "<f4", []int{n, m.InputSize}, littleEndian(t, x))
	writeNPY(t, yf, "<i4", []int{n, m.InputSize}, littleEndian(t, y))
	out, err := exec.Command(py, torchReference, "score", "--model", file, "--x", xf, "--y", yf, "--grad", gf).CombinedOutput()
	if err != nil {
		t.Fatalf("torch_reference.py score --grad: %v\n%s", err, out)
	}
	if torchLoss := torchFigure(t, out, "loss"); math.Abs(goLoss-torchLoss) > 1e-5 || math.IsNaN(torchLoss) {
		t.Errorf("mean loss: crowdtrain %.7f, PyTorch %.7f", goLoss, torchLoss)
	}
	f, err := os.Open(gf)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a, err := dataset.ReadNPY(f, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	if a.Dtype() != "float64" || len(a.Data) != 8*m.NumParams {
		t.Fatalf("PyTorch's gradient: %s of %d bytes, want %d float64s (one per parameter: a tied weight once)", a.Dtype(), len(a.Data), m.NumParams)
	}
	layout := slices.SortedFunc(slices.Values(m.Layout), func(a, b nn.ParamTensor) int { return strings.Compare(a.Name, b.Name) })
	off, worst := 0, 0.0
	for _, pt := range layout {
		var diff, norm float64
		for i := range pt.Size {
			want := math.Float64frombits(binary.LittleEndian.Uint64(a.Data[8*(off+i):]))
			d := float64(grad[pt.Offset+i]) - want
			diff += d * d
			norm += want * want
		}
		off += pt.Size
		rel := math.Sqrt(diff / norm)
		if !(rel <= 1e-4) {
			t.Errorf("%s: gradient %.3g relative from PyTorch's (norm %.3g)", pt.Name, rel, math.Sqrt(norm))
		}
		worst = max(worst, rel)
	}
	t.Logf("%s, %d examples: loss %.7f; the %d tensors' gradients at most %.2g relative from PyTorch's", name, n, goLoss, len(layout), worst)
}

// The character model sampled in PyTorch at temperature 0 writes what
// crowdtrain's Generate writes from the same export and prompt.
func TestExportSamplesTheSameInPyTorch(t *testing.T) {
	py := torchPython(t)
	ms, m := presetModel(t, "charlm-tiny")
	params := randomParams(m, 0.2) // logits far enough apart that float32 and float64 agree on the argmax
	file := exportModel(t, t.TempDir(), "charlm-tiny", ms, params)
	const prompt, n = "In the beginning God created", 40
	toks := make([]int32, len(prompt))
	for i := range prompt {
		toks[i] = int32(prompt[i])
	}
	gen, err := m.Generate(m.NewWorkspace(1), params, toks, n, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, n)
	for i, v := range gen {
		want[i] = byte(v)
	}
	out, err := exec.Command(py, torchReference, "sample", "--model", file, "--prompt", prompt, "--tokens", strconv.Itoa(n), "--temperature", "0").Output()
	if err != nil {
		t.Fatalf("torch_reference.py sample: %v", err)
	}
	if got := strings.TrimSuffix(string(out), "\n"); got != string(want) {
		t.Fatalf("PyTorch continued %q with %q; crowdtrain with %q", prompt, got, want)
	}
}

// torch_reference.py train: the exported initial model, trained in
// PyTorch with the job's optimizer (AdamW with clip_norm here) on a text,
// learns it: the validation loss falls far under ln 256, where it starts.
func TestTorchReferenceTrainsTheExportedModel(t *testing.T) {
	testenv.Long(t, "trains a model in PyTorch for a few seconds")
	py := torchPython(t)
	dir := t.TempDir()
	ms, m := presetModel(t, "charlm-tiny")
	params := make([]float32, m.NumParams)
	m.Init(params, 1)
	file := exportSpec(t, dir, jobspec.Spec{Name: "charlm-tiny", Model: ms, BatchSize: 32,
		OuterOptimizer: nn.OptimizerSpec{Type: nn.OptAdamW, LR: 3e-3, WeightDecay: 0.01, ClipNorm: 1}}, params)
	text := filepath.Join(dir, "text.txt")
	os.WriteFile(text, []byte(strings.Repeat("In the beginning God created the heaven and the earth. ", 400)), 0o644)
	out, err := exec.Command(py, torchReference, "train", "--model", file, "--data", text, "--tokens", "150000").CombinedOutput()
	if err != nil {
		t.Fatalf("torch_reference.py train: %v\n%s", err, out)
	}
	loss := torchFigure(t, out, "val_loss")
	t.Logf("%s", out)
	if !(loss < 1.5) {
		t.Fatalf("validation loss %v after 150k tokens of a repeated sentence, want < 1.5 (ln 256 = 5.55)", loss)
	}
}
