package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/nn/nntest"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/rljob"
)

// An RL job in mode sync, over real websockets with two workers: rollout
// leases take no place in a round (round 0), learn leases do, one per
// worker at a time, and only once a full learn lease of fresh groups is
// buffered; a worker holding a learn place is given rollouts meanwhile.
// The round's step waits for round_size learn results and moves the
// policy one version; rollout results never move it. With every place of
// the round out, rollouts stop once the groups buffered would fill every
// place of this round and the next twice over.
func TestRLSyncRoundsHoldLearnLeasesOnly(t *testing.T) {
	g, j := rlGrid(t, "mode: sync\nround_size: 2\nspot_check: 0\n") // the rollouts' log-probabilities are made up
	ms, _ := nn.Preset("charlm-tiny")
	m, err := nn.NewModel(ms)
	if err != nil {
		t.Fatal(err)
	}
	a := joinRLKey(g, protocol.KindNative, true, j.ID, "rl-sync-volunteer-key-a")
	b := joinRLKey(g, protocol.KindNative, true, j.ID, "rl-sync-volunteer-key-b")
	view := func() (version, applied int64, buffered int) {
		t.Helper()
		v, _, err := g.srv.JobView(context.Background(), j.ID)
		if err != nil || v.RL == nil {
			t.Fatalf("job view: %v, rl %+v", err, v.RL)
		}
		return v.Version, v.UpdatesApplied, v.RL.Buffered
	}
	next := func(rc *rawClient) (protocol.Lease, bool) { t.Helper(); return rlNext(rc) }
	rollout := func(rc *rawClient, l protocol.Lease) { t.Helper(); rlRollout(rc, l) }
	learnLease := func(rc *rawClient) protocol.Lease {
		t.Helper()
		l, ok := next(rc)
		if !ok || l.Learn == nil || l.Round != 1 {
			t.Fatalf("lease %+v (ok %v); want a learn lease in round 1", l, ok)
		}
		return l
	}

	// Until eight groups are buffered, both get rollouts.
	for i := range 8 {
		rc := a
		if i%2 == 1 {
			rc = b
		}
		l, ok := next(rc)
		if !ok {
			t.Fatalf("rollout %d: no lease", i)
		}
		rollout(rc, l)
	}
	if v, _, buffered := view(); v != 0 || buffered != 8 {
		t.Fatalf("after 8 rollouts: version %d, %d groups buffered; want 0 and 8 (rollouts never move the policy)", v, buffered)
	}
	la := learnLease(a)
	// a holds its place in round 1: it generates while the round fills.
	for range 8 {
		l, ok := next(a)
		if !ok {
			t.Fatal("a worker holding a learn place got no rollout lease")
		}
		rollout(a, l)
	}
	lb := learnLease(b)

	// Both places are out: rollouts go on until the buffer holds 2 x 8
	// groups for each of this round's places and the next's: 32. (A third
	// worker asks: one that holds a lease is not told "idle", it asks
	// again after its result.)
	c := joinRLKey(g, protocol.KindNative, true, j.ID, "rl-sync-volunteer-key-c")
	given := 0
	for given < 100 {
		l, ok := next(c)
		if !ok {
			break
		}
		rollout(c, l)
		given++
	}
	if _, _, buffered := view(); buffered != 32 || given != 32 {
		t.Fatalf("with the round's places out: %d rollouts given, %d groups buffered; want 32 and 32", given, buffered)
	}

	// The round closes on its second learn result, not its first.
	a.send(g.computedRL(m, la))
	if ack := a.ack(la.ID); !ack.Accepted || ack.Staleness != 0 {
		t.Fatalf("a's learn result: %+v; want accepted at staleness 0", ack)
	}
	if v, applied, _ := view(); v != 0 || applied != 1 {
		t.Fatalf("one learn result of a round of two: version %d, %d applied; want 0 and 1", v, applied)
	}
	// a's place stays used: no third learn lease in a round of two (its
	// result would come back late, its groups thrown away), and with
	// the buffer full no rollout either.
	if l, ok := next(a); ok {
		t.Fatalf("round 1 with both places used and 32 groups buffered: lease %d (learn %v, round %d); want none", l.ID, l.Learn != nil, l.Round)
	}
	b.send(g.computedRL(m, lb))
	if ack := b.ack(lb.ID); !ack.Accepted {
		t.Fatalf("b's learn result: %s: %s", ack.Reason, ack.Detail)
	}
	if v, applied, _ := view(); v != 1 || applied != 2 {
		t.Fatalf("the round's two learn results: version %d, %d applied; want 1 and 2", v, applied)
	}
	// Round 2 is open, with groups buffered for its learn leases.
	if l, ok := next(a); !ok || l.Learn == nil || l.Round != 2 || l.BaseVersion != 1 {
		t.Fatalf("after round 1: lease %+v (ok %v); want a learn lease of round 2 at version 1", l, ok)
	}
}

// rlNext asks for one lease; ok is false when the coordinator has none
// (it says idle).
func rlNext(rc *rawClient) (protocol.Lease, bool) {
	rc.t.Helper()
	rc.send(&protocol.Want{N: 1})
	for {
		switch m := rc.read().(type) {
		case *protocol.Lease:
			return *m, true
		case *protocol.Idle:
			return protocol.Lease{}, false
		}
	}
}

// rlRollout answers rollout lease l of one-digit sums with half its
// completions right (a group whose rewards differ: GRPO keeps it).
func rlRollout(rc *rawClient, l protocol.Lease) {
	rc.t.Helper()
	if l.Rollout == nil || l.Learn != nil || l.Round != 0 {
		rc.t.Fatalf("lease %d: rollout %v, learn %v, round %d; want a rollout lease outside the rounds", l.ID, l.Rollout != nil, l.Learn != nil, l.Round)
	}
	operands := strings.Split(strings.TrimSuffix(strings.TrimPrefix(rljob.Text(l.Rollout.Prompt), "\n"), "="), "+")
	x, _ := strconv.Atoi(operands[0])
	y, _ := strconv.Atoi(operands[1])
	right := strconv.Itoa(x+y) + "\n"
	rc.send(rollouts(l, right, "?\n", right, "?\n"))
	if ack := rc.ack(l.ID); !ack.Accepted {
		rc.t.Fatalf("rollouts of lease %d refused: %s: %s", l.ID, ack.Reason, ack.Detail)
	}
}

// An RL job in mode diloco: a learn lease is a place in a round that
// carries local_steps times 8 groups, the local steps and the inner
// optimizer; the worker returns the delta of those steps (compute's
// learn), and the round's step averages round_size of them into one
// version with the outer optimizer.
func TestRLDiLoCoLearnLeasesTakeLocalSteps(t *testing.T) {
	g, j := rlGrid(t, "mode: diloco\nlocal_steps: 2\nround_size: 2\nspot_check: 0\n")
	ms, _ := nn.Preset("charlm-tiny")
	m, err := nn.NewModel(ms)
	if err != nil {
		t.Fatal(err)
	}
	a := joinRLKey(g, protocol.KindNative, true, j.ID, "rl-diloco-volunteer-key-a")
	b := joinRLKey(g, protocol.KindNative, true, j.ID, "rl-diloco-volunteer-key-b")
	var learn []protocol.Lease
	for _, rc := range []*rawClient{a, b} {
		for {
			l, ok := rlNext(rc)
			if !ok {
				t.Fatal("no lease while the buffer fills")
			}
			if l.Learn != nil {
				if l.Round != 1 || l.Learn.Steps != 2 || l.Learn.Inner == nil || len(l.Learn.Groups) != 16 {
					t.Fatalf("learn lease: round %d, steps %d, inner %v, %d groups; want round 1, 2 steps, the inner optimizer, 16 groups",
						l.Round, l.Learn.Steps, l.Learn.Inner, len(l.Learn.Groups))
				}
				learn = append(learn, l)
				break
			}
			rlRollout(rc, l)
		}
	}
	version := func() int64 {
		v, _, err := g.srv.JobView(context.Background(), j.ID)
		if err != nil {
			t.Fatal(err)
		}
		return v.Version
	}
	for i, rc := range []*rawClient{a, b} {
		rc.send(g.computedRL(m, learn[i]))
		if ack := rc.ack(learn[i].ID); !ack.Accepted {
			t.Fatalf("learn result %d: %s: %s", i, ack.Reason, ack.Detail)
		}
		if got, want := version(), int64(i); got != want {
			t.Fatalf("after %d learn results of a round of 2: version %d, want %d", i+1, got, want)
		}
	}
}

// A learn lease carries at most protocol.MaxLearnGroups groups: an RL job
// in mode diloco with more local steps than that holds (eight groups a
// step) is refused on local_steps, and no job is created.
func TestRLDiLoCoRefusesMoreLocalStepsThanALeaseCarries(t *testing.T) {
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) { c.LoadData = dataset.Load })
	policy := nntest.RandomSafetensors(t, t.TempDir(), "charlm-tiny", 3)
	spec, err := jobspec.Parse([]byte(fmt.Sprintf("name: rl\nkind: rl\nmodel: charlm-tiny\npolicy: %q\ntask: {type: add, digits: 1}\nmode: diloco\nlocal_steps: %d\n",
		policy, protocol.MaxLearnGroups/8+1)))
	if err != nil {
		t.Fatal(err)
	}
	_, err = g.srv.AddJob(spec)
	var se *jobspec.Error
	if !errors.As(err, &se) || se.Key != "local_steps" || !strings.Contains(se.Problem, "give at most 128") {
		t.Errorf("local_steps %d: %v; want an error on local_steps saying at most 128", protocol.MaxLearnGroups/8+1, err)
	}
}

// An RL job in async DiLoCo: a learn lease carries local_steps times 8
// groups, the local steps and the inner optimizer, and takes no round
// (round 0); its delta is applied as soon as it comes, one version each,
// through the delayed Nesterov outer step.
func TestRLAsyncDiLoCoAppliesEachLearnDelta(t *testing.T) {
	g, j := rlGrid(t, "mode: diloco\nasync_diloco: true\nlocal_steps: 2\nspot_check: 0\n")
	ms, _ := nn.Preset("charlm-tiny")
	m, err := nn.NewModel(ms)
	if err != nil {
		t.Fatal(err)
	}
	a := joinRLKey(g, protocol.KindNative, true, j.ID, "rl-async-diloco-volunteer-key-a")
	version := func() int64 {
		v, _, err := g.srv.JobView(context.Background(), j.ID)
		if err != nil {
			t.Fatal(err)
		}
		return v.Version
	}
	learned := 0
	for i := 0; learned < 2; i++ {
		if i > 100 {
			t.Fatalf("%d learn leases after 100 leases", learned)
		}
		l, ok := rlNext(a)
		if !ok {
			t.Fatal("no lease while the buffer fills")
		}
		if l.Learn == nil {
			rlRollout(a, l)
			continue
		}
		if l.Round != 0 || l.Learn.Steps != 2 || l.Learn.Inner == nil || len(l.Learn.Groups) != 16 {
			t.Fatalf("learn lease: round %d, steps %d, inner %v, %d groups; want no round, 2 steps, the inner optimizer, 16 groups",
				l.Round, l.Learn.Steps, l.Learn.Inner, len(l.Learn.Groups))
		}
		before := version()
		a.send(g.computedRL(m, l))
		if ack := a.ack(l.ID); !ack.Accepted {
			t.Fatalf("learn result: %s: %s", ack.Reason, ack.Detail)
		}
		if got := version(); got != before+1 {
			t.Fatalf("a learn delta moved the policy from version %d to %d; want one version at once", before, got)
		}
		learned++
	}
}
