package engine

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// colludingRound offers a round of DiLoCo-like deltas to r: honest ones,
// a shared direction plus each its own (pairwise cosine about shared²/
// (shared²+own²)), and colluders, one vector of their own plus a little
// noise each; relay, when above 0, adds one relay's sum of that many. It
// returns the colluders' own direction.
func colludingRound(t *testing.T, r *Rounds, rng *rand.Rand, n, honest, colluders, relay int, shared, own float64) []float32 {
	t.Helper()
	common := make([]float64, n)
	evil := make([]float64, n)
	for i := range common {
		common[i], evil[i] = rng.NormFloat64(), rng.NormFloat64()
	}
	round, _ := r.Lease(time.Time{})
	offer := func(u []float32, results int) {
		t.Helper()
		if d := r.Offer(Contribution{Update: u, Round: round, Results: results}); !d.Accepted {
			t.Fatalf("offer: %+v", d)
		}
	}
	for range honest {
		u := make([]float32, n)
		for i := range u {
			u[i] = float32(shared*common[i] + own*rng.NormFloat64())
		}
		offer(u, 0)
	}
	for range colluders {
		u := make([]float32, n)
		for i := range u {
			u[i] = float32(0.5*common[i] + evil[i] + 0.05*rng.NormFloat64())
		}
		offer(u, 0)
	}
	if relay > 0 {
		u := make([]float32, n)
		for i := range u {
			u[i] = float32(relay) * float32(shared*common[i]+own*rng.NormFloat64())
		}
		offer(u, relay)
	}
	out := make([]float32, n)
	for i, v := range evil {
		out[i] = float32(v)
	}
	return out
}

func cosine(a, b []float32) float64 { return dot(a, b) / math.Sqrt(dot(a, a)*dot(b, b)) }

// A DiLoCo round leaves out of its step the results far more alike each
// other than the round's others (three colluders among eight: each is
// inside the honest spread, together they would pull the step), and
// nothing from a round of honest results, however alike they all are (a
// first round's deltas share most of their direction), nor the copies
// of one relay's mean. Without Collusion the colluders stay in.
func TestRoundsLeaveColludingResultsOut(t *testing.T) {
	const n = 4096
	newRounds := func(collusion bool) *Rounds {
		r := NewRounds(8, 0, time.Minute, n)
		r.Robust = Robust{Method: RobustCenteredClip, Tau: 2, Iterations: 3, Bucket: 1}
		r.Collusion = collusion
		return r
	}
	for _, c := range []struct {
		name                     string
		honest, colluders, relay int
		shared, own              float64
		collusion                bool
		wantLeftOut              int64
	}{
		{"three colluders among eight", 5, 3, 0, 0.5, 1, true, 3},
		{"the same, without the check", 5, 3, 0, 0.5, 1, false, 0},
		{"a first round's honest deltas, cosine about 0.8", 8, 0, 0, 2, 1, true, 0},
		{"later honest deltas, cosine about 0.05", 8, 0, 0, 0.25, 1, true, 0},
		{"a relay's sum of three beside five", 5, 0, 3, 0.5, 1, true, 0},
		{"a relay's sum of three beside three colluders and two", 2, 3, 3, 0.5, 1, true, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRounds(c.collusion)
			rng := rand.New(rand.NewPCG(7, 8))
			evil := colludingRound(t, r, rng, n, c.honest, c.colluders, c.relay, c.shared, c.own)
			s, ok := r.Ready(time.Time{})
			if !ok {
				t.Fatal("the round did not close")
			}
			if r.Colluding != c.wantLeftOut {
				t.Errorf("%d results left out, want %d", r.Colluding, c.wantLeftOut)
			}
			if c.colluders == 0 {
				return
			}
			// The colluders' own direction in the step: none once they
			// are left out.
			cs := cosine(s.Update, evil)
			if c.collusion && cs > 0.05 {
				t.Errorf("the step's cosine with the colluders' direction is %.3f: they were not left out", cs)
			}
			if !c.collusion && cs < 0.2 {
				t.Errorf("without the check the step's cosine with the colluders' direction is %.3f: the test's colluders do not pull", cs)
			}
		})
	}
	if colluding([][]float32{{1, 0}, {1, 0}}, []int{1, 2}) != nil {
		t.Error("two results: nothing to compare with, want nil")
	}
	// Three honest deltas alike (cosine about 0.75, an early round) and
	// one pointing against their mean (IPM): half the round's pairs are
	// far apart, and the honest ones must still not look alike.
	rng := rand.New(rand.NewPCG(9, 10))
	common := make([]float64, n)
	for i := range common {
		common[i] = rng.NormFloat64()
	}
	held := make([][]float32, 4)
	for k := range 3 {
		held[k] = make([]float32, n)
		for i := range held[k] {
			held[k][i] = float32(1.7*common[i] + rng.NormFloat64())
		}
	}
	held[3] = make([]float32, n)
	for i := range held[3] {
		held[3][i] = -0.5 * (held[0][i] + held[1][i] + held[2][i]) / 3
	}
	if bad := colluding(held, []int{1, 2, 3, 4}); bad != nil {
		t.Errorf("three honest deltas and an IPM one: marked %v, want none", bad)
	}
	// A round of three (one attacker of four volunteers): two honest
	// deltas and one against their mean. The two honest ones are the
	// closest pair, and the round's majority: never left out.
	three := [][]float32{held[0], held[1], held[3]}
	if bad := colluding(three, []int{1, 2, 3}); bad != nil {
		t.Errorf("two honest deltas and an IPM one: marked %v, want none", bad)
	}
}
