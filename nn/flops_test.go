package nn

import "testing"

// A dense model's FLOPs by hand: 784·128 + 128·10 multiply-adds forward,
// two operations each, three passes' worth for training.
func TestFLOPsPerExampleDense(t *testing.T) {
	m, err := NewModel(ModelSpec{Input: []int{1, 28, 28}, Layers: []LayerSpec{
		{Type: TypeFlatten}, {Type: TypeDense, Units: 128}, {Type: TypeReLU}, {Type: TypeDense, Units: 10},
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := 6.0 * (784*128 + 128*10) // 609,792
	if got := m.FLOPsPerExample(); got != want {
		t.Fatalf("FLOPsPerExample = %v, want %v", got, want)
	}
}

// A conv2d counts its kernel at every output position; a residual block
// counts its body; attention counts its t² terms.
func TestFLOPsPerExampleConvAttention(t *testing.T) {
	conv, err := NewModel(ModelSpec{Input: []int{1, 8, 8}, Layers: []LayerSpec{
		{Type: TypeConv2D, Filters: 4, Kernel: 3, Padding: 1}, {Type: TypeFlatten}, {Type: TypeDense, Units: 2},
	}})
	if err != nil {
		t.Fatal(err)
	}
	// 4 filters of 1·3·3 at 8·8 positions, then 256 → 2.
	if got, want := conv.FLOPsPerExample(), 6.0*(4*9*64+256*2); got != want {
		t.Errorf("conv: FLOPsPerExample = %v, want %v", got, want)
	}
	attn, err := NewModel(ModelSpec{Input: []int{16}, Layers: []LayerSpec{
		{Type: TypeEmbedding, Units: 8, Vocab: 5},
		{Type: TypeResidual, Layers: []LayerSpec{{Type: TypeLayerNorm}, {Type: TypeAttention, Heads: 2, Causal: true}}},
		{Type: TypeDense, Units: 5},
	}})
	if err != nil {
		t.Fatal(err)
	}
	// t=16, d=8: projections 16·8·24 + 16·8·8, scores and mix 2·16·16·8,
	// then the per-position head 16·8·5. The embedding is a lookup.
	want := 6.0 * (16*8*24 + 16*8*8 + 2*16*16*8 + 16*8*5)
	if got := attn.FLOPsPerExample(); got != want {
		t.Errorf("attention: FLOPsPerExample = %v, want %v", got, want)
	}
}
