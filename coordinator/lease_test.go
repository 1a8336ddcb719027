package coordinator_test

import (
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// A worker takes leases and vanishes without a word: after the deadline
// its shards are leased again and the epoch completes with every example.
func TestVanishedWorkersLeasesExpireAndTheEpochCompletes(t *testing.T) {
	testenv.Long(t, "runs a full MNIST epoch")
	g := newTestGrid(t, jobSpec(t, "mnist-mlp", func(s *jobspec.Spec) {
		s.TargetAccuracy = 1 // never reached: the job ends at max_epochs
		s.MaxEpochs = 1
		s.EvalEvery = 1_000_000
		s.LeaseTimeout = jobspec.Duration{Duration: 700 * time.Millisecond}
	}))
	ghost := g.joinRaw()
	taken := ghost.leases(2)
	g.addWorker(1, nil)

	running := g.waitFor("the ghost's leases to expire", time.Minute, func(v coordinator.JobView) bool {
		return v.LeasesExpired >= 2
	})
	if running.State != coordinator.StateRunning {
		t.Fatalf("job already %s before the ghost's leases expired", running.State)
	}
	// The ghost comes back with a result for its expired lease: refused,
	// and the model is untouched by it.
	res := &protocol.Result{LeaseID: taken[0].ID, JobID: taken[0].JobID, BaseVersion: taken[0].BaseVersion,
		Codec: protocol.CodecF32, Update: make(protocol.Floats, ghost.welcome.Job.NumParams), Examples: taken[0].Count}
	ghost.send(res)
	if a := ghost.ack(taken[0].ID); a.Accepted || a.Reason != protocol.ReasonUnknownLease {
		t.Fatalf("late result for an expired lease: %+v, want rejected as unknown_lease", a)
	}
	ghost.conn.CloseNow()

	v := g.waitDone(3 * time.Minute)
	// A vindicated result (validation refused, recomputation matched) is
	// credited, not applied: its examples count outside examples_seen.
	if seen := v.ExamplesSeen + v.Rechecks.VindicatedExamples; v.Epoch != 1 || seen != 60000 {
		t.Fatalf("epoch %d with %d examples (%d vindicated), want 1 epoch of all 60000", v.Epoch, seen, v.Rechecks.VindicatedExamples)
	}
	if v.Rejections["unknown_lease"] != 1 {
		t.Errorf("rejections %v, want the ghost's one late result as unknown_lease", v.Rejections)
	}
}

// A worker that disconnects gives its leases back at once.
func TestDisconnectRequeuesLeases(t *testing.T) {
	g := newTestGrid(t, quietJob(t))
	rc := g.joinRaw()
	rc.leases(2)
	if v := g.jobView(); v.LeasesHeld != 2 {
		t.Fatalf("leases held %d, want 2", v.LeasesHeld)
	}
	rc.send(&protocol.Bye{Reason: "closing the tab"})
	g.waitFor("the leases to return", 10*time.Second, func(v coordinator.JobView) bool { return v.LeasesHeld == 0 })
	if v := g.jobView(); v.LeasesExpired != 0 {
		t.Fatalf("leases expired %d; they should have returned on bye, not by deadline", v.LeasesExpired)
	}
}
