package coordinator_test

import (
	"strings"
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
	// The ghost comes back with an all-zero result for its expired
	// lease: refused, and the model is untouched by it. As late where
	// the honest worker took the task meanwhile (the likely case: the
	// task went back to the front of the queue), as invalid where no one
	// had yet (a zero where the model does not fit the batch).
	res := &protocol.Result{LeaseID: taken[0].ID, JobID: taken[0].JobID, BaseVersion: taken[0].BaseVersion,
		Codec: protocol.CodecF32, Update: make(protocol.Floats, ghost.welcome.Job.NumParams), Examples: taken[0].Count}
	ghost.send(res)
	a := ghost.ack(taken[0].ID)
	if a.Accepted || a.Reason != protocol.ReasonLate && a.Reason != protocol.ReasonInvalid {
		t.Fatalf("late zero result for an expired lease: %+v, want refused as late or invalid", a)
	}
	ghost.conn.CloseNow()

	v := g.waitDone(3 * time.Minute)
	// A vindicated result (validation refused, recomputation matched) is
	// credited, not applied: its examples count outside examples_seen.
	if seen := v.ExamplesSeen + v.Rechecks.VindicatedExamples; v.Epoch != 1 || seen != 60000 {
		t.Fatalf("epoch %d with %d examples (%d vindicated), want 1 epoch of all 60000", v.Epoch, seen, v.Rechecks.VindicatedExamples)
	}
	if v.Rejections[a.Reason] != 1 || v.Rejections[protocol.ReasonUnknownLease] != 0 {
		t.Errorf("rejections %v, want the ghost's one late result as %s", v.Rejections, a.Reason)
	}
}

// A worker slower than its deadline is not a ghost. Its result for an
// expired lease answers the task when no one took it since (counted in
// late_revived); its next lease's deadline fits the time it took; and a
// result whose task another worker holds by then is refused as late,
// saying why, while the other's result is applied.
func TestALateResultAnswersItsTaskWhenNoOneTookIt(t *testing.T) {
	g := newTestGrid(t, jobSpec(t, "mnist-mlp", func(s *jobspec.Spec) {
		s.TargetAccuracy, s.EvalEvery = 1, 1_000_000
		s.LeaseTimeout = jobspec.Duration{Duration: time.Second}
	}))
	result := func(l protocol.Lease, n int) *protocol.Result {
		return &protocol.Result{LeaseID: l.ID, JobID: l.JobID, BaseVersion: l.BaseVersion, Codec: protocol.CodecF32,
			Update: smallUpdate(n), Examples: l.Count, LossSum: 1}
	}
	slow := g.joinRaw()
	n := slow.welcome.Job.NumParams
	first := slow.leases(1)[0]
	g.waitFor("the lease to expire", 10*time.Second, func(v coordinator.JobView) bool { return v.LeasesExpired == 1 })
	slow.send(result(first, n))
	if a := slow.ack(first.ID); !a.Accepted {
		t.Fatalf("a late result whose task no one took: %+v, want accepted", a)
	}
	if v := g.jobView(); v.LateRevived != 1 || v.UpdatesApplied != 1 || v.Rejections[protocol.ReasonUnknownLease] != 0 {
		t.Fatalf("late_revived %d, applied %d, rejections %v; want the late result applied", v.LateRevived, v.UpdatesApplied, v.Rejections)
	}

	// It took more than lease_timeout: its next lease may take about
	// three times as long (at most four lease timeouts).
	second := slow.leases(1)[0]
	if left := time.Until(time.UnixMilli(second.DeadlineUnixMs)); left < 2*time.Second || left > 4*time.Second {
		t.Fatalf("the slow worker's next deadline is %v away, want 2 s to 4 s (lease_timeout 1 s)", left.Round(time.Millisecond))
	}
	g.waitFor("the second lease to expire", 10*time.Second, func(v coordinator.JobView) bool { return v.LeasesExpired == 2 })
	fast := g.joinRaw()
	again := fast.leases(1)[0]
	if again.ShardID != second.ShardID || again.Start != second.Start {
		t.Fatalf("the expired task (shard %d at %d) was not leased first: got shard %d at %d", second.ShardID, second.Start, again.ShardID, again.Start)
	}
	slow.send(result(second, n))
	if a := slow.ack(second.ID); a.Accepted || a.Reason != protocol.ReasonLate || !strings.Contains(a.Detail, "expired") {
		t.Fatalf("a late result whose task another holds: %+v, want refused as late, saying the lease expired", a)
	}
	fast.send(result(again, n))
	if a := fast.ack(again.ID); !a.Accepted {
		t.Fatalf("the result of the worker that took the task: %+v, want accepted", a)
	}
	if v := g.jobView(); v.UpdatesApplied != 2 || v.LateRevived != 1 || v.Rejections[protocol.ReasonLate] != 1 {
		t.Errorf("applied %d, late_revived %d, rejections %v; want 2 applied, 1 revived, 1 late", v.UpdatesApplied, v.LateRevived, v.Rejections)
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
