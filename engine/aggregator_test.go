package engine

import (
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/crowdtrain/crowdtrain/nn"
)

func vec(v ...float32) []float32 { return v }

func near(t *testing.T, what string, got []float32, want []float64) {
	t.Helper()
	for i := range want {
		if math.Abs(float64(got[i])-want[i]) > 1e-5 {
			t.Fatalf("%s: got %v, want %v", what, got, want)
		}
	}
}

// A sync round leases K+b tasks, closes on the K-th result with their
// mean, and rejects the backup's result as late.
func TestSyncRoundClosesAtKAndRejectsLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := NewRounds(2, 1, time.Minute, 2)
		var rounds []uint64
		for range 3 {
			round, ok := r.Lease(time.Now())
			if !ok {
				t.Fatal("round refused one of its K+b leases")
			}
			rounds = append(rounds, round)
		}
		if _, ok := r.Lease(time.Now()); ok {
			t.Fatal("round leased more than K+b tasks")
		}
		if d := r.Offer(Contribution{Update: vec(1, 2), Round: rounds[0]}); !d.Accepted {
			t.Fatalf("first result: %+v", d)
		}
		if _, ok := r.Ready(time.Now()); ok {
			t.Fatal("round stepped with 1 of K=2 results")
		}
		if d := r.Offer(Contribution{Update: vec(3, 6), Round: rounds[1]}); !d.Accepted {
			t.Fatalf("second result: %+v", d)
		}
		s, ok := r.Ready(time.Now())
		if !ok || s.Results != 2 || s.Round != 1 {
			t.Fatalf("round did not close at K: %+v %v", s, ok)
		}
		near(t, "the round's step", s.Update, []float64{2, 4})
		d := r.Offer(Contribution{Update: vec(100, 100), Round: rounds[2]})
		if d.Accepted || d.Reason != ReasonLate {
			t.Fatalf("the backup's result after the round closed: %+v, want rejected late", d)
		}
		if round, ok := r.Lease(time.Now()); !ok || round != 2 {
			t.Fatalf("next round: %d %v", round, ok)
		}
	})
}

// A round whose results do not reach K closes at round_timeout with what
// it has, counted from its first lease.
func TestRoundTimesOutWithFewerThanK(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := NewRounds(3, 0, 10*time.Second, 1)
		round, _ := r.Lease(time.Now())
		r.Lease(time.Now())
		r.Lease(time.Now())
		time.Sleep(4 * time.Second)
		r.Offer(Contribution{Update: vec(5), Round: round})
		if _, ok := r.Ready(time.Now()); ok {
			t.Fatal("stepped before the timeout")
		}
		if got := r.WaitUntil(); !got.Equal(time.Now().Add(6 * time.Second)) {
			t.Fatalf("WaitUntil %v, want the first lease + 10s", got)
		}
		time.Sleep(6 * time.Second)
		s, ok := r.Ready(time.Now())
		if !ok || s.Results != 1 {
			t.Fatalf("no step at round_timeout with 1 of 3 results: %+v %v", s, ok)
		}
		near(t, "step", s.Update, []float64{5})
		// An empty round never steps, however long it waits.
		r.Lease(time.Now())
		time.Sleep(time.Hour)
		if _, ok := r.Ready(time.Now()); ok {
			t.Fatal("an empty round stepped")
		}
	})
}

// DiLoCo: a round of M deltas, averaged, stepped by outer Nesterov
// (lr 0.7, momentum 0.9): checked against the rule written out by hand,
// over two rounds so the momentum matters.
func TestDiLoCoOuterStepIsNesterovOnTheMean(t *testing.T) {
	opt, err := nn.NewOptimizer(nn.OptimizerSpec{Type: nn.OptMomentum, LR: 0.7, Momentum: 0.9, Nesterov: true}, 2)
	if err != nil {
		t.Fatal(err)
	}
	m := Model{Params: vec(1, -1), Opt: opt, LRScale: 1}
	r := NewRounds(2, 0, time.Minute, 2)
	now := time.Unix(0, 0)
	deltas := [][2][]float32{{vec(0.2, 0.4), vec(0.4, 0)}, {vec(-0.2, 0.2), vec(0, 0.2)}}
	// By hand: g = mean of the deltas; v = 0.9 v + g; w -= 0.7 (g + 0.9 v).
	w, v := []float64{1, -1}, []float64{0, 0}
	for i, round := range deltas {
		for _, d := range round {
			rd, _ := r.Lease(now)
			if dec := r.Offer(Contribution{Update: d, Round: rd}); !dec.Accepted {
				t.Fatal(dec)
			}
		}
		s, ok := r.Ready(now)
		if !ok {
			t.Fatalf("round %d did not close", i+1)
		}
		m.Apply(s)
		for k := range w {
			g := (float64(round[0][k]) + float64(round[1][k])) / 2
			v[k] = 0.9*v[k] + g
			w[k] -= 0.7 * (g + 0.9*v[k])
		}
		near(t, "parameters after the outer step", m.Params, w)
	}
	if m.Version != 2 {
		t.Fatalf("version %d after two rounds", m.Version)
	}
}

// Delayed Nesterov: results step without momentum in between; the
// momentum moves, and is applied, only on every N-th result.
func TestDelayedNesterovAppliesMomentumOnceEveryN(t *testing.T) {
	const n, lr, mu = 3, 0.5, 0.9
	o, err := nn.NewDelayedNesterov(lr, mu, n, 1)
	if err != nil {
		t.Fatal(err)
	}
	m := Model{Params: vec(0), Opt: o, LRScale: 1}
	a := &Async{MaxStaleness: 100}
	w, mom, buf := 0.0, 0.0, 0.0
	for i := 1; i <= 3*n; i++ {
		g := float32(i)
		a.Offer(Contribution{Update: vec(g)})
		s, _ := a.Ready(time.Time{})
		m.Apply(s)
		state, _ := o.State()
		w -= lr * float64(g) / n
		buf += float64(g)
		if i%n == 0 {
			mom = mu*mom + buf/n
			w -= lr * mu * mom
			buf = 0
		}
		near(t, "parameters", m.Params, []float64{w})
		near(t, "momentum", state[0], []float64{mom})
	}
}

// Async rejects what is staler than max_staleness and scales by
// 1/(1+s) when asked.
func TestAsyncStaleness(t *testing.T) {
	a := &Async{MaxStaleness: 2, InverseStaleness: true}
	if d := a.Offer(Contribution{Update: vec(1), Staleness: 3}); d.Accepted || d.Reason != ReasonStale {
		t.Fatalf("staleness 3 > 2: %+v", d)
	}
	if _, ok := a.Ready(time.Time{}); ok {
		t.Fatal("a rejected result stepped")
	}
	a.Offer(Contribution{Update: vec(1), Staleness: 1})
	if s, ok := a.Ready(time.Time{}); !ok || s.Scale != 0.5 {
		t.Fatalf("step %+v %v, want scale 1/2", s, ok)
	}
}

// A partial round survives Partial/Restore (a checkpoint) intact.
func TestPartialRoundRestores(t *testing.T) {
	r := NewRounds(3, 0, time.Minute, 2)
	round, _ := r.Lease(time.Unix(0, 0))
	r.Offer(Contribution{Update: vec(1, 2), Round: round})
	p := r.Partial()
	p.Sum = append([]float32(nil), p.Sum...)
	back := NewRounds(3, 0, time.Minute, 2)
	if err := back.Restore(p); err != nil {
		t.Fatal(err)
	}
	for _, u := range [][]float32{vec(2, 2), vec(3, 2)} {
		rd, _ := back.Lease(time.Unix(0, 0))
		back.Offer(Contribution{Update: u, Round: rd})
	}
	s, ok := back.Ready(time.Unix(0, 0))
	if !ok || s.Results != 3 {
		t.Fatalf("restored round: %+v %v", s, ok)
	}
	near(t, "mean with the restored result", s.Update, []float64{2, 2})
	if err := back.Restore(Partial{Round: 1, Results: 4, Sum: vec(1, 1)}); err == nil {
		t.Fatal("restored a round with more results than its size")
	}
}

// A relay's sum of k results in async is taken as k steps of the
// optimizer on their mean, one version: with Adam, as many steps as the
// results would have made one by one, not one step of the sum.
func TestAsyncRelaySumIsKStepsOfItsMean(t *testing.T) {
	newModel := func() *Model {
		opt, err := nn.NewOptimizer(nn.OptimizerSpec{Type: nn.OptAdam, LR: 0.1}, 2)
		if err != nil {
			t.Fatal(err)
		}
		return &Model{Params: vec(0, 0), Opt: opt, LRScale: 1}
	}
	a := &Async{MaxStaleness: 8}
	sum := vec(4, -8) // four results whose mean is (1, -2)
	if d := a.Offer(Contribution{Update: sum, Results: 4}); !d.Accepted {
		t.Fatalf("refused: %+v", d)
	}
	if sum[0] != 4 || sum[1] != -8 {
		t.Fatalf("Offer changed the caller's sum: %v", sum)
	}
	s, ok := a.Ready(time.Time{})
	if !ok || s.Repeat != 4 || s.Results != 4 {
		t.Fatalf("step %+v, %v; want 4 repeats of 4 results", s, ok)
	}
	near(t, "the step's update", s.Update, []float64{1, -2})
	relayed := newModel()
	relayed.Apply(s)
	// The same four steps taken one by one on the mean.
	direct := newModel()
	for range 4 {
		direct.Apply(Step{Update: vec(1, -2), Scale: 1})
	}
	if relayed.Version != 1 || direct.Version != 4 {
		t.Fatalf("versions: relayed %d, want 1; direct %d", relayed.Version, direct.Version)
	}
	near(t, "parameters after the relay's aggregate", relayed.Params, []float64{float64(direct.Params[0]), float64(direct.Params[1])})
	if math.Abs(float64(relayed.Params[0])) < 0.3 {
		t.Fatalf("parameters %v: four Adam steps of rate 0.1 move each by about 0.4", relayed.Params)
	}
}
