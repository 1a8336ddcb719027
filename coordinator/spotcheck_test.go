package coordinator_test

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/store"
)

// result answers lease l with an update of n values all v.
func spotResult(l protocol.Lease, n int, v float32) *protocol.Result {
	u := make(protocol.Floats, n)
	for i := range u {
		u[i] = v
	}
	return &protocol.Result{LeaseID: l.ID, JobID: l.JobID, BaseVersion: l.BaseVersion, Codec: protocol.CodecF32,
		Update: u, Examples: l.Count, LossSum: 1, ComputeMs: 1}
}

// The wire rules of a spot check, with raw clients as three volunteers:
// a checked result's copy goes to another volunteer from the primary's
// base, granted, with copy_of; it is compared and never applied; a
// mismatch goes to the coordinator's recomputation, which strikes the one
// that disagrees with it; a struck volunteer's results are held.
func TestSpotCheckCopiesOnTheWire(t *testing.T) {
	spec := jobSpec(t, "mnist-mlp", func(s *jobspec.Spec) {
		s.TargetAccuracy, s.EvalEvery = 1, 1_000_000
		s.SpotCheck = 1 // every result of a newcomer is checked
		s.Robust.Method = "none"
	})
	g := newTestGrid(t, spec)
	a := g.joinRawKey("spot-volunteer-key-aaaaaaaa")
	b := g.joinRawKey("spot-volunteer-key-bbbbbbbb")
	n := a.welcome.Job.NumParams

	p := a.leases(1)[0]
	a.send(spotResult(p, n, 1e-3))
	if ack := a.ack(p.ID); !ack.Accepted {
		t.Fatalf("primary: %+v", ack)
	}
	before := g.jobView()
	// b's next lease is the copy, from the primary's base, whatever the
	// job's snapshot mode.
	cp := b.grantedLeases(1)[0]
	if cp.CopyOf != p.ID || cp.Snapshot != protocol.SnapshotGranted || cp.BaseVersion != p.BaseVersion ||
		cp.ShardID != p.ShardID || cp.Start != p.Start || cp.Count != p.Count || cp.LocalSteps != p.LocalSteps {
		t.Fatalf("copy %+v of primary %+v", cp, p)
	}
	if resp, err := http.Get(g.http.URL + cp.SnapshotURL); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the copy's snapshot: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	b.send(spotResult(cp, n, 1e-3))
	ack := b.ack(cp.ID)
	if !ack.Accepted || !strings.Contains(ack.Detail, "spot check") {
		t.Fatalf("agreeing copy: %+v, want accepted with a detail saying it was a check", ack)
	}
	v := g.jobView()
	if v.Version != before.Version || v.UpdatesApplied != before.UpdatesApplied || v.ExamplesSeen != before.ExamplesSeen {
		t.Fatalf("the copy was applied: version %d→%d, applied %d→%d", before.Version, v.Version, before.UpdatesApplied, v.UpdatesApplied)
	}
	sc := v.SpotChecks
	if sc.Checked != 1 || sc.Agreed != 1 || sc.DuplicatedExamples != int64(p.Count) || sc.DuplicatedFraction <= 0 {
		t.Fatalf("spot checks %+v after one agreeing check", *sc)
	}

	// b lies on the next copy: the coordinator decides, b is struck.
	spotStrike(t, g, spec, a, b)
	v = g.jobView()
	if v.SpotChecks.Strikes != 1 || v.SpotChecks.Mismatched != 1 {
		t.Fatalf("spot checks %+v, want one mismatch and one strike", *v.SpotChecks)
	}
	book := g.standing()
	if book[coordinator.VolunteerIDOfKey("spot-volunteer-key-bbbbbbbb")].Strikes != 1 || book[coordinator.VolunteerIDOfKey("spot-volunteer-key-aaaaaaaa")].Strikes != 0 {
		t.Fatalf("ledger %+v: want b struck, a not", book)
	}

	// b is struck: its own results are held, not applied.
	spotHeld(t, g, b)

	// The operator pardons b: its results count again.
	bid := coordinator.VolunteerIDOfKey("spot-volunteer-key-bbbbbbbb")
	if code := g.adminJSON(http.MethodPost, "/api/v1/volunteers/"+bid+"/pardon", map[string]string{}, nil); code/100 != 2 {
		t.Fatalf("pardon: %d", code)
	}
	bl := b.leases(1)
	for bl[0].CopyOf != 0 {
		b.send(spotResult(bl[0], n, 1e-3))
		b.ack(bl[0].ID)
		bl = b.leases(1)
	}
	b.send(spotResult(bl[0], n, 3e-3))
	if ack := b.ack(bl[0].ID); !ack.Accepted {
		t.Fatalf("a pardoned volunteer's result: %+v, want it applied", ack)
	}
}

// spotStrike has liar disagree with a copy of primary's next result,
// which is honest, and waits for the coordinator's recomputation to
// decide against it.
func spotStrike(t *testing.T, g *testGrid, spec jobspec.Spec, primary, liar *rawClient) {
	t.Helper()
	m, err := nn.NewModel(spec.Model)
	if err != nil {
		t.Fatal(err)
	}
	recomputed := g.jobView().SpotChecks.Recomputed
	p := primary.leases(1)[0]
	primary.send(g.honestResult(m, p))
	primary.ack(p.ID)
	cp := liar.grantedLeases(1)[0]
	if cp.CopyOf != p.ID {
		t.Fatalf("copy %+v of %d", cp, p.ID)
	}
	liar.send(spotResult(cp, m.NumParams, -2e-3))
	if ack := liar.ack(cp.ID); !ack.Accepted || !strings.Contains(ack.Detail, "coordinator") {
		t.Fatalf("disagreeing copy: %+v, want accepted for now, saying the coordinator decides", ack)
	}
	g.waitFor("the coordinator's recomputation", 20*time.Second, func(v coordinator.JobView) bool {
		return v.SpotChecks.Recomputed > recomputed
	})
}

// spotHeld checks that struck's next own result is held, not applied.
func spotHeld(t *testing.T, g *testGrid, struck *rawClient) {
	t.Helper()
	n := struck.welcome.Job.NumParams
	bl := struck.leases(1)
	for bl[0].CopyOf != 0 {
		struck.send(spotResult(bl[0], n, 2e-3)) // a copy of another's work first
		struck.ack(bl[0].ID)
		bl = struck.leases(1)
	}
	before := g.jobView()
	struck.send(spotResult(bl[0], n, 1e-3))
	if ack := struck.ack(bl[0].ID); ack.Accepted || ack.Reason != protocol.ReasonQuarantined {
		t.Fatalf("struck volunteer's result: %+v, want quarantined", ack)
	}
	if v := g.jobView(); v.UpdatesApplied != before.UpdatesApplied || v.Rejections[protocol.ReasonQuarantined] != before.Rejections[protocol.ReasonQuarantined]+1 {
		t.Fatalf("a held result was applied (applied %d→%d) or not counted (%v)", before.UpdatesApplied, v.UpdatesApplied, v.Rejections)
	}
}

// A restart keeps each volunteer's spot check record: a volunteer struck
// before it is still held after.
func TestSpotCheckStrikesSurviveRestart(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "ct.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	spec := jobSpec(t, "mnist-mlp", func(s *jobspec.Spec) {
		s.TargetAccuracy, s.EvalEvery = 1, 1_000_000
		s.SpotCheck = 1
		s.Robust.Method = "none"
	})
	g := newStoredGrid(t, db, &spec)
	a, b := g.joinRawKey("spot-volunteer-key-aaaaaaaa"), g.joinRawKey("spot-volunteer-key-bbbbbbbb")
	spotStrike(t, g, spec, a, b)
	before := g.jobView()
	for _, rc := range []*rawClient{a, b} {
		rc.conn.CloseNow()
	}
	g.close()

	g2 := newStoredGrid(t, db, nil)
	v := g2.jobView()
	if v.SpotChecks.Strikes != 1 || v.SpotChecks.Checked != before.SpotChecks.Checked {
		t.Fatalf("after restart: spot checks %+v, before %+v", *v.SpotChecks, *before.SpotChecks)
	}
	g2.joinRawKey("spot-volunteer-key-aaaaaaaa")
	spotHeld(t, g2, g2.joinRawKey("spot-volunteer-key-bbbbbbbb"))
}

// A lie that was applied (async) and that a check refutes later loses its
// credit: the liar's ledger goes back to what it had before. The honest
// copy that disagreed with it keeps the credit its ack promised, and no
// strike.
func TestSpotCheckRefutesAnAppliedLie(t *testing.T) {
	spec := jobSpec(t, "mnist-mlp", func(s *jobspec.Spec) {
		s.TargetAccuracy, s.EvalEvery = 1, 1_000_000
		s.SpotCheck = 1
		s.Robust.Method = "none"
	})
	m, err := nn.NewModel(spec.Model)
	if err != nil {
		t.Fatal(err)
	}
	g := newTestGrid(t, spec)
	liar := g.joinRawKey("spot-volunteer-key-liar0000")
	b := g.joinRawKey("spot-volunteer-key-bbbbbbbb")
	n := liar.welcome.Job.NumParams
	p := liar.leases(1)[0]
	liar.send(spotResult(p, n, -2e-3))
	if ack := liar.ack(p.ID); !ack.Accepted {
		t.Fatalf("the lie: %+v; want it applied (the check comes later)", ack)
	}
	id := coordinator.VolunteerIDOfKey("spot-volunteer-key-liar0000")
	if got := g.standing()[id].Examples; got != int64(p.Count) {
		t.Fatalf("the liar's credit %d, want %d once applied", got, p.Count)
	}
	cp := b.grantedLeases(1)[0]
	b.send(g.honestResult(m, cp))
	if ack := b.ack(cp.ID); !ack.Accepted {
		t.Fatalf("the honest copy: %+v, want accepted while the coordinator decides", ack)
	}
	g.waitFor("the coordinator's recomputation", 20*time.Second, func(v coordinator.JobView) bool { return v.SpotChecks.Recomputed == 1 })
	book := g.standing()
	if l := book[id]; l.Examples != 0 || l.Strikes != 1 {
		t.Fatalf("the liar after the check: %+v, want no credit and one strike", l)
	}
	if bb := book[coordinator.VolunteerIDOfKey("spot-volunteer-key-bbbbbbbb")]; bb.Strikes != 0 || bb.Examples != int64(cp.Count) {
		t.Fatalf("the honest copy's volunteer %+v, want no strike and credit for its %d examples", bb, cp.Count)
	}
	if v := g.jobView(); v.SpotChecks.Refuted != 1 || v.SpotChecks.RefutedExamples != int64(p.Count) {
		t.Fatalf("spot checks %+v, want one refuted result", *v.SpotChecks)
	}
}

// In a sync round a copy takes no place: the round of two still takes
// two primaries, and the copy's result is compared, not summed.
func TestSpotCheckCopyTakesNoPlaceInARound(t *testing.T) {
	g := newTestGrid(t, jobSpec(t, "mnist-mlp", func(s *jobspec.Spec) {
		s.TargetAccuracy, s.EvalEvery = 1, 1_000_000
		s.SpotCheck = 1
		s.Mode, s.RoundSize, s.Snapshot = "sync", 2, "granted"
		s.Robust.Method = "none"
	}))
	a, b := g.joinRawKey("spot-volunteer-key-aaaaaaaa"), g.joinRawKey("spot-volunteer-key-bbbbbbbb")
	n := a.welcome.Job.NumParams
	p := a.leases(1)[0]
	a.send(spotResult(p, n, 1e-3))
	if ack := a.ack(p.ID); !ack.Accepted {
		t.Fatalf("primary: %+v", ack)
	}
	cp := b.grantedLeases(1)[0]
	if cp.CopyOf != p.ID || cp.Round != p.Round {
		t.Fatalf("copy %+v of %+v", cp, p)
	}
	second := b.leases(1)[0]
	if second.CopyOf != 0 || second.Round != p.Round {
		t.Fatalf("after the copy, lease %+v: want the round's second primary (round %d)", second, p.Round)
	}
	b.send(spotResult(cp, n, 1e-3))
	if ack := b.ack(cp.ID); !ack.Accepted {
		t.Fatalf("copy: %+v", ack)
	}
	if v := g.jobView(); v.Version != 0 || v.RoundResults != 1 {
		t.Fatalf("after the copy: version %d, round results %d; want the round still open with the primary only", v.Version, v.RoundResults)
	}
	b.send(spotResult(second, n, 1.5e-3))
	b.ack(second.ID)
	if v := g.jobView(); v.Version != 1 || v.UpdatesApplied != 2 {
		t.Fatalf("version %d, applied %d: want the round closed by its two primaries", v.Version, v.UpdatesApplied)
	}
}
