package wasm

import (
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/worker"
	"github.com/crowdtrain/crowdtrain/worker/cpu"
)

func TestBenchReportsRounds(t *testing.T) {
	r, err := Bench(newCPU(t), "mnist-mlp", 8, 1, 3, 20*time.Millisecond, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Rounds) != 3 || r.Median <= 0 || r.Kernel == "" || r.Model != "mnist-mlp" || r.Batch != 8 {
		t.Fatalf("Bench = %+v", r)
	}
	for _, v := range r.Rounds {
		if v <= 0 {
			t.Fatalf("round of %v examples/s", v)
		}
	}
	if _, err := Bench(newCPU(t), "no-such-model", 8, 1, 1, time.Millisecond, nil, nil); err == nil {
		t.Error("Bench accepted an unknown model")
	}
	if _, err := Bench(newCPU(t), "mnist-mlp", 0, 1, 1, time.Millisecond, nil, nil); err == nil {
		t.Error("Bench accepted batch 0")
	}
	// A given batch: the right size is timed, a wrong one or a label
	// outside the classes is refused.
	x, labels := make([]float32, 2*784), []int32{3, 9}
	if r, err := Bench(newCPU(t), "mnist-mlp", 2, 1, 1, time.Millisecond, x, labels); err != nil || r.Median <= 0 {
		t.Errorf("Bench on a given batch = %+v, %v", r, err)
	}
	if _, err := Bench(newCPU(t), "mnist-mlp", 2, 1, 1, time.Millisecond, x[:784], labels); err == nil {
		t.Error("Bench accepted a batch of the wrong size")
	}
	if _, err := Bench(newCPU(t), "mnist-mlp", 2, 1, 1, time.Millisecond, x, []int32{3, 10}); err == nil {
		t.Error("Bench accepted label 10 of 10 classes")
	}
}

func newCPU(t *testing.T) worker.Backend {
	t.Helper()
	b, err := cpu.New(1)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
