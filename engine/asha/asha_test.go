package asha

import (
	"math"
	"slices"
	"testing"
)

func TestPromotionNeedsTheBestThird(t *testing.T) {
	a := &ASHA{Rungs: []int64{100, 300}, Reduction: 3, Maximize: true}
	trials := []Trial{
		{ID: "a", State: Waiting, Metrics: []float64{0.9}},
		{ID: "b", State: Waiting, Metrics: []float64{0.5}},
		{ID: "c", State: Running},
	}
	// Two of three at the rung: floor(2/3) = 0 may go on, and c may
	// still beat them: nothing is decided.
	if p, s := a.Decide(trials); len(p) != 0 || len(s) != 0 {
		t.Fatalf("promote %v stop %v with the rung incomplete", p, s)
	}
	trials[2] = Trial{ID: "c", State: Waiting, Metrics: []float64{0.7}}
	p, s := a.Decide(trials)
	if !slices.Equal(p, []string{"a"}) || !slices.Equal(s, []string{"c", "b"}) {
		t.Fatalf("promote %v stop %v, want a on and b, c stopped", p, s)
	}
}

func TestAsynchronousPromotion(t *testing.T) {
	a := &ASHA{Rungs: []int64{100}, Reduction: 2, Maximize: false} // loss: lower is better
	var trials []Trial
	for i, loss := range []float64{2.0, 1.0, 3.0, 0.5} {
		trials = append(trials, Trial{ID: string(rune('a' + i)), State: Waiting, Metrics: []float64{loss}})
	}
	trials = append(trials, Trial{ID: "e", State: Running}, Trial{ID: "f", State: Running})
	// 4 of 6 reached: floor(4/2) = 2 go on now (d and b); the others wait
	// for e and f.
	p, s := a.Decide(trials)
	if !slices.Equal(p, []string{"d", "b"}) || len(s) != 0 {
		t.Fatalf("promote %v stop %v", p, s)
	}
}

func TestFailedTrialsRankLast(t *testing.T) {
	a := &ASHA{Rungs: []int64{100}, Reduction: 2, Maximize: true}
	p, s := a.Decide([]Trial{
		{ID: "nan", State: Waiting, Metrics: []float64{math.NaN()}},
		{ID: "ok", State: Waiting, Metrics: []float64{0.1}},
		{ID: "gone", State: Ended}, // ended before the rung: not counted
	})
	if !slices.Equal(p, []string{"ok"}) || !slices.Equal(s, []string{"nan"}) {
		t.Fatalf("promote %v stop %v", p, s)
	}
}

// Eight trials of known learning curves, run in lockstep: ASHA keeps the
// best and spends well under half of the full budget.
func TestASHAFindsTheBestCheaply(t *testing.T) {
	final := []float64{0.90, 0.95, 0.80, 0.97, 0.93, 0.85, 0.96, 0.70}
	curve := func(i int, e float64) float64 { return final[i] * (1 - math.Exp(-e/20000)) }
	const budget = 90000
	a := &ASHA{Rungs: []int64{10000, 30000}, Reduction: 3, Maximize: true}
	trials := make([]Trial, len(final))
	seen := make([]int64, len(final))
	for i := range trials {
		trials[i] = Trial{ID: string(rune('a' + i)), State: Running}
	}
	for step := int64(0); ; step += 1000 {
		busy := false
		for i := range trials {
			t := &trials[i]
			if t.State != Running {
				continue
			}
			busy = true
			seen[i] += 1000
			if r, ok := a.Next(len(t.Metrics)); ok && seen[i] >= r {
				t.Metrics = append(t.Metrics, curve(i, float64(seen[i])))
				t.State = Waiting
			} else if seen[i] >= budget {
				t.State = Ended
			}
		}
		p, s := a.Decide(trials)
		for i := range trials {
			if slices.Contains(p, trials[i].ID) {
				trials[i].State = Running
			}
			if slices.Contains(s, trials[i].ID) {
				trials[i].State = Stopped
			}
		}
		if !busy && len(p) == 0 {
			break
		}
	}
	var total int64
	best := -1
	for i := range trials {
		total += seen[i]
		if trials[i].State == Ended && (best < 0 || final[i] > final[best]) {
			best = i
		}
	}
	if best != 3 {
		t.Errorf("the trial run to the end with the best metric is %d (final %v), want 3", best, final[best])
	}
	if frac := float64(total) / (budget * 8); frac > 0.4 {
		t.Errorf("spent %.0f%% of the full budget, want at most 40%%", 100*frac)
	}
}
