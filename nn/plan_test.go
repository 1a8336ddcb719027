package nn

import (
	"reflect"
	"testing"
)

func TestPlanDescribesTheResolvedLayers(t *testing.T) {
	spec, _ := Preset("mnist-cnn")
	spec.Layers[3].Stride = 2 // a non-default stride must show up
	m, err := NewModel(spec)
	if err != nil {
		t.Fatal(err)
	}
	p := m.Plan()
	if len(p) != len(spec.Layers) {
		t.Fatalf("%d layers planned, want %d", len(p), len(spec.Layers))
	}
	conv1 := LayerPlan{Type: TypeConv2D, In: [3]int{1, 28, 28}, Out: [3]int{8, 28, 28}, InSize: 784, OutSize: 8 * 784,
		InShape: []int{1, 28, 28}, OutShape: []int{8, 28, 28}, InKind: "image", OutKind: "image",
		WeightOffset: 0, WeightSize: 200, BiasOffset: 200, BiasSize: 8, Kernel: 5, Stride: 1, Padding: 2,
		Tensors: m.Layout[:2]}
	if !reflect.DeepEqual(p[0], conv1) {
		t.Errorf("conv1 plan %+v, want %+v", p[0], conv1)
	}
	pool1 := LayerPlan{Type: TypeMaxPool2D, Index: 2, In: [3]int{8, 28, 28}, Out: [3]int{8, 14, 14}, InSize: 8 * 784, OutSize: 8 * 196, Kernel: 2, Stride: 2,
		InShape: []int{8, 28, 28}, OutShape: []int{8, 14, 14}, InKind: "image", OutKind: "image"}
	if !reflect.DeepEqual(p[2], pool1) {
		t.Errorf("pool1 plan %+v, want %+v", p[2], pool1)
	}
	// (14-5)/2+1 = 5 with stride 2.
	if p[3].Out != [3]int{16, 5, 5} || p[3].Stride != 2 {
		t.Errorf("conv2 plan %+v, want out [16 5 5] stride 2", p[3])
	}
	if p[6].Type != TypeFlatten || p[6].Out != [3]int{16 * 2 * 2, 1, 1} || !reflect.DeepEqual(p[6].OutShape, []int{64}) || p[6].OutKind != "flat" {
		t.Errorf("flatten plan %+v", p[6])
	}
	// Every parameter tensor of the layout appears once, at its offset.
	var tensors [][2]int
	for _, l := range p {
		if l.WeightSize > 0 {
			if len(l.Tensors) != 2 || l.Tensors[0].Offset != l.WeightOffset || l.Tensors[1].Offset != l.BiasOffset {
				t.Errorf("%s: tensors %v", l.Type, l.Tensors)
			}
			tensors = append(tensors, [2]int{l.WeightOffset, l.WeightSize}, [2]int{l.BiasOffset, l.BiasSize})
		}
	}
	if len(tensors) != len(m.Layout) {
		t.Fatalf("%d tensors in the plan, %d in the layout", len(tensors), len(m.Layout))
	}
	for i, lt := range m.Layout {
		if tensors[i] != [2]int{lt.Offset, lt.Size} {
			t.Errorf("tensor %s at %v in the plan, want offset %d size %d", lt.Name, tensors[i], lt.Offset, lt.Size)
		}
	}
	p[0].Kernel = 99
	p[0].Tensors[0].Shape[0] = 99
	if q := m.Plan()[0]; q.Kernel != 5 || q.Tensors[0].Shape[0] != 8 || m.Layout[0].Shape[0] != 8 {
		t.Error("Plan returned the model's own storage")
	}
}

// TestPlanOfTheTransformer: sequence shapes, attributes, tied weights and
// residual bodies, with every tensor of the layout in exactly one layer.
func TestPlanOfTheTransformer(t *testing.T) {
	spec := ModelSpec{Input: []int{16}, Layers: []LayerSpec{
		{Type: TypeEmbedding, Vocab: 50, Units: 8, Positions: 20},
		{Type: TypeResidual, Layers: []LayerSpec{
			{Type: TypeLayerNorm, Eps: 1e-6},
			{Type: TypeAttention, Heads: 2, Causal: true},
			{Type: TypeDropout, Rate: 0.25},
		}},
		{Type: TypeResidual, Layers: []LayerSpec{{Type: TypeDense, Units: 32}, {Type: TypeGELU}, {Type: TypeDense, Units: 8}}},
		{Type: TypeLayerNorm},
		{Type: TypeDense, Tied: true},
	}}
	m, err := NewModel(spec)
	if err != nil {
		t.Fatal(err)
	}
	if m.InputSize != 16 || m.NumClasses != 50 || m.LabelsPerExample != 16 {
		t.Fatalf("InputSize %d NumClasses %d LabelsPerExample %d, want 16 50 16", m.InputSize, m.NumClasses, m.LabelsPerExample)
	}
	p := m.Plan()
	emb := p[0]
	if emb.InKind != "tokens" || emb.In != [3]int{16, 1, 1} || emb.OutKind != "sequence" || emb.Out != [3]int{16, 8, 1} ||
		!reflect.DeepEqual(emb.OutShape, []int{16, 8}) || emb.Vocab != 50 || emb.Positions != 20 || emb.Units != 8 ||
		emb.WeightSize != 400 || emb.PositionOffset != 400 || emb.PositionSize != 160 {
		t.Errorf("embedding plan %+v", emb)
	}
	body := p[1].Body
	if len(body) != 3 || body[0].Eps != 1e-6 || body[1].Heads != 2 || !body[1].Causal || body[2].Rate != 0.25 {
		t.Fatalf("residual body %+v", body)
	}
	if body[1].WeightSize != 3*8*8 || body[1].BiasSize != 24 || body[1].OutWeightSize != 64 || body[1].OutBiasSize != 8 {
		t.Errorf("attention plan %+v", body[1])
	}
	// Depth-first indices: 0 embedding, 1 residual, 2-4 its body, 5 the
	// next residual, 6-8 its body, 9 layernorm, 10 dense.
	if p[1].Index != 1 || body[2].Index != 4 || p[2].Index != 5 || p[2].Body[2].Index != 8 || p[4].Index != 10 {
		t.Errorf("indices: %d %d %d %d %d", p[1].Index, body[2].Index, p[2].Index, p[2].Body[2].Index, p[4].Index)
	}
	tied := p[4]
	if !tied.Tied || tied.Units != 50 || tied.WeightOffset != emb.WeightOffset || tied.WeightSize != emb.WeightSize || len(tied.Tensors) != 1 {
		t.Errorf("tied dense plan %+v", tied)
	}
	var names []string
	var walk func([]LayerPlan)
	walk = func(ls []LayerPlan) {
		for _, l := range ls {
			for _, pt := range l.Tensors {
				names = append(names, pt.Name)
			}
			walk(l.Body)
		}
	}
	walk(p)
	var want []string
	for _, pt := range m.Layout {
		want = append(want, pt.Name)
	}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("tensors in the plan %v\nlayout %v", names, want)
	}
	if want[2] != "1.residual.0.layernorm.weight" || want[4] != "1.residual.1.attention.in_proj_weight" || want[7] != "1.residual.1.attention.out_proj.bias" {
		t.Errorf("tensor names %v", want)
	}
}
