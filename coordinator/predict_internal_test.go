package coordinator

import (
	"math"
	"testing"

	"github.com/crowdtrain/crowdtrain/jobspec"
)

// The smoothed staleness that weight prediction uses follows the applied
// results, and a relay's aggregate of many results counts as that many
// in one step, however many it claims.
func TestPredictedStalenessFollowsTheResults(t *testing.T) {
	j := &Job{}
	for range 200 {
		j.observeStaleness(1, 1)
	}
	if s := j.st.predictStaleness; s < 0.99 || s > 1 {
		t.Fatalf("after 200 results at staleness 1: %.4f, want about 1", s)
	}
	j.observeStaleness(3, 1_000_000_000)
	if s := j.st.predictStaleness; s != 3 {
		t.Fatalf("after an aggregate of 1e9 results at staleness 3: %.4f, want 3", s)
	}
}

// The snapshot of an async job reaches predictGain times the smoothed
// staleness past the model along its last step; a lone worker's (no
// staleness) is the model itself, and rounds are never predicted.
func TestSnapshotReachesPastTheLandingPoint(t *testing.T) {
	for _, c := range []struct {
		mode      string
		staleness float64
		want      float32 // the snapshot's value where the model moved 0.5 -> 1
	}{
		{jobspec.ModeAsync, 0, 1},
		{jobspec.ModeAsync, 1, 1 + predictGain*0.5},
		{jobspec.ModeAsync, 0.5, 1 + predictGain*0.25},
		{jobspec.ModeSync, 1, 1},
	} {
		j := &Job{}
		j.st.spec.Mode = c.mode
		// Over more than one of the blocks the prediction is made in.
		n := 2*predictBlock + 5
		j.st.model.Params = make([]float32, n)
		for i := range n {
			j.st.model.Params[i] = 7
		}
		j.st.model.Params[0], j.st.model.Params[n-1] = 0.5, 0.5
		j.st.model.Version = 3
		snapshot := func() (got []float32) {
			j.snapshotParams(func(b []float32) { got = append(got, b...) })
			return got
		}
		snapshot() // version 3 is published: the step's start
		j.st.model.Params[0], j.st.model.Params[n-1] = 1, 1
		j.st.model.Version = 4
		j.st.predictStaleness = c.staleness
		got := snapshot()
		if len(got) != n || got[0] != c.want || got[n-1] != c.want || got[1] != 7 || got[predictBlock+1] != 7 {
			t.Errorf("%s at staleness %.1f: snapshot of %d values, [0] %v, [1] %v, [%d] %v, last %v; want %d, %v, 7, 7, %v",
				c.mode, c.staleness, len(got), got[0], got[1], predictBlock+1, got[predictBlock+1], got[len(got)-1], n, c.want, c.want)
		}
		if j.st.model.Params[0] != 1 {
			t.Errorf("%s: the model itself moved to %v", c.mode, j.st.model.Params[0])
		}
	}
}

// A snapshot with a NaN or Inf is never published: encodeSnapshot finds
// the first one, in whichever block of the prediction it falls, and says
// which value it is, with and without prediction.
func TestEncodeSnapshotFindsTheFirstNonFinite(t *testing.T) {
	for _, staleness := range []float64{0, 1} {
		j := &Job{}
		j.st.spec.Mode = jobspec.ModeAsync
		n := 3 * predictBlock
		j.st.model.Params = make([]float32, n)
		j.st.model.Version = 1
		if _, bad, _ := j.encodeSnapshot(); bad != -1 {
			t.Fatalf("staleness %v: a finite model flagged at %d", staleness, bad)
		}
		j.st.model.Params[predictBlock+3] = float32(math.Inf(-1))
		j.st.model.Params[2*predictBlock] = float32(math.NaN())
		j.st.model.Version = 2
		j.st.predictStaleness = staleness
		body, bad, value := j.encodeSnapshot()
		if bad != predictBlock+3 || !math.IsInf(float64(value), -1) {
			t.Errorf("staleness %v: first non-finite at %d (%v), want %d (-Inf)", staleness, bad, value, predictBlock+3)
		}
		if len(body) != 4*n {
			t.Errorf("staleness %v: body of %d bytes, want %d", staleness, len(body), 4*n)
		}
	}
}
