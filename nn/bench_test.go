package nn

import (
	"math/rand/v2"
	"testing"
)

func benchModel(b *testing.B, preset string) *Model {
	b.Helper()
	spec, err := Preset(preset)
	if err != nil {
		b.Fatal(err)
	}
	m, err := NewModel(spec)
	if err != nil {
		b.Fatal(err)
	}
	return m
}

func randomData(r *rand.Rand, m *Model, n int) ([]float32, []int32) {
	x := make([]float32, n*m.InputSize)
	vocab := 0
	if e, ok := m.top.layers[0].(*embeddingLayer); ok {
		vocab = e.vocab
	}
	for i := range x {
		if vocab > 0 {
			x[i] = float32(r.IntN(vocab))
		} else {
			x[i] = r.Float32()
		}
	}
	labels := make([]int32, n*m.LabelsPerExample)
	for i := range labels {
		labels[i] = int32(r.IntN(m.NumClasses))
	}
	return x, labels
}

// BenchmarkTrainStep measures one Gradient + SGDStep on a batch of random
// examples, the work a worker does per local step: 64 images for the MNIST
// models, 32 sequences of 128 bytes for charlm (its job's batch).
func BenchmarkTrainStep(b *testing.B) {
	for _, name := range []string{"mnist-mlp", "mnist-cnn", "charlm"} {
		batch := 64
		if name == "charlm" {
			batch = 32
		}
		b.Run(name, func(b *testing.B) {
			m := benchModel(b, name)
			r := rand.New(rand.NewPCG(1, 2))
			params := make([]float32, m.NumParams)
			grad := make([]float32, m.NumParams)
			m.Init(params, 1)
			x, labels := randomData(r, m, batch)
			ws := m.NewWorkspace(batch)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				m.Gradient(ws, params, x, labels, grad)
				SGDStep(params, grad, 0.01)
			}
			b.ReportMetric(float64(batch*b.N)/b.Elapsed().Seconds(), "examples/s")
		})
	}
}

// BenchmarkEvaluate measures the forward pass of mnist-mlp over 1000 examples.
func BenchmarkEvaluate(b *testing.B) {
	const total = 1000
	m := benchModel(b, "mnist-mlp")
	r := rand.New(rand.NewPCG(3, 4))
	params := make([]float32, m.NumParams)
	m.Init(params, 1)
	x, labels := randomData(r, m, total)
	ws := m.NewWorkspace(250)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m.Evaluate(ws, params, x, labels)
	}
	b.ReportMetric(float64(total*b.N)/b.Elapsed().Seconds(), "examples/s")
}
