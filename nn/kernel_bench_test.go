package nn

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkGemm times every kernel on the mnist-mlp shapes of one training
// step at batch 64 (forward A·Bᵀ, the weight gradient Aᵀ·B and the input
// gradient A·B) and reports GFLOP/s.
func BenchmarkGemm(b *testing.B) {
	old := KernelName()
	defer UseKernel(old)
	cases := []struct {
		name    string
		tA, tB  bool
		m, n, k int
	}{
		{"fwd-64x256x784", false, true, 64, 256, 784},
		{"dW-256x784x64", true, false, 256, 784, 64},
		{"dIn-64x256x128", false, false, 64, 256, 128},
		// charlm at batch 32: 4096 positions through the MLP's first dense
		// layer (128 -> 512), forward and weight gradient.
		{"lm-fwd-4096x512x128", false, true, 4096, 512, 128},
		{"lm-dW-512x128x4096", true, false, 512, 128, 4096},
		// gpt-small at batch 16: 4096 positions through its MLP (384 ->
		// 1536), forward, input gradient and weight gradient.
		{"gpt-fwd-4096x1536x384", false, true, 4096, 1536, 384},
		{"gpt-dIn-4096x384x1536", false, false, 4096, 384, 1536},
		{"gpt-dW-1536x384x4096", true, false, 1536, 384, 4096},
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, name := range Kernels() {
		for _, c := range cases {
			b.Run(fmt.Sprintf("%s/%s", name, c.name), func(b *testing.B) {
				if err := UseKernel(name); err != nil {
					b.Fatal(err)
				}
				x, y, z := randSlice(r, c.m*c.k), randSlice(r, c.k*c.n), make([]float32, c.m*c.n)
				lda, ldb := c.k, c.n
				if c.tA {
					lda = c.m
				}
				if c.tB {
					ldb = c.k
				}
				s := newGemmScratch()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					gemm(s, c.tA, c.tB, c.m, c.n, c.k, 1, x, lda, y, ldb, 0, z, c.n)
				}
				b.ReportMetric(2*float64(c.m*c.n*c.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}
