package worker

import (
	"errors"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/nn"
)

func TestTimeRounds(t *testing.T) {
	calls := 0
	step := func() error { calls++; time.Sleep(time.Millisecond); return nil }
	rates, median, err := TimeRounds(step, 64, 3, 10*time.Millisecond, 5*time.Millisecond)
	if err != nil || len(rates) != 3 || calls < 6 {
		t.Fatalf("rates %v, %d calls, %v", rates, calls, err)
	}
	// About 64 examples per millisecond at most.
	if median <= 0 || median > 64_000 {
		t.Errorf("median %v examples/s for 64 examples per >= 1 ms step", median)
	}
	boom := errors.New("boom")
	if _, _, err := TimeRounds(func() error { return boom }, 64, 3, time.Millisecond, 0); !errors.Is(err, boom) {
		t.Errorf("a failing step gave %v", err)
	}
	if _, _, err := TimeRounds(step, 0, 3, time.Millisecond, 0); err == nil {
		t.Error("0 examples per step accepted")
	}
}

func TestRandomBatchIsRepeatableAndInRange(t *testing.T) {
	m := smallModel(t)
	x, labels := RandomBatch(m, 5)
	x2, labels2 := RandomBatch(m, 5)
	if len(x) != 5*m.InputSize || len(labels) != 5 {
		t.Fatalf("%d inputs, %d labels", len(x), len(labels))
	}
	for i := range x {
		if x[i] != x2[i] || x[i] < 0 || x[i] >= 1 {
			t.Fatalf("input %d: %v then %v; want the same value in [0, 1)", i, x[i], x2[i])
		}
	}
	for i, l := range labels {
		if l != labels2[i] || l < 0 || int(l) >= m.NumClasses {
			t.Fatalf("label %d: %d then %d", i, l, labels2[i])
		}
	}
}

// A model on token ids gets valid ids and a label per position.
func TestRandomBatchForASequenceModel(t *testing.T) {
	spec, _ := nn.Preset("charlm-tiny")
	m, err := nn.NewModel(spec)
	if err != nil {
		t.Fatal(err)
	}
	x, labels := RandomBatch(m, 3)
	if len(x) != 3*m.InputSize || len(labels) != 3*m.LabelsPerExample {
		t.Fatalf("%d inputs, %d labels; want %d and %d", len(x), len(labels), 3*m.InputSize, 3*m.LabelsPerExample)
	}
	if err := m.CheckInputs(x); err != nil {
		t.Error(err)
	}
	if err := m.CheckLabels(labels); err != nil {
		t.Error(err)
	}
}
