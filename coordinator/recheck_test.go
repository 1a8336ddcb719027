package coordinator_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// A result the validation refuses is recomputed by the coordinator
// before it is thrown away: an honest one (a hard batch) is credited to
// its volunteer, not applied, its task done for the epoch, and a replay of
// it is a duplicate; one that is not what its task computes is refused and
// its volunteer struck. The inner rate is made huge, so that
// every honest gradient's step climbs on the held-out batch and the
// validation refuses it (the asynchronous warm-up validates every
// result).
func TestValidationRefusalIsRecomputedBeforeTheWorkIsLost(t *testing.T) {
	spec := jobSpec(t, "mnist-mlp", func(s *jobspec.Spec) {
		s.TargetAccuracy, s.EvalEvery = 1, 1_000_000
		s.SpotCheck = 0 // no copies: only the recomputation decides
		s.InnerOptimizer.LR = 500
	})
	m, err := nn.NewModel(spec.Model)
	if err != nil {
		t.Fatal(err)
	}
	g := newTestGrid(t, spec)
	const honestKey, liarKey = "recheck-honest-key-aaaaaaaaaa", "recheck-liar-key-bbbbbbbbbbbb"
	honest, liar := g.joinRawKey(honestKey), g.joinRawKey(liarKey)
	hid, lid := coordinator.VolunteerIDOfKey(honestKey), coordinator.VolunteerIDOfKey(liarKey)

	// The liar sends the honest gradient, reversed: it climbs too, and it
	// is not what its task computes. (First: once the asynchronous
	// warm-up ends, a lone volunteer's results are not validated.)
	l2 := liar.leases(1)[0]
	lie := g.honestResult(m, l2)
	for i := range lie.Update {
		lie.Update[i] = -lie.Update[i]
	}
	liar.send(lie)
	ack := liar.ack(l2.ID)
	if ack.Accepted || ack.Reason != protocol.ReasonQuarantined || !strings.Contains(ack.Detail, "differs") {
		t.Fatalf("the reversed gradient: %+v; want it refused, the recomputation differing", ack)
	}

	l := honest.leases(1)[0]
	res := g.honestResult(m, l)
	honest.send(res)
	ack = honest.ack(l.ID)
	if !ack.Accepted || ack.Reason != protocol.ReasonQuarantined || !strings.Contains(ack.Detail, "credited, not applied") ||
		!strings.Contains(ack.Detail, "computation of the task matched") {
		t.Fatalf("the honest result: %+v; want it credited, not applied, saying the coordinator's computation matched it", ack)
	}
	// Its task is done for the epoch (queued again, it was computed to the
	// same update without end while the model stood still), and it is no
	// update to replay under another lease.
	again := honest.leases(1)[0]
	if again.ShardID == l.ShardID && again.Start == l.Start {
		t.Fatalf("lease %d is task %d:%d again, whose result was applied", again.ID, l.ShardID, l.Start)
	}
	replay := *res
	replay.LeaseID, replay.BaseVersion = again.ID, again.BaseVersion
	honest.send(&replay)
	if ack := honest.ack(again.ID); ack.Accepted || ack.Reason != protocol.ReasonDuplicate {
		t.Fatalf("the vindicated update replayed under lease %d: %+v; want it refused as a duplicate", again.ID, ack)
	}

	v := g.waitFor("both decided", 10*time.Second, func(v coordinator.JobView) bool {
		return v.Rechecks.Vindicated+v.Rechecks.Refuted == 2
	})
	if r := v.Rechecks; r.Rechecked != 2 || r.Vindicated != 1 || r.Refuted != 1 || r.VindicatedExamples != int64(l.Count) {
		t.Fatalf("rechecks %+v: want two recomputed, the honest one vindicated, the liar's refuted", r)
	}
	if v.UpdatesApplied != 0 || v.Version != 0 || v.EpochProgress <= 0 {
		t.Fatalf("applied %d updates (version %d), epoch progress %g: a result validation refused must never move the model, and its task is done",
			v.UpdatesApplied, v.Version, v.EpochProgress)
	}
	if v.Rejections[protocol.ReasonQuarantined] != 1 || v.Rejections[protocol.ReasonDuplicate] != 1 {
		t.Fatalf("rejections %v: want one quarantined (the liar's) and one duplicate (the replay)", v.Rejections)
	}
	book := g.standing()
	if h := book[hid]; h.Examples != int64(l.Count) || h.Strikes != 0 {
		t.Fatalf("the honest volunteer: %+v; want credited %d examples and no strike", h, l.Count)
	}
	if b := book[lid]; b.Examples != 0 || b.Strikes != 1 {
		t.Fatalf("the liar: %+v; want no credit and one strike", b)
	}
}

// Refusals come in bursts. Results the validation refuses all at once,
// more than the recomputations that may run together, wait for one
// instead of being refused unheard: every honest one is recomputed and
// credited, none skipped.
func TestABurstOfValidationRefusalsWaitsForItsRecomputations(t *testing.T) {
	spec := jobSpec(t, "mnist-mlp", func(s *jobspec.Spec) {
		s.TargetAccuracy, s.EvalEvery = 1, 1_000_000
		s.SpotCheck = 0
		s.InnerOptimizer.LR = 500 // every honest step climbs: validation refuses each
	})
	m, err := nn.NewModel(spec.Model)
	if err != nil {
		t.Fatal(err)
	}
	g := newTestGrid(t, spec)
	const n = 12
	clients := make([]*rawClient, n)
	leases := make([]protocol.Lease, n)
	frames := make([][]byte, n)
	for i := range n {
		clients[i] = g.joinRawKey(fmt.Sprintf("recheck-burst-volunteer-%02d-aaaaaa", i))
		leases[i] = clients[i].leases(1)[0]
	}
	for i := range n {
		b, err := protocol.Encode(g.honestResult(m, leases[i]))
		if err != nil {
			t.Fatal(err)
		}
		frames[i] = b
	}
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- clients[i].sendBytes(frames[i]) }()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		ack := clients[i].ack(leases[i].ID)
		if !ack.Accepted || !strings.Contains(ack.Detail, "credited, not applied") {
			t.Errorf("honest result %d: %+v; want it recomputed and credited", i, ack)
		}
	}
	v := g.waitFor("every result decided", 10*time.Second, func(v coordinator.JobView) bool {
		return v.Rechecks.Vindicated+v.Rechecks.Refuted+v.Rechecks.Skipped >= n
	})
	t.Logf("second opinions: %+v", v.Rechecks)
	if r := v.Rechecks; r.Vindicated != n || r.Skipped != 0 {
		t.Errorf("second opinions %+v: want all %d vindicated, none skipped", r, n)
	}
}
