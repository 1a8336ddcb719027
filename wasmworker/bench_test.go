package wasmworker

import (
	"testing"
	"time"
)

func TestBenchReportsRounds(t *testing.T) {
	r, err := Bench("mnist-mlp", 8, 3, 20*time.Millisecond)
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
	if _, err := Bench("no-such-model", 8, 1, time.Millisecond); err == nil {
		t.Error("Bench accepted an unknown model")
	}
	if _, err := Bench("mnist-mlp", 0, 1, time.Millisecond); err == nil {
		t.Error("Bench accepted batch 0")
	}
}
