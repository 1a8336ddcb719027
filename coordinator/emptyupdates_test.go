package coordinator

import (
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/engine"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// answerAs submits worker's result for l as volunteer v, with an update of
// x everywhere.
func answerAs(j *Job, worker, v string, l *protocol.Lease, x float32) protocol.Ack {
	sub := result(j, *l, x)
	sub.worker, sub.volunteer = worker, v
	sub.norm = sub.res.Update.Norm() // as the connection computes it
	return j.apply(sub)
}

func strikesOf(t *testing.T, j *Job, v string) int {
	t.Helper()
	s, _ := j.ledger.(*volunteerBook).strikesOf(v)
	return s
}

// An all-zero update is refused as invalid, never applied, and strikes
// its volunteer while another's updates move the model; three such ban
// it, and its results are refused from then on. The honest volunteer is
// untouched.
func TestAllZeroUpdatesAreStruck(t *testing.T) {
	j, _ := abuseJob(t, "mode: async\n")
	if ack := answerAs(j, "honest", "a-honest", leaseFor(t, j, "honest"), 0.01); !ack.Accepted {
		t.Fatalf("honest: %+v", ack)
	}
	for i := range 3 {
		v := j.st.model.Version
		ack := answerAs(j, "hostage", "a-hostage", leaseFor(t, j, "hostage"), 0)
		if ack.Accepted || ack.Reason != protocol.ReasonInvalid || !strings.Contains(ack.Detail, "all zeros") {
			t.Fatalf("zero update %d: %+v", i, ack)
		}
		if j.st.model.Version != v {
			t.Fatalf("a refused zero update moved the model to version %d", j.st.model.Version)
		}
		if got := strikesOf(t, j, "a-hostage"); got != i+1 {
			t.Fatalf("after %d zero updates: %d strikes", i+1, got)
		}
		// The honest volunteer answers between: zeros from one volunteer
		// while another's move the model.
		if ack := answerAs(j, "honest", "a-honest", leaseFor(t, j, "honest"), 0.02+float32(i)*0.01); !ack.Accepted {
			t.Fatalf("honest: %+v", ack)
		}
	}
	if !j.st.spot.Banned("a-hostage") {
		t.Fatal("three all-zero updates did not ban their volunteer")
	}
	if l := leaseFor(t, j, "hostage"); l != nil {
		t.Fatalf("a banned volunteer was granted lease %+v", l)
	}
	if got := strikesOf(t, j, "a-honest"); got != 0 {
		t.Fatalf("the honest volunteer has %d strikes", got)
	}
}

// A model that gives zero gradients everywhere makes every volunteer send
// zeros: no one is struck for being first (nothing moved the model yet),
// and once two volunteers sent zeros in a row, neither is struck again.
func TestZerosFromEveryoneStrikeNoOne(t *testing.T) {
	j, _ := abuseJob(t, "mode: async\n")
	for i := range 4 {
		for _, w := range []string{"honest", "hostage"} {
			if ack := answerAs(j, w, "a-"+w, leaseFor(t, j, w), 0); ack.Accepted {
				t.Fatalf("round %d: %s's zero update accepted", i, w)
			}
		}
	}
	if a, b := strikesOf(t, j, "a-honest"), strikesOf(t, j, "a-hostage"); a+b != 0 {
		t.Fatalf("strikes %d and %d for zeros from a model that moves for no one", a, b)
	}
	// After a non-zero update from one, zeros from the other strike once;
	// then both send zeros again: no more strikes.
	answerAs(j, "honest", "a-honest", leaseFor(t, j, "honest"), 0.01)
	answerAs(j, "hostage", "a-hostage", leaseFor(t, j, "hostage"), 0)
	answerAs(j, "honest", "a-honest", leaseFor(t, j, "honest"), 0)
	answerAs(j, "hostage", "a-hostage", leaseFor(t, j, "hostage"), 0)
	if a, b := strikesOf(t, j, "a-honest"), strikesOf(t, j, "a-hostage"); a != 0 || b != 1 {
		t.Fatalf("strikes %d (honest) and %d (hostage), want 0 and 1", a, b)
	}
}

// Past the norm gate's warm-up, an update far below every accepted norm
// is refused as one that moves nothing; one a few hundred times smaller
// than the typical (a batch the model fits) is applied.
func TestNearZeroUpdatesAreRefused(t *testing.T) {
	j, _ := abuseJob(t, "mode: async\nmax_update_norm_ratio: 100\n")
	for i := range engine.NormWarmup + 2 {
		if ack := answerAs(j, "honest", "a-honest", leaseFor(t, j, "honest"), 0.01+float32(i)*1e-4); !ack.Accepted {
			t.Fatalf("warm-up %d: %+v", i, ack)
		}
	}
	ack := answerAs(j, "hostage", "a-hostage", leaseFor(t, j, "hostage"), 1e-9)
	if ack.Accepted || ack.Reason != protocol.ReasonInvalid || !strings.Contains(ack.Detail, "moves the model by nothing") {
		t.Fatalf("near-zero update: %+v", ack)
	}
	if ack := answerAs(j, "hostage", "a-hostage", leaseFor(t, j, "hostage"), 3e-5); !ack.Accepted {
		t.Fatalf("a small honest update (1/300 of the typical): %+v", ack)
	}
	if got := strikesOf(t, j, "a-hostage"); got != 0 {
		t.Fatalf("near-zero updates struck their volunteer %d times; only all-zero ones are evidence by themselves", got)
	}
}

// Twenty connections of one volunteer that answer at once take at most
// shareSlack times its share of the tasks while another volunteer goes
// without; once spot checks vouch for it, the bound is lifted. Beside
// volunteers that do not ask (a hostage on its leases), no bound.
func TestVolunteerShareBoundsManyConnections(t *testing.T) {
	j, now := abuseJob(t, "mode: async\nmax_epochs: 1000\n")
	j.limits = jobLimits{maxLeases: 2, perAddress: 100}
	for i := range 20 {
		j.join("flood"+string(rune('a'+i)), member{volunteer: "a-flood", address: "10.0.0.9"})
	}
	// Nobody else asks: the flood takes what it wants.
	for round := range 100 {
		w := "flood" + string(rune('a'+round%20))
		if l := leaseFor(t, j, w); l != nil {
			answerAs(j, w, "a-flood", l, 0.01+float32(round)*1e-5)
		}
	}
	if s, why := j.leaseShare("flooda"); s == 0 {
		t.Fatalf("bounded with no one else asking: %q", why)
	}
	*now = now.Add(time.Minute)
	flood, honest := 0, 0
	var held *protocol.Lease
	for round := range 3000 {
		w := "flood" + string(rune('a'+round%20))
		if s, _ := j.leaseShare(w); s > 0 {
			if l := leaseFor(t, j, w); l != nil {
				flood++
				answerAs(j, w, "a-flood", l, 0.01+float32(round)*1e-5)
			}
		}
		// The honest volunteer computes: one task per 10 of the flood's
		// turns; between, its requests find nothing (a round's places
		// taken, in sync mode).
		j.noteStarved("honest")
		if round%10 == 0 {
			if held != nil {
				answerAs(j, "honest", "a-honest", held, 0.02+float32(round)*1e-5)
			}
			held = leaseFor(t, j, "honest")
			honest++
		}
	}
	taken, window := j.st.shares.Share("a-flood")
	share := float64(taken) / float64(window)
	// Three volunteers are members: the flood, the honest one and the
	// idle hostage; the bound is 1.5/3 of the window.
	if share > engine.ShareSlack/3+0.02 {
		t.Fatalf("the flood took %.2f of the last %d tasks (%d in all, honest %d); want at most %.2f", share, window, flood, honest, engine.ShareSlack/3)
	}
	// The flood takes what is left of its share, then is told why not.
	for i := 0; ; i++ {
		s, why := j.leaseShare("flooda")
		if s == 0 {
			if !strings.Contains(why, "its share among 3 volunteers") {
				t.Fatalf("at the bound: %q", why)
			}
			break
		}
		if i == 100 {
			t.Fatalf("still %d to take after 100 more tasks", s)
		}
		answerAs(j, "flooda", "a-flood", leaseFor(t, j, "flooda"), 0.5+float32(i)*1e-5)
	}
	// Vouched for by spot checks: no bound.
	j.st.spot.Restore(map[string]engine.Trust{"a-flood": {Passed: 20}}, j.st.spot.Counters)
	if s, _ := j.leaseShare("flooda"); s == 0 {
		t.Fatal("a volunteer the spot checks vouched for is still bounded")
	}
}
