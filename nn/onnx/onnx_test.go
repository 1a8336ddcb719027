package onnx

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/nn/nntest"
)

// onnxPresets are the built-in models every export must express.
var onnxPresets = []string{"mnist-mlp", "mnist-cnn", "fashion-cnn", "charlm-tiny", "charlm", "gpt-mini", "gpt-small"}

// extraSpecs are layer forms the presets lack: dropout, a layernorm's eps, a
// tied output on a short sequence, a position table longer than the input,
// attention without the causal mask, a strided and padded conv, an
// overlapping pool and a dense layer that flattens an image, gelu,
// layernorm and a residual block on a flat vector, feature vectors as
// input, an embedding without a position table.
var extraSpecs = map[string]nn.ModelSpec{
	"tied-dropout": {Input: []int{16}, Layers: []nn.LayerSpec{
		{Type: nn.TypeEmbedding, Vocab: 64, Units: 24, Positions: 20},
		{Type: nn.TypeDropout, Rate: 0.1},
		{Type: nn.TypeResidual, Layers: []nn.LayerSpec{{Type: nn.TypeLayerNorm, Eps: 1e-3}, {Type: nn.TypeAttention, Heads: 3}}},
		{Type: nn.TypeResidual, Layers: []nn.LayerSpec{{Type: nn.TypeLayerNorm}, {Type: nn.TypeDense, Units: 40}, {Type: nn.TypeGELU}, {Type: nn.TypeDropout, Rate: 0.2}, {Type: nn.TypeDense, Units: 24}}},
		{Type: nn.TypeLayerNorm},
		{Type: nn.TypeDense, Tied: true},
	}},
	"strided-conv": {Input: []int{3, 9, 9}, Layers: []nn.LayerSpec{
		{Type: nn.TypeConv2D, Filters: 4, Kernel: 3, Stride: 2, Padding: 1}, {Type: nn.TypeReLU},
		{Type: nn.TypeMaxPool2D, Kernel: 2, Stride: 1}, {Type: nn.TypeDense, Units: 12},
		{Type: nn.TypeGELU}, {Type: nn.TypeLayerNorm}, {Type: nn.TypeDense, Units: 5}}},
	"features": {Input: []int{1, 1, 7}, Layers: []nn.LayerSpec{
		{Type: nn.TypeDense, Units: 6}, {Type: nn.TypeReLU}, {Type: nn.TypeDropout, Rate: 0.5},
		{Type: nn.TypeResidual, Layers: []nn.LayerSpec{{Type: nn.TypeDense, Units: 6}, {Type: nn.TypeGELU}}},
		{Type: nn.TypeDense, Units: 3}}},
	"no-positions": {Input: []int{8}, Layers: []nn.LayerSpec{
		{Type: nn.TypeEmbedding, Vocab: 20, Units: 6},
		{Type: nn.TypeResidual, Layers: []nn.LayerSpec{{Type: nn.TypeLayerNorm}, {Type: nn.TypeAttention, Heads: 2, Causal: true}}},
		{Type: nn.TypeDense, Units: 20}}},
}

// allModels names every model the tests export: the presets, extraSpecs,
// and nntest's models of every layer kind and option (as "layers/NAME"),
// which a new layer type joins.
func allModels() []string {
	names := slices.Clone(onnxPresets)
	names = append(names, slices.Sorted(maps.Keys(extraSpecs))...)
	for _, n := range slices.Sorted(maps.Keys(nntest.LayerModels)) {
		names = append(names, "layers/"+n)
	}
	return names
}

func modelFor(t testing.TB, name string) *nn.Model {
	t.Helper()
	spec, ok := extraSpecs[name]
	if layers, found := strings.CutPrefix(name, "layers/"); found {
		spec, ok = nntest.LayerModels[layers]
	}
	if !ok {
		var err error
		if spec, err = nn.Preset(name); err != nil {
			t.Fatal(err)
		}
	}
	m, err := nn.NewModel(spec)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// randomParams initialises m as training would and moves every parameter
// (biases and layer norm gains included) by up to ±0.05, so that a tensor
// wired to the wrong input, or transposed, shows in the logits.
func randomParams(m *nn.Model) []float32 {
	p := make([]float32, m.NumParams)
	m.Init(p, 3)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range p {
		p[i] += 0.05 * (2*rng.Float32() - 1)
	}
	return p
}

// randomBatch is n examples: token ids in [0, vocab) for a model on tokens,
// values in [0, 1) for one on images.
func randomBatch(m *nn.Model, n int) []float32 {
	rng := rand.New(rand.NewPCG(5, 6))
	x := make([]float32, n*m.InputSize)
	for i := range x {
		if v := m.InputVocab(); v > 0 {
			x[i] = float32(rng.IntN(v))
		} else {
			x[i] = rng.Float32()
		}
	}
	return x
}

// logitsTolerance is how far ONNX Runtime's logits may be from nn's: 1e-5,
// relative to the logit where its magnitude is above 1. The two add the
// same products in different orders (and ONNX Runtime fuses operators), so
// they differ by float32 rounding, which scales with the values.
func logitsTolerance(want float32) float64 {
	return 1e-5 * max(1, math.Abs(float64(want)))
}

// The exported model, run by ONNX Runtime on a batch, gives nn's logits for
// each preset and for the layer forms the presets lack.
func TestExportedModelsMatchONNXRuntime(t *testing.T) {
	testenv.Long(t, "runs ONNX Runtime under Node.js on every preset, gpt-small's 12M parameters included")
	testenv.NeedONNXRuntime(t) // skip once, not in every subtest
	for _, name := range allModels() {
		t.Run(name, func(t *testing.T) {
			m := modelFor(t, name)
			params := randomParams(m)
			const n = 3
			x := randomBatch(m, n)
			want := slices.Clone(m.Forward(m.NewWorkspace(n), params, x))

			dir := t.TempDir()
			file := filepath.Join(dir, "model.onnx")
			var buf bytes.Buffer
			if err := Write(&buf, m, params, map[string]string{"crowdtrain.name": name}); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			input := ImageInput
			if m.InputVocab() > 0 {
				input = TokenInput
			}
			ran := testenv.RunONNXRuntime(t, file, x, m.InputVocab() > 0, append([]int{n}, m.Spec.Input...))
			wantDims := []int{n, m.NumClasses}
			if m.LabelsPerExample > 1 {
				wantDims = []int{n, m.LabelsPerExample, m.NumClasses}
			}
			if !slices.Equal(ran.Inputs, []string{input}) || !slices.Equal(ran.Outputs, []string{Output}) || !slices.Equal(ran.Dims, wantDims) {
				t.Fatalf("ONNX Runtime ran inputs %v, outputs %v of dims %v; want [%s], [%s] of %v", ran.Inputs, ran.Outputs, ran.Dims, input, Output, wantDims)
			}
			if len(ran.Logits) != len(want) {
				t.Fatalf("ONNX Runtime wrote %d logits, want %d", len(ran.Logits), len(want))
			}
			worst, at := 0.0, 0
			for i, w := range want {
				got := ran.Logits[i]
				d := math.Abs(float64(got) - float64(w))
				if math.IsNaN(d) || d > logitsTolerance(w) {
					t.Fatalf("logit %d: ONNX Runtime %g, nn %g: %g apart, more than %g", i, got, w, d, logitsTolerance(w))
				}
				if d > worst {
					worst, at = d, i
				}
			}
			t.Logf("%s: %d logits, largest difference %.3g (nn's logit %.4g), %d-byte model", name, len(want), worst, want[at], buf.Len())
		})
	}
}

// Every preset and every layer kind's model exports; the ONNX Runtime test
// checks what they compute.
func TestEveryModelExports(t *testing.T) {
	for _, name := range allModels() {
		m := modelFor(t, name)
		if err := Write(io.Discard, m, randomParams(m), nil); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A layer type without a translation fails the export with an error that
// names it and the layer, rather than writing a model that computes
// something else.
func TestUntranslatedLayerTypeIsAnError(t *testing.T) {
	m := modelFor(t, "mnist-mlp")
	plan := m.Plan()
	plan[1].Type = "swish"
	_, err := buildGraph(m.Spec.Input, plan, m.Layout, randomParams(m))
	if err == nil || !strings.Contains(err.Error(), "layer 1 (swish)") || !strings.Contains(err.Error(), "no ONNX translation for swish layers") {
		t.Fatalf("err = %v, want one naming layer 1 and swish", err)
	}
	// Inside a residual body the error gives the layer's path.
	m = modelFor(t, "charlm-tiny")
	plan = m.Plan()
	plan[2].Body[2].Type = "swish"
	_, err = buildGraph(m.Spec.Input, plan, m.Layout, randomParams(m))
	if err == nil || !strings.Contains(err.Error(), "layer 2.2 (swish)") {
		t.Fatalf("err = %v, want one naming layer 2.2 (swish)", err)
	}
	if err := Write(new(bytes.Buffer), m, make([]float32, 3), nil); err == nil || !strings.Contains(err.Error(), "3 parameters for a model of") {
		t.Fatalf("Write with 3 parameters: err = %v", err)
	}
	// A model past protobuf's 2 GiB (nn allows 2^30 parameters, 4 GiB).
	if err := checkSize(1 << 29); err == nil || !strings.Contains(err.Error(), "2048 MiB, past the 2 GiB") {
		t.Fatalf("checkSize(2^29) = %v, want the 2 GiB limit", err)
	}
	if err := checkSize(1<<29 - 1<<18); err != nil {
		t.Fatalf("checkSize(2^29 - 2^18) = %v, want nil: it fits", err)
	}
}

// The written protobuf holds what a reader of ONNX looks for: opset 17 of
// the default domain, the graph's input and output with a named batch
// dimension, every tensor of the layout as a float32 initializer of its
// name, shape and values (a tied output layer adds none of its own), and
// the metadata.
func TestWrittenModelHoldsTheLayout(t *testing.T) {
	for _, name := range []string{"mnist-cnn", "tied-dropout"} {
		t.Run(name, func(t *testing.T) {
			m := modelFor(t, name)
			params := randomParams(m)
			var buf bytes.Buffer
			if err := Write(&buf, m, params, map[string]string{"b": "2", "a": "1"}); err != nil {
				t.Fatal(err)
			}
			doc := decode(t, buf.Bytes())
			if got := fmt.Sprint(doc.field(modelIRVersion).varint(), doc.field(modelOpsetImport).msg(t).field(opsetVersion).varint()); got != "8 17" {
				t.Fatalf("ir_version and opset = %s, want 8 17", got)
			}
			var meta []string
			for _, e := range doc.all(modelMetadataProps) {
				kv := e.msg(t)
				meta = append(meta, kv.field(entryKey).str()+"="+kv.field(entryValue).str())
			}
			if !slices.Equal(meta, []string{"a=1", "b=2"}) {
				t.Fatalf("metadata_props = %v, want [a=1 b=2]", meta)
			}
			g := doc.field(modelGraph).msg(t)
			in := describeValue(t, g.field(graphInput).msg(t))
			out := describeValue(t, g.field(graphOutput).msg(t))
			wantIn, wantOut := "input float [batch 1 28 28]", "logits float [batch 10]"
			if name == "tied-dropout" {
				wantIn, wantOut = "tokens int64 [batch 16]", "logits float [batch 16 64]"
			}
			if in != wantIn || out != wantOut {
				t.Fatalf("graph input %q, output %q; want %q, %q", in, out, wantIn, wantOut)
			}
			inits := map[string]wireMessage{}
			for _, f := range g.all(graphInitializer) {
				tm := f.msg(t)
				inits[tm.field(tensorName).str()] = tm
			}
			for _, pt := range m.Layout {
				tm, ok := inits[pt.Name]
				if !ok {
					t.Fatalf("no initializer %s", pt.Name)
				}
				var dims []int
				for _, d := range tm.all(tensorDims) {
					dims = append(dims, int(d.varint()))
				}
				if !slices.Equal(dims, pt.Shape) || tm.field(tensorDataType).varint() != uint64(elemFloat) {
					t.Fatalf("initializer %s: dims %v type %d, want %v float", pt.Name, dims, tm.field(tensorDataType).varint(), pt.Shape)
				}
				raw := tm.field(tensorRawData).bytes
				for i, want := range params[pt.Offset : pt.Offset+pt.Size] {
					if got := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])); got != want {
						t.Fatalf("initializer %s[%d] = %g, want %g", pt.Name, i, got, want)
					}
				}
				delete(inits, pt.Name)
			}
			for n := range inits {
				if !strings.HasPrefix(n, "const.") {
					t.Errorf("initializer %s is neither a layout tensor nor a constant", n)
				}
			}
		})
	}
}

func describeValue(t *testing.T, v wireMessage) string {
	tt := v.field(valueType).msg(t).field(typeTensor).msg(t)
	elem := map[uint64]string{uint64(elemFloat): "float", uint64(elemInt64): "int64"}[tt.field(tensorElemType).varint()]
	var dims []string
	for _, d := range tt.field(tensorShape).msg(t).all(shapeDim) {
		dm := d.msg(t)
		if p := dm.field(dimParam); p.num != 0 {
			dims = append(dims, p.str())
		} else {
			dims = append(dims, fmt.Sprint(dm.field(dimValue).varint()))
		}
	}
	return fmt.Sprintf("%s %s [%s]", v.field(valueName).str(), elem, strings.Join(dims, " "))
}
