package engine

import (
	"math"
	"slices"
	"testing"
	"time"
)

// climbing leaves out a round's cluster of results that climb on the
// held-out batch, apart from the descending ones; never an honest tail
// below zero that is one continuum with the rest, or a copy of a mean.
// A climbing majority is marked as such (the round's mean decides) and
// only when every other result descends and both clusters stand apart.
// The score sets are rounds measured on mnist-mlp in DiLoCo with 4
// sign-flippers among 9 volunteers (engine/descent.go).
func TestClimbingLeavesOutTheFlippedCluster(t *testing.T) {
	eight := []int{1, 2, 3, 4, 5, 6, 7, 8}
	for _, c := range []struct {
		name   string
		scores []float64
		origin []int
		want   []int // indices left out; nil: none
		most   bool  // the left out are the majority
	}{
		{"round 2: four flipped of eight", []float64{0.0368, -0.0401, -0.0395, 0.0379, 0.0371, -0.0414, 0.0385, -0.0404}, eight, []int{1, 2, 5, 7}, false},
		{"round 7: two flipped", []float64{0.0217, 0.0223, -0.0226, 0.0217, -0.0234, 0.0227, 0.0221, 0.0222}, eight, []int{2, 4}, false},
		{"near the target, honest: a tail below zero", []float64{0.0019, 0.0022, -0.0007, -0.00001, -0.0024, 0.0060, -0.0012, -0.0028}, eight, nil, false},
		{"near the target, honest: one far below", []float64{0.0061, 0.0083, 0.0049, -0.0108, 0.0032, 0.0024, -0.0026, 0.0075}, eight, nil, false},
		{"round 1: all but one climb", []float64{-0.0262, -0.0259, -0.0252, -0.0248, -0.0260, -0.0264, -0.0251, 0.0254}, eight, []int{0, 1, 2, 3, 4, 5, 6}, true},
		{"a climbing majority beside ones that do not all descend", []float64{-0.0262, -0.0259, -0.0252, -0.0248, -0.0260, 0.0254, -0.0001}, []int{1, 2, 3, 4, 5, 6, 7}, nil, false},
		{"a climbing majority spread as wide as its gap", []float64{-0.004, -0.012, -0.020, -0.028, -0.036, 0.010}, []int{1, 2, 3, 4, 5, 6}, nil, false},
		{"nothing descends", []float64{-0.01, -0.02, -0.03}, []int{1, 2, 3}, nil, false},
		{"a relay's mean climbing beside honest ones", []float64{0.03, 0.031, 0.029, -0.03}, []int{1, 2, 3, noOrigin}, nil, false},
		{"a round of three, honest noise near the target", []float64{0.0018, -0.0037, 0.0022}, []int{1, 2, 3}, nil, false},
		{"a round of four, one flipped: three kept are too few to tell a spread", []float64{0.03, 0.031, 0.029, -0.03}, []int{1, 2, 3, 4}, nil, false},
		{"two results: too few to judge", []float64{0.03, -0.03}, []int{1, 2}, nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, most := climbing(c.scores, c.origin)
			var got []int
			for k, o := range out {
				if o {
					got = append(got, k)
				}
			}
			if !slices.Equal(got, c.want) || most != c.most {
				t.Errorf("left out %v (majority %v), want %v (majority %v)", got, most, c.want, c.most)
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

// When the climbing results are most of a round, the round's mean
// decides: sign-flippers that took a round's places (its mean climbs)
// are left out and the step is the honest minority's; an honest round
// whose results mostly climb a little on the batch, but whose mean
// descends, is applied whole.
func TestRoundsLeaveAClimbingMajorityOutOnlyWhenTheirMeanClimbs(t *testing.T) {
	const n = 64
	for _, c := range []struct {
		name     string
		majority float32 // the climbing results' first value
		wantOut  int64
		wantStep float32
	}{
		{"flipped: the mean climbs", -1, 5, 1},
		{"honest noise: the mean descends", 0.9, 0, (5*0.9 + 1) / 6},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := NewRounds(6, 0, time.Minute, n)
			r.Robust = Robust{Method: RobustCenteredClip, Tau: 100, Iterations: 3, Bucket: 1}
			// A result's score on the batch: its marker u[1] says
			// whether it climbs (-1) or descends (1); the mean's (a
			// marker between), its first value.
			r.Descent = func(u []float32) float64 {
				if u[1] != 1 && u[1] != -1 {
					return float64(u[0]) - 0.5 // the mean: it descends when most of it is the honest direction
				}
				return 0.03 * float64(u[1]) * (1 + 0.001*float64(u[2]))
			}
			round, _ := r.Lease(time.Time{})
			for k := range 6 {
				u := make([]float32, n)
				for i := range u {
					u[i] = 1
				}
				u[1], u[2] = 1, float32(k)
				if k < 5 {
					for i := range u {
						u[i] = c.majority
					}
					u[1], u[2] = -1, float32(k)
				}
				if d := r.Offer(Contribution{Update: u, Round: round}); !d.Accepted {
					t.Fatalf("offer %d: %+v", k, d)
				}
			}
			s, ok := r.Ready(time.Time{})
			if !ok {
				t.Fatal("the round did not close")
			}
			if r.Climbing != c.wantOut || math.Abs(float64(s.Update[0]-c.wantStep)) > 1e-5 {
				t.Errorf("%d left out, step %v; want %d out and a step of %v", r.Climbing, s.Update[0], c.wantOut, c.wantStep)
			}
		})
	}
}
