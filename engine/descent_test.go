package engine

import (
	"slices"
	"testing"
	"time"
)

// climbing leaves out a round's cluster of results that climb on the
// held-out batch, apart from the descending ones; never an honest tail
// below zero that is one continuum with the rest, a round whose climbing
// results are the majority, or a copy of a mean. The score sets are
// rounds measured on mnist-mlp in DiLoCo with 4 sign-flippers among 9
// volunteers (engine/descent.go).
func TestClimbingLeavesOutTheFlippedCluster(t *testing.T) {
	eight := []int{1, 2, 3, 4, 5, 6, 7, 8}
	for _, c := range []struct {
		name   string
		scores []float64
		origin []int
		want   []int // indices left out; nil: none
	}{
		{"round 2: four flipped of eight", []float64{0.0368, -0.0401, -0.0395, 0.0379, 0.0371, -0.0414, 0.0385, -0.0404}, eight, []int{1, 2, 5, 7}},
		{"round 7: two flipped", []float64{0.0217, 0.0223, -0.0226, 0.0217, -0.0234, 0.0227, 0.0221, 0.0222}, eight, []int{2, 4}},
		{"near the target, honest: a tail below zero", []float64{0.0019, 0.0022, -0.0007, -0.00001, -0.0024, 0.0060, -0.0012, -0.0028}, eight, nil},
		{"near the target, honest: one far below", []float64{0.0061, 0.0083, 0.0049, -0.0108, 0.0032, 0.0024, -0.0026, 0.0075}, eight, nil},
		{"round 1: all but one climb", []float64{-0.0262, -0.0259, -0.0252, -0.0248, -0.0260, -0.0264, -0.0251, 0.0254}, eight, nil},
		{"nothing descends", []float64{-0.01, -0.02, -0.03}, []int{1, 2, 3}, nil},
		{"a relay's mean climbing beside honest ones", []float64{0.03, 0.031, 0.029, -0.03}, []int{1, 2, 3, noOrigin}, nil},
		{"two results: too few to judge", []float64{0.03, -0.03}, []int{1, 2}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := climbing(c.scores, c.origin)
			var got []int
			for k, o := range out {
				if o {
					got = append(got, k)
				}
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("left out %v, want %v", got, c.want)
			}
		})
	}
}

// A DiLoCo round with Descent leaves the climbing results out of its
// aggregate and counts them in Climbing: the step is the mean of the
// descending ones alone. Without Descent all are averaged.
func TestRoundsLeaveClimbingResultsOut(t *testing.T) {
	const n = 64
	honest := make([]float32, n)
	for i := range honest {
		honest[i] = 1
	}
	flipped := make([]float32, n)
	for i := range flipped {
		flipped[i] = -1
	}
	for _, descent := range []bool{true, false} {
		r := NewRounds(6, 0, time.Minute, n)
		r.Robust = Robust{Method: RobustCenteredClip, Tau: 100, Iterations: 3, Bucket: 1}
		if descent {
			// The held-out batch's verdict: honest results descend
			// (by a little more each, as real ones spread), the
			// flipped ones climb.
			r.Descent = func(u []float32) float64 { return float64(u[0]) * (0.03 + 0.0001*float64(u[1])) }
		}
		round, _ := r.Lease(time.Time{})
		for k := range 6 {
			u := slices.Clone(honest)
			if k%3 == 2 {
				u = slices.Clone(flipped)
			}
			u[1] = float32(k)
			if d := r.Offer(Contribution{Update: u, Round: round}); !d.Accepted {
				t.Fatalf("offer %d: %+v", k, d)
			}
		}
		s, ok := r.Ready(time.Time{})
		if !ok {
			t.Fatal("the round did not close")
		}
		switch {
		case descent && (r.Climbing != 2 || s.Update[0] != 1):
			t.Errorf("with Descent: %d left out, step %v; want the 2 flipped out and a step of 1", r.Climbing, s.Update[0])
		case !descent && (r.Climbing != 0 || s.Update[0] > 0.5):
			t.Errorf("without Descent: %d left out, step %v; want none out and the flipped pulling the step down", r.Climbing, s.Update[0])
		}
	}
}
