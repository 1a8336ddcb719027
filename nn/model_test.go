package nn

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
)

func mustModel(t testing.TB, spec ModelSpec) *Model {
	t.Helper()
	m, err := NewModel(spec)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func mustPreset(t testing.TB, name string) *Model {
	t.Helper()
	spec, err := Preset(name)
	if err != nil {
		t.Fatal(err)
	}
	return mustModel(t, spec)
}

func TestPresets(t *testing.T) {
	if got, want := PresetNames(), []string{"charlm", "charlm-tiny", "fashion-cnn", "gpt-mini", "gpt-small", "mnist-cnn", "mnist-mlp"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("PresetNames() = %v, want %v", got, want)
	}
	_, err := Preset("nope")
	if err == nil || err.Error() != `unknown model preset "nope" (presets: charlm, charlm-tiny, fashion-cnn, gpt-mini, gpt-small, mnist-cnn, mnist-mlp)` {
		t.Fatalf("Preset(nope) error = %v", err)
	}
	// Preset returns a copy: changing it must not change the next one.
	a, _ := Preset("mnist-mlp")
	a.Layers[0].Units = 1
	a.Input[0] = 9
	b, _ := Preset("mnist-mlp")
	if b.Layers[0].Units != 256 || b.Input[0] != 1 {
		t.Fatal("Preset returned shared slices")
	}

	mlp := mustPreset(t, "mnist-mlp")
	if want := 784*256 + 256 + 256*128 + 128 + 128*10 + 10; mlp.NumParams != want {
		t.Errorf("mnist-mlp NumParams = %d, want %d", mlp.NumParams, want)
	}
	if mlp.InputSize != 784 || mlp.NumClasses != 10 {
		t.Errorf("mnist-mlp InputSize %d NumClasses %d", mlp.InputSize, mlp.NumClasses)
	}
	// gpt-mini: embedding (1024 tokens + 64 positions) x 64; per block
	// attention (4 d x d + 4 d), MLP (2 of d x 4d + 4d + d) and two
	// LayerNorms (2 d each); final LayerNorm; output 64 -> 1024.
	gpt := mustPreset(t, "gpt-mini")
	d, v := 64, GPTMiniVocab
	block := 4*d*d + 4*d + 2*4*d*d + 4*d + d + 2*2*d
	if want := (v+64)*d + 2*block + 2*d + d*v + v; gpt.NumParams != want || gpt.NumParams >= 1_000_000 {
		t.Errorf("gpt-mini NumParams = %d, want %d (under 1M)", gpt.NumParams, want)
	}
	if gpt.InputSize != 64 || gpt.NumClasses != v {
		t.Errorf("gpt-mini InputSize %d NumClasses %d, want 64 and %d", gpt.InputSize, gpt.NumClasses, v)
	}
	cnn := mustPreset(t, "mnist-cnn")
	// conv 1->8 5x5, conv 8->16 5x5, dense 16*5*5->64, dense 64->10
	if want := 8*25 + 8 + 16*8*25 + 16 + 400*64 + 64 + 64*10 + 10; cnn.NumParams != want {
		t.Errorf("mnist-cnn NumParams = %d, want %d", cnn.NumParams, want)
	}
	wantLayout := []ParamTensor{
		{"0.conv2d.weight", []int{8, 1, 5, 5}, 0, 200},
		{"0.conv2d.bias", []int{8}, 200, 8},
		{"3.conv2d.weight", []int{16, 8, 5, 5}, 208, 3200},
		{"3.conv2d.bias", []int{16}, 3408, 16},
		{"7.dense.weight", []int{64, 400}, 3424, 25600},
		{"7.dense.bias", []int{64}, 29024, 64},
		{"9.dense.weight", []int{10, 64}, 29088, 640},
		{"9.dense.bias", []int{10}, 29728, 10},
	}
	if !reflect.DeepEqual(cnn.Layout, wantLayout) {
		t.Errorf("mnist-cnn layout\n got %v\nwant %v", cnn.Layout, wantLayout)
	}
}

func TestLayoutAndInit(t *testing.T) {
	for _, name := range PresetNames() {
		m := mustPreset(t, name)
		off := 0
		for _, pt := range m.Layout {
			if pt.Offset != off {
				t.Errorf("%s %s: offset %d, want %d (contiguous)", name, pt.Name, pt.Offset, off)
			}
			n := 1
			for _, d := range pt.Shape {
				n *= d
			}
			if n != pt.Size {
				t.Errorf("%s %s: size %d, shape %v", name, pt.Name, pt.Size, pt.Shape)
			}
			off += pt.Size
		}
		if off != m.NumParams {
			t.Errorf("%s: sizes sum to %d, NumParams %d", name, off, m.NumParams)
		}

		a := make([]float32, m.NumParams)
		b := make([]float32, m.NumParams)
		c := make([]float32, m.NumParams)
		for i := range a {
			a[i], b[i] = 123, -7 // Init must overwrite everything
		}
		m.Init(a, 42)
		m.Init(b, 42)
		m.Init(c, 43)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: same seed gave different vectors", name)
		}
		if reflect.DeepEqual(a, c) {
			t.Errorf("%s: different seeds gave the same vector", name)
		}
		spec, _ := Preset(name)
		sequence := spec.Layers[0].Type == TypeEmbedding // a transformer
		tied := spec.Layers[len(spec.Layers)-1].Tied
		for _, pt := range m.Layout {
			v := a[pt.Offset : pt.Offset+pt.Size]
			limit := 0.0 // He-uniform unless named otherwise
			switch {
			case strings.HasSuffix(pt.Name, "layernorm.weight"):
				for _, x := range v {
					if x != 1 {
						t.Fatalf("%s %s: layernorm gain %v, want 1", name, pt.Name, x)
					}
				}
				continue
			case strings.HasSuffix(pt.Name, ".embedding.weight") && tied:
				limit = math.Sqrt(3) * 0.02 // GPT-2's, for an output layer too
			case strings.Contains(pt.Name, ".embedding."):
				limit = math.Sqrt(3) // standard deviation 1, nn.Embedding's
			case strings.HasSuffix(pt.Name, "in_proj_weight"):
				limit = math.Sqrt(6 / float64(pt.Shape[0]+pt.Shape[1])) // Xavier-uniform
			case sequence && strings.HasSuffix(pt.Name, "weight") && !strings.HasSuffix(pt.Name, "layernorm.weight"):
				limit = 1 / math.Sqrt(float64(pt.Size/pt.Shape[0])) // nn.Linear's
			}
			if limit > 0 {
				var ss float64
				for _, x := range v {
					if math.Abs(float64(x)) > limit {
						t.Fatalf("%s %s: %v outside ±%v", name, pt.Name, x, limit)
					}
					ss += float64(x) * float64(x)
				}
				if vr, want := ss/float64(len(v)), limit*limit/3; vr < 0.7*want || vr > 1.3*want {
					t.Errorf("%s %s: variance %v, want about %v", name, pt.Name, vr, want)
				}
				continue
			}
			if strings.HasSuffix(pt.Name, "bias") {
				for _, x := range v {
					if x != 0 {
						t.Fatalf("%s %s: non-zero bias %v", name, pt.Name, x)
					}
				}
				continue
			}
			// He-uniform: |w| <= sqrt(6/fanIn), variance about 2/fanIn.
			fanIn := pt.Size / pt.Shape[0]
			limit = math.Sqrt(6 / float64(fanIn))
			var ss float64
			for _, x := range v {
				if float64(x) > limit || float64(x) < -limit {
					t.Fatalf("%s %s: weight %v outside ±%v", name, pt.Name, x, limit)
				}
				ss += float64(x) * float64(x)
			}
			if vr, want := ss/float64(len(v)), 2/float64(fanIn); vr < 0.7*want || vr > 1.3*want {
				t.Errorf("%s %s: weight variance %v, want about %v", name, pt.Name, vr, want)
			}
		}
	}
	// Pin the generator: the same seed must give this vector on every
	// platform and Go version, or workers would start from different models.
	m := mustModel(t, ModelSpec{Input: []int{1, 1, 2}, Layers: []LayerSpec{{Type: "dense", Units: 2}}})
	p := make([]float32, m.NumParams)
	m.Init(p, 1)
	if want := pinnedInit; !reflect.DeepEqual(p, want) {
		t.Errorf("Init(seed 1) = %v, want %v", p, want)
	}
}

// pinnedInit is Init(seed 1) of a 2->2 dense layer, recorded once.
var pinnedInit = []float32{1.5272461, 1.3652306, 1.0764585, -0.83711135, 0, 0}

func TestSpecJSON(t *testing.T) {
	spec, _ := Preset("mnist-cnn")
	buf, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	var back ModelSpec
	if err := json.Unmarshal(buf, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(spec, back) {
		t.Errorf("JSON round trip changed the spec: %s", buf)
	}
	if !strings.Contains(string(buf), `{"type":"relu"}`) {
		t.Errorf("zero fields should be omitted: %s", buf)
	}
}

func TestNewModelErrors(t *testing.T) {
	in := []int{1, 28, 28}
	d10 := LayerSpec{Type: "dense", Units: 10}
	cases := []struct {
		spec ModelSpec
		want string
	}{
		{ModelSpec{Input: []int{28, 28}, Layers: []LayerSpec{d10}}, "input: want [channels, height, width] or [t]"},
		{ModelSpec{Input: []int{784}, Layers: []LayerSpec{d10}}, "layer 0 (dense): gets token ids [784] (token ids), which are indices, not values; put an embedding layer first"},
		{ModelSpec{Input: []int{1, 0, 28}, Layers: []LayerSpec{d10}}, "input: dimension 1 is 0"},
		{ModelSpec{Input: in}, "layers: empty"},
		{ModelSpec{Input: in, Layers: []LayerSpec{{Type: "Dense", Units: 10}}}, `layer 0 (Dense): unknown layer type "Dense" (want attention, conv2d, dense, dropout, embedding, flatten, gelu, layernorm, maxpool2d, relu or residual)`},
		{ModelSpec{Input: in, Layers: []LayerSpec{{Type: "relu"}, {Type: "dense"}}}, "layer 1 (dense): units must be >= 1, got 0"},
		{ModelSpec{Input: in, Layers: []LayerSpec{{Type: "dense", Units: -3}}}, "layer 0 (dense): units must not be negative, got -3"},
		{ModelSpec{Input: in, Layers: []LayerSpec{{Type: "dense", Units: 10, Kernel: 3}}}, "layer 0 (dense): kernel is not used by dense layers"},
		{ModelSpec{Input: in, Layers: []LayerSpec{{Type: "conv2d", Kernel: 3}, d10}}, "layer 0 (conv2d): filters must be >= 1, got 0"},
		{ModelSpec{Input: in, Layers: []LayerSpec{{Type: "conv2d", Filters: 4}, d10}}, "layer 0 (conv2d): kernel must be >= 1, got 0"},
		{ModelSpec{Input: in, Layers: []LayerSpec{{Type: "conv2d", Filters: 4, Kernel: 3, Padding: -1}, d10}}, "layer 0 (conv2d): padding must not be negative"},
		{ModelSpec{Input: []int{1, 12, 12}, Layers: []LayerSpec{
			{Type: "conv2d", Filters: 2, Kernel: 3}, {Type: "maxpool2d"}, {Type: "relu"},
			{Type: "conv2d", Filters: 2, Kernel: 7}, d10}}, "layer 3 (conv2d): kernel 7 larger than padded input 5x5"},
		{ModelSpec{Input: in, Layers: []LayerSpec{{Type: "flatten"}, {Type: "conv2d", Filters: 2, Kernel: 3}, d10}}, "layer 1 (conv2d): needs a [channels,height,width] input but gets a flat vector [784]"},
		{ModelSpec{Input: in, Layers: []LayerSpec{{Type: "dense", Units: 5}, {Type: "maxpool2d"}, d10}}, "layer 1 (maxpool2d): needs a [channels,height,width] input"},
		{ModelSpec{Input: []int{1, 3, 3}, Layers: []LayerSpec{{Type: "maxpool2d", Kernel: 4}, d10}}, "layer 0 (maxpool2d): window 4 larger than input 3x3"},
		{ModelSpec{Input: in, Layers: []LayerSpec{{Type: "maxpool2d", Padding: 1}, d10}}, "layer 0 (maxpool2d): padding is not used by maxpool2d layers"},
		{ModelSpec{Input: in, Layers: []LayerSpec{{Type: "conv2d", Filters: 2, Kernel: 3}}}, "layer 0 (conv2d): the model's output is [2,26,26] but must be a flat vector"},
		{ModelSpec{Input: in, Layers: []LayerSpec{{Type: "dense", Units: 1}}}, "layer 0 (dense): the model's output has 1 class score(s) but a classifier needs at least 2"},
		{ModelSpec{Input: []int{10, 1, 1}, Layers: []LayerSpec{{Type: "flatten"}}}, "layers: no layer has parameters"},
		{ModelSpec{Input: in, Layers: []LayerSpec{{Type: "dense", Units: 1 << 21}, d10}}, "layer 0 (dense): 2097152 units on an input of 784 values is too large"},
		// Sequence models.
		{ModelSpec{Input: []int{8}, Layers: []LayerSpec{{Type: "embedding", Vocab: 1 << 62, Units: 1 << 20}, d10}}, "layer 0 (embedding): too many parameters"},
		{ModelSpec{Input: []int{8}, Layers: []LayerSpec{{Type: "embedding", Vocab: 10, Units: 4, Positions: 6}, d10}}, "layer 0 (embedding): positions 6 is shorter than the input's 8 tokens"},
		{ModelSpec{Input: []int{8}, Layers: []LayerSpec{{Type: "embedding", Units: 4}, d10}}, "layer 0 (embedding): vocab must be >= 1"},
		{ModelSpec{Input: in, Layers: []LayerSpec{{Type: "embedding", Vocab: 10, Units: 4}, d10}}, "layer 0 (embedding): needs token ids (a model input [t]) but gets an image [1,28,28]"},
		{ModelSpec{Input: []int{8}, Layers: []LayerSpec{{Type: "embedding", Vocab: 10, Units: 6}, {Type: "attention", Heads: 4}, d10}}, "layer 1 (attention): heads 4 does not divide the width 6"},
		{ModelSpec{Input: []int{8}, Layers: []LayerSpec{{Type: "embedding", Vocab: 10, Units: 6}, {Type: "attention"}, d10}}, "layer 1 (attention): heads must be >= 1"},
		{ModelSpec{Input: in, Layers: []LayerSpec{{Type: "attention", Heads: 1}, d10}}, "layer 0 (attention): needs a sequence [t,d] but gets an image [1,28,28]"},
		{ModelSpec{Input: in, Layers: []LayerSpec{{Type: "layernorm"}, d10}}, "layer 0 (layernorm): needs a sequence [t,d] or a flat vector but gets an image"},
		{ModelSpec{Input: in, Layers: []LayerSpec{{Type: "dropout", Rate: 1}, d10}}, "layer 0 (dropout): rate must be in [0, 1), got 1"},
		{ModelSpec{Input: in, Layers: []LayerSpec{{Type: "gelu", Rate: 0.5}, d10}}, "layer 0 (gelu): rate is not used by gelu layers"},
		{ModelSpec{Input: in, Layers: []LayerSpec{{Type: "residual"}, d10}}, "layer 0 (residual): layers: empty"},
		{ModelSpec{Input: in, Layers: []LayerSpec{{Type: "residual", Layers: []LayerSpec{{Type: "dense", Units: 3}}}, d10}}, "layer 0 (residual): the body turns [1,28,28] into [3], but a residual block's body must keep the shape"},
		{ModelSpec{Input: in, Layers: []LayerSpec{{Type: "residual", Layers: []LayerSpec{{Type: "relu"}, {Type: "conv2d", Filters: 1}}}, d10}}, "layer 0 (residual): layer 1 (conv2d): kernel must be >= 1"},
		{ModelSpec{Input: []int{8}, Layers: []LayerSpec{{Type: "embedding", Vocab: 10, Units: 6}, {Type: "dense", Tied: true, Units: 7}}}, "layer 1 (dense): tied: units is the embedding's vocab (10), got 7"},
		{ModelSpec{Input: in, Layers: []LayerSpec{{Type: "dense", Tied: true}}}, "layer 0 (dense): tied: true needs a sequence input"},
		{ModelSpec{Input: []int{8}, Layers: []LayerSpec{{Type: "embedding", Vocab: 10, Units: 6}, {Type: "dense", Units: 1}}}, "the model's output has 1 class score(s)"},
		{ModelSpec{Input: []int{8}, Layers: []LayerSpec{{Type: "embedding", Vocab: 10, Units: 6}, {Type: "layernorm", Eps: 2}}}, "layer 1 (layernorm): eps must be a small positive number"},
	}
	for _, c := range cases {
		_, err := NewModel(c.spec)
		if err == nil {
			t.Errorf("%+v: no error, want %q", c.spec, c.want)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v:\n got %q\nwant it to contain %q", c.spec, err, c.want)
		}
	}
	// Valid edge cases: flatten of a flat vector, dense straight on a
	// spatial input, a kernel exactly as large as the padded input.
	ok := []ModelSpec{
		{Input: in, Layers: []LayerSpec{{Type: "dense", Units: 4}, {Type: "flatten"}, {Type: "relu"}, d10}},
		{Input: []int{3, 4, 4}, Layers: []LayerSpec{{Type: "conv2d", Filters: 2, Kernel: 6, Padding: 1}, {Type: "flatten"}}},
	}
	for _, s := range ok {
		if _, err := NewModel(s); err != nil {
			t.Errorf("%+v: %v", s, err)
		}
	}
}

func TestCheckLabels(t *testing.T) {
	m := mustPreset(t, "mnist-mlp")
	if err := m.CheckLabels([]int32{0, 9, 3}); err != nil {
		t.Error(err)
	}
	if err := m.CheckLabels([]int32{0, 10}); err == nil || !strings.Contains(err.Error(), "label 10 of example 1 is outside [0, 10)") {
		t.Errorf("CheckLabels: %v", err)
	}
}
