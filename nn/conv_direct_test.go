package nn

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// The direct convolution against the im2col path on the same kernel, over
// shapes that reach its edges: one and several input channels (the input
// gradient needs whole groups of 8 of them, else it pads), 8 and 16
// filters, padding 0 to K-1, odd tap counts, non-square inputs, planes
// wider than one 32-wide tile, and a batch smaller than the workspace.
// Every layer's input gradient is checked too (down to the model's input).
func TestDirectConvMatchesIm2col(t *testing.T) {
	if findKernel(KernelAVX512) == nil || !findKernel(KernelAVX512).directConv {
		t.Skip("no avx512 kernel here: the direct convolution is not used")
	}
	old := KernelName()
	defer UseKernel(old)
	if err := UseKernel(KernelAVX512); err != nil {
		t.Fatal(err)
	}
	defer func() { dconvOff = false }()
	type conv struct{ c, h, w, f, k, pad int }
	cases := []conv{
		{1, 28, 28, 8, 5, 2},  // mnist-cnn's first layer
		{8, 14, 14, 16, 5, 0}, // and its second
		{1, 28, 28, 16, 5, 2}, // fashion-cnn's first
		{3, 9, 13, 8, 3, 1},
		{8, 7, 40, 8, 3, 2},
		{5, 11, 6, 16, 4, 0},
		{16, 6, 6, 24, 2, 1},
		{2, 35, 3, 8, 3, 2},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("c%d_%dx%d_f%d_k%d_p%d", c.c, c.h, c.w, c.f, c.k, c.pad), func(t *testing.T) {
			spec := ModelSpec{
				Input: []int{c.c, c.h, c.w},
				Layers: []LayerSpec{
					{Type: TypeConv2D, Filters: c.f, Kernel: c.k, Padding: c.pad},
					{Type: TypeReLU},
					{Type: TypeConv2D, Filters: 8, Kernel: 2},
					{Type: TypeFlatten},
					{Type: TypeDense, Units: 5},
				},
			}
			m, err := NewModel(spec)
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(*seed, 7))
			params := make([]float32, m.NumParams)
			m.Init(params, 5)
			for i := range params {
				params[i] += 0.01 * float32(r.NormFloat64()) // non-zero biases
			}
			const n = 5
			x, labels := randomData(r, m, n)
			ws := m.newWorkspace(n+2, true)
			conv := &m.top.layers[0].(*convLayer).layer
			if _, ok := dconvFits(ws.ctx.gemm, conv, ws.st.states[0].(*convState).cols, n); !ok {
				t.Fatal("the direct path does not take this layer")
			}
			dconvOff = true
			want := make([]float32, m.NumParams)
			wantLoss, _ := m.Gradient(ws, params, x, labels, want)
			wantDIn := append([]float32(nil), ws.inputGrad()[:n*m.InputSize]...)
			wantLogits := append([]float32(nil), m.Forward(ws, params, x)...)
			dconvOff = false
			got := make([]float32, m.NumParams)
			loss, _ := m.Gradient(ws, params, x, labels, got)
			if d := relDiff([]float32{float32(loss)}, []float32{float32(wantLoss)}); d > 1e-6 {
				t.Errorf("loss %v, im2col %v", loss, wantLoss)
			}
			if d := relDiff(got, want); d > 1e-5 {
				t.Errorf("gradient differs from im2col's by %g relative", d)
			}
			for _, part := range []struct {
				name string
				off  int
				len  int
			}{{"conv weight", conv.wOff, conv.wLen}, {"conv bias", conv.bOff, conv.bLen}} {
				if d := relDiff(got[part.off:part.off+part.len], want[part.off:part.off+part.len]); d > 1e-5 {
					t.Errorf("%s differs by %g relative", part.name, d)
				}
			}
			if d := relDiff(ws.inputGrad()[:n*m.InputSize], wantDIn); d > 1e-5 {
				t.Errorf("input gradient differs by %g relative", d)
			}
			if d := relDiff(m.Forward(ws, params, x), wantLogits); d > 1e-6 {
				t.Errorf("logits differ by %g relative", d)
			}
			if a := testing.AllocsPerRun(3, func() { m.Gradient(ws, params, x, labels, got) }); a != 0 {
				t.Errorf("Gradient allocates %v times per call", a)
			}
		})
	}
}
