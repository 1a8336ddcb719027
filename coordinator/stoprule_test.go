package coordinator

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/nn"
)

// stopJob is tinyJob with the targets the test gives.
func stopJob(t *testing.T, yaml string) *Job {
	t.Helper()
	set := &dataset.Set{Name: "synthetic", Elem: dataset.Pixels, Kind: dataset.ClassLabels, N: 256, Shape: []int{1, 2, 2}, Classes: 2,
		U8: make([]byte, 256*4), Labels: make([]int32, 256)}
	spec, err := jobspec.Parse([]byte("name: stop\nmodel: [{type: dense, units: 2}]\nbatch_size: 8\nshard_size: 128\neval_every: 1000000\n" + yaml))
	if err != nil {
		t.Fatal(err)
	}
	spec.Model = nn.ModelSpec{Input: []int{1, 2, 2}, Layers: spec.Model.Layers}
	var ids atomic.Uint64
	j, err := newJob("stop", spec, set, set, &ids, LogfLogger(t.Logf))
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// The stop rule, decided on evaluations handed straight to finishEval:
// target_loss stops at a loss at or under it, target_accuracy at an
// accuracy at or over it, a zero target is none, and the job keeps the
// parameters that were measured.
func TestStopRule(t *testing.T) {
	cases := []struct {
		name  string
		yaml  string
		evals []EvalResult // all but the last leave the job running
		why   string       // the reason the last one gives
	}{
		{"loss above, then at the target", "target_accuracy: 0\ntarget_loss: 0.5\n",
			[]EvalResult{{Accuracy: 1, Loss: 0.51}, {Accuracy: 0, Loss: 0.5}}, "reached target loss 0.5000 <= 0.5000"},
		{"loss under the target", "target_accuracy: 0\ntarget_loss: 2\n",
			[]EvalResult{{Loss: 1.25}}, "reached target loss 1.2500 <= 2.0000"},
		{"accuracy without a loss target", "target_accuracy: 0.9\n",
			[]EvalResult{{Accuracy: 0.89, Loss: 0.01}, {Accuracy: 0.9, Loss: 3}}, "reached target accuracy 0.9000 >= 0.9000"},
		{"whichever comes first", "target_accuracy: 0.9\ntarget_loss: 0.3\n",
			[]EvalResult{{Accuracy: 0.5, Loss: 0.4}, {Accuracy: 0.6, Loss: 0.3}}, "reached target loss"},
		{"whichever comes first, accuracy", "target_accuracy: 0.9\ntarget_loss: 0.3\n",
			[]EvalResult{{Accuracy: 0.95, Loss: 0.4}}, "reached target accuracy"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j := stopJob(t, c.yaml)
			for i, e := range c.evals {
				e.Version = int64(i + 1)
				params := make([]float32, j.model.NumParams)
				params[0] = float32(i + 1)
				j.finishEval(e, params)
				last := i == len(c.evals)-1
				if !last && j.st.state != StateRunning {
					t.Fatalf("eval %d (%+v) ended the job: %s, %s", i, e, j.st.state, j.st.reason)
				}
				if last {
					if j.st.state != StateDone || !strings.Contains(j.st.reason, c.why) {
						t.Fatalf("eval %d (%+v): state %s, reason %q; want done, %q", i, e, j.st.state, j.st.reason, c.why)
					}
					if j.st.model.Version != e.Version || j.st.model.Params[0] != params[0] {
						t.Fatalf("the job kept version %d, w0 %v; want the measured version %d, w0 %v", j.st.model.Version, j.st.model.Params[0], e.Version, params[0])
					}
				}
			}
		})
	}

	// A loss that is not a number fails the job, whatever the targets.
	j := stopJob(t, "target_accuracy: 0\ntarget_loss: 0.5\n")
	j.finishEval(EvalResult{Loss: math.NaN(), Version: 1}, make([]float32, j.model.NumParams))
	if j.st.state != StateFailed || !strings.Contains(j.st.reason, "diverged") {
		t.Fatalf("NaN loss: state %s, reason %q", j.st.state, j.st.reason)
	}
	// No target at all: only max_epochs ends the job.
	j = stopJob(t, "target_accuracy: 0\n")
	j.finishEval(EvalResult{Accuracy: 1, Loss: 0, Version: 1}, make([]float32, j.model.NumParams))
	if j.st.state != StateRunning {
		t.Fatalf("a job without targets ended: %s, %s", j.st.state, j.st.reason)
	}
}

// An evaluation's JSON: loss always (null when not finite), bits_per_char
// and sample for a text job only.
func TestEvalResultJSON(t *testing.T) {
	for _, c := range []struct {
		e    EvalResult
		want []string
		not  []string
	}{
		{EvalResult{Accuracy: 0.5, Loss: 1.5, Version: 3}, []string{`"loss":1.5`, `"accuracy":0.5`}, []string{"bits_per_char", "sample"}},
		{EvalResult{Loss: math.Ln2 * 2, BitsPerChar: 2, Sample: "In the beginning"},
			[]string{`"bits_per_char":2`, `"sample":"In the beginning"`, `"loss":1.386`}, nil},
		{EvalResult{Loss: math.Inf(1), BitsPerChar: math.Inf(1)}, []string{`"loss":null`}, []string{"bits_per_char"}},
		{EvalResult{Loss: 5, BitsPerByte: 2.5}, []string{`"bits_per_byte":2.5`, `"loss":5`}, []string{"bits_per_char"}},
		{EvalResult{Loss: math.NaN(), BitsPerByte: math.NaN()}, []string{`"loss":null`}, []string{"bits_per_byte"}},
	} {
		b, err := json.Marshal(c.e)
		if err != nil {
			t.Fatalf("%+v: %v", c.e, err)
		}
		for _, w := range c.want {
			if !strings.Contains(string(b), w) {
				t.Errorf("%s lacks %s", b, w)
			}
		}
		for _, w := range c.not {
			if strings.Contains(string(b), w) {
				t.Errorf("%s has %s", b, w)
			}
		}
	}
}

// One sample at a time per job: a request waits for the one being
// generated, up to its bound, then gives up (a 429).
func TestOneSampleAtATime(t *testing.T) {
	var mu sync.Mutex
	mu.Lock()
	start := time.Now()
	if lockWithin(context.Background(), &mu, 50*time.Millisecond) {
		t.Fatal("took a held lock")
	}
	if d := time.Since(start); d < 50*time.Millisecond || d > 2*time.Second {
		t.Fatalf("gave up after %v, want about 50ms", d)
	}
	go func() {
		time.Sleep(30 * time.Millisecond)
		mu.Unlock()
	}()
	if !lockWithin(context.Background(), &mu, 5*time.Second) {
		t.Fatal("did not take the lock once it was free")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if lockWithin(ctx, &mu, 5*time.Second) {
		t.Fatal("took a held lock for a request that has gone")
	}
}
