package coordinator

import (
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/engine"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// tinyJob is a job on a small synthetic set, driven by hand on the test's
// goroutine (no loop): its state is the test's alone.
func tinyJob(t *testing.T, yaml string) *Job {
	t.Helper()
	set := &dataset.Set{Name: "synthetic", Elem: dataset.Pixels, Kind: dataset.ClassLabels, N: 256, Shape: []int{1, 2, 2}, Classes: 2,
		U8: make([]byte, 256*4), Labels: make([]int32, 256)}
	spec, err := jobspec.Parse([]byte("name: tiny\nmodel: [{type: dense, units: 2}]\nbatch_size: 8\nshard_size: 128\n" +
		"target_accuracy: 1\neval_every: 1000000\n" + yaml))
	if err != nil {
		t.Fatal(err)
	}
	spec.Model = nn.ModelSpec{Input: []int{1, 2, 2}, Layers: spec.Model.Layers}
	var ids atomic.Uint64
	j, err := newJob("tiny", spec, set, set, &ids, LogfLogger(t.Logf))
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func result(j *Job, l protocol.Lease, v float32) submission {
	u := make(protocol.Floats, j.model.NumParams)
	for i := range u {
		u[i] = v
	}
	return submission{worker: "w", res: &protocol.Result{LeaseID: l.ID, JobID: j.ID, BaseVersion: l.BaseVersion,
		Update: u, Examples: l.Count}}
}

// Switching a diloco job to async mid-round steps once on the round's
// results so far, sends the leases out back to the queue (their results
// would mean something else now), and builds the new mode's optimizer.
func TestModeChangeClosesTheRoundAndRequeuesLeases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := tinyJob(t, "mode: diloco\nround_size: 3\nlocal_steps: 2\n")
		// Three workers: a round gives each one place at a time.
		ls := append(append(j.grant("w", 3, ""), j.grant("w2", 1, "")...), j.grant("w3", 1, "")...)
		if len(ls) != 3 || ls[0].Round != 1 || ls[0].UpdateKind != protocol.UpdateDelta || ls[0].LocalSteps != 2 {
			t.Fatalf("diloco leases: %+v", ls)
		}
		if more := j.grant("w4", 1, ""); len(more) != 0 {
			t.Fatalf("a round of 3 without backups leased a fourth task: %+v", more)
		}
		if a := j.apply(result(j, ls[0], 0.01)); !a.Accepted || a.Version != 0 {
			t.Fatalf("first result: %+v", a)
		}
		before := append([]float32(nil), j.st.model.Params...)
		next, _, err := jobspec.Patch(j.st.spec, []byte(`{"mode": "async"}`))
		if err != nil {
			t.Fatal(err)
		}
		if err := j.configure(next); err != nil {
			t.Fatal(err)
		}
		if j.st.model.Version != 1 || j.st.model.Params[0] >= before[0] {
			t.Fatalf("the partial round was not stepped: version %d, w0 %v -> %v", j.st.model.Version, before[0], j.st.model.Params[0])
		}
		if n := len(j.st.sched.Leases()); n != 0 {
			t.Fatalf("%d leases still out after the mode change", n)
		}
		if _, ok := j.st.agg.(*engine.Async); !ok || j.st.spec.Mode != jobspec.ModeAsync {
			t.Fatalf("aggregator %T, mode %s", j.st.agg, j.st.spec.Mode)
		}
		if a := j.apply(result(j, ls[1], 0.01)); a.Accepted || a.Reason != protocol.ReasonUnknownLease {
			t.Fatalf("a result of a lease from before the change: %+v, want unknown_lease", a)
		}
		l := j.grant("w", 1, "")[0]
		if l.UpdateKind != protocol.UpdateGradient || l.Round != 0 || l.LocalSteps != 1 || l.Snapshot != protocol.SnapshotLatest {
			t.Fatalf("async lease after the change: %+v", l)
		}
		started, err := j.start("w", l.ID, "")
		if err != nil || started.BaseVersion != 1 {
			t.Fatalf("start of the async lease: %+v, %v; want base 1", started, err)
		}
		l.BaseVersion = started.BaseVersion
		if a := j.apply(result(j, l, 0.02)); !a.Accepted || a.Version != 2 { // 0.01 again would be a replay
			t.Fatalf("async result: %+v", a)
		}
	})
}

// A spec stored with a new mode whose checkpoint did not land before a
// crash resumes from the older checkpoint: the parameters and progress
// are restored, the other optimizer's state is not forced into this one,
// and a round mode's results are not forced into async.
func TestRestoreAcrossAModeChangeNotYetCheckpointed(t *testing.T) {
	async := tinyJob(t, "")
	async.st.model.Params[0] = 42
	c := async.copyState(&ckptBuffers{})
	diloco := tinyJob(t, "mode: diloco\nround_size: 3\nlocal_steps: 2\n")
	if err := diloco.restore(c); err != nil {
		t.Fatalf("diloco from an async checkpoint: %v", err)
	}
	if diloco.st.model.Params[0] != 42 {
		t.Fatalf("parameters not restored: %v", diloco.st.model.Params[0])
	}

	ls := diloco.grant("w", 1, "")
	diloco.apply(result(diloco, ls[0], 0.01))
	c = diloco.copyState(&ckptBuffers{})
	back := tinyJob(t, "")
	if err := back.restore(c); err != nil {
		t.Fatalf("async from a checkpoint with a partial round: %v", err)
	}
	if back.st.model.Params[0] != 42 {
		t.Fatalf("parameters not restored: %v", back.st.model.Params[0])
	}
}
