package coordinator_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/store"
)

// modeSpec parses a spec given as YAML after the quiet mnist-mlp basics,
// so the mode's own defaults apply.
func modeSpec(t testing.TB, yaml string) jobspec.Spec {
	t.Helper()
	s, err := jobspec.Parse([]byte("name: modes\nmodel: mnist-mlp\n" + yaml))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func floatsOf(t testing.TB, b []byte) []float32 {
	t.Helper()
	f := make([]float32, len(b)/4)
	if err := protocol.DecodeFloatsInto(f, b); err != nil {
		t.Fatal(err)
	}
	return f
}

func constUpdate(n int, v float32) protocol.Floats {
	u := make(protocol.Floats, n)
	for i := range u {
		u[i] = v
	}
	return u
}

func submitConst(rc *rawClient, l protocol.Lease, base int64, v float32) *protocol.Ack {
	rc.t.Helper()
	rc.send(&protocol.Result{LeaseID: l.ID, JobID: l.JobID, BaseVersion: base, Codec: protocol.CodecF32,
		Update: constUpdate(rc.welcome.Job.NumParams, v), Examples: l.Count, LossSum: 1})
	return rc.ack(l.ID)
}

// A "latest" lease is granted without a base; when its worker starts it,
// the coordinator fixes the base at the newest version, however far the
// model moved since the grant, and a result for a lease never started is
// refused.
func TestLatestLeaseStartsAtTheNewestVersion(t *testing.T) {
	// Each result steps at once (no robust warm-up holding the first).
	g := newTestGrid(t, modeSpec(t, "target_accuracy: 1\neval_every: 1000000\nsnapshot: latest\nrobust: {method: none}\n"))
	slow, fast := g.joinRaw(), g.joinRaw()
	held := slow.grantedLeases(2)
	for _, l := range held {
		if l.Snapshot != protocol.SnapshotLatest || l.SnapshotURL != "" {
			t.Fatalf("latest lease granted with a base: %+v", l)
		}
	}
	for i := range 3 {
		l := fast.grantedLeases(1)[0]
		fast.send(&protocol.Start{LeaseID: l.ID})
		st, ok := fast.read().(*protocol.Started)
		if !ok || st.BaseVersion != int64(i) {
			t.Fatalf("fast worker's start %d: %+v", i, st)
		}
		if a := submitConst(fast, l, st.BaseVersion, float32(i+2)*1e-4); !a.Accepted || a.Staleness != 0 {
			t.Fatalf("fast result: %+v", a)
		}
	}
	slow.send(&protocol.Start{LeaseID: held[0].ID})
	st, ok := slow.read().(*protocol.Started)
	if !ok || st.BaseVersion != 3 || !strings.HasSuffix(st.SnapshotURL, "/3") {
		t.Fatalf("start after 3 updates: %+v, want base 3, the newest", st)
	}
	if body := snapshotBytes(t, g, protocol.Lease{SnapshotURL: st.SnapshotURL}); len(body) != 4*slow.welcome.Job.NumParams {
		t.Fatalf("the started snapshot is %d bytes", len(body))
	}
	if a := submitConst(slow, held[0], 3, 1e-4); !a.Accepted || a.Staleness != 0 {
		t.Fatalf("result of the started lease: %+v", a)
	}
	a := submitConst(slow, held[1], 0, 1e-4)
	if a.Accepted || a.Reason != protocol.ReasonInvalid || !strings.Contains(a.Detail, "send start") {
		t.Fatalf("result of a lease never started: %+v, want invalid saying to send start", a)
	}
	slow.send(&protocol.Start{LeaseID: 999999})
	if a, ok := slow.read().(*protocol.Ack); !ok || a.LeaseID != 999999 || a.Accepted || a.Reason != protocol.ReasonUnknownLease || !strings.Contains(a.Detail, "999999") {
		t.Fatalf("start of a lease not held: %+v, want a rejecting ack", a)
	}
}

// A diloco round that is partly filled when the coordinator stops is in
// its checkpoint, and the resumed job closes it with those results: the
// outer Nesterov step is on the mean of all of them.
func TestPartialRoundSurvivesRestart(t *testing.T) {
	testenv.Long(t, "trains DiLoCo rounds across a restart")
	db, err := store.Open(filepath.Join(t.TempDir(), "ct.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// The plain mean, so the step can be computed by hand (a robust
	// round restores its results as copies of their mean).
	spec := modeSpec(t, "target_accuracy: 1\neval_every: 1000000\nmode: diloco\nround_size: 3\nlocal_steps: 2\nrobust: {method: none}\n")
	g := newStoredGrid(t, db, &spec)
	// Two workers: a round gives each one place at a time.
	rc, rc2 := g.joinRaw(), g.joinRaw()
	ls := append(rc.leases(1), rc2.leases(1)...)
	if ls[0].UpdateKind != protocol.UpdateDelta || ls[0].Round != 1 || ls[0].LocalSteps != 2 || ls[0].Inner.Type != protocol.InnerAdamW {
		t.Fatalf("diloco lease: %+v", ls[0])
	}
	w0 := floatsOf(t, snapshotBytes(t, g, ls[0]))
	for i, l := range ls[:2] {
		if a := submitConst([]*rawClient{rc, rc2}[i], l, 0, float32(i+1)*1e-3); !a.Accepted || a.Version != 0 {
			t.Fatalf("result %d: %+v (a partial round must not step)", i, a)
		}
	}
	g.waitFor("a checkpoint holding the partial round", 10*time.Second, func(v coordinator.JobView) bool {
		return v.LastCheckpoint != nil && v.LastCheckpoint.RoundResults == 2
	})
	g.close()

	g = newStoredGrid(t, db, nil)
	v := g.jobView()
	if v.Mode != "diloco" || v.Round != 1 || v.RoundResults != 2 || v.Version != 0 {
		t.Fatalf("resumed: mode %s, round %d with %d results, version %d; want diloco, round 1 with 2, version 0", v.Mode, v.Round, v.RoundResults, v.Version)
	}
	rc = g.joinRaw()
	l := rc.leases(1)[0]
	if l.Round != 1 {
		t.Fatalf("resumed lease in round %d, want 1", l.Round)
	}
	if a := submitConst(rc, l, 0, 3e-3); !a.Accepted || a.Version != 1 {
		t.Fatalf("third result: %+v, want the round closed at version 1", a)
	}
	// First Nesterov step from zero momentum on the mean g = 2e-3:
	// w = w0 - 0.7*(g + 0.9*g).
	next := rc.leases(1)[0]
	w1 := floatsOf(t, snapshotBytes(t, g, next))
	for _, k := range []int{0, 1, len(w0) / 2, len(w0) - 1} {
		want := w0[k] - 0.7*1.9*2e-3
		if d := w1[k] - want; d > 1e-6 || d < -1e-6 {
			t.Fatalf("parameter %d after the round: %v, want %v (w0 %v)", k, w1[k], want, w0[k])
		}
	}
}
