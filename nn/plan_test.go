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
		WeightOffset: 0, WeightSize: 200, BiasOffset: 200, BiasSize: 8, Kernel: 5, Stride: 1, Padding: 2}
	if !reflect.DeepEqual(p[0], conv1) {
		t.Errorf("conv1 plan %+v, want %+v", p[0], conv1)
	}
	pool1 := LayerPlan{Type: TypeMaxPool2D, In: [3]int{8, 28, 28}, Out: [3]int{8, 14, 14}, InSize: 8 * 784, OutSize: 8 * 196, Kernel: 2, Stride: 2}
	if !reflect.DeepEqual(p[2], pool1) {
		t.Errorf("pool1 plan %+v, want %+v", p[2], pool1)
	}
	// (14-5)/2+1 = 5 with stride 2.
	if p[3].Out != [3]int{16, 5, 5} || p[3].Stride != 2 {
		t.Errorf("conv2 plan %+v, want out [16 5 5] stride 2", p[3])
	}
	if p[6].Type != TypeFlatten || p[6].Out != [3]int{16 * 2 * 2, 1, 1} {
		t.Errorf("flatten plan %+v", p[6])
	}
	// Every parameter tensor of the layout appears once, at its offset.
	var tensors [][2]int
	for _, l := range p {
		if l.WeightSize > 0 {
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
	if m.Plan()[0].Kernel != 5 {
		t.Error("Plan returned the model's own storage")
	}
}
