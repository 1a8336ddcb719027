package coordinator

import (
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
		j.st.model.Params = []float32{0.5, 7}
		j.st.model.Version = 3
		j.snapshotParams() // version 3 is published: the step's start
		j.st.model.Params = []float32{1, 7}
		j.st.model.Version = 4
		j.st.predictStaleness = c.staleness
		got := j.snapshotParams()
		if got[0] != c.want || got[1] != 7 {
			t.Errorf("%s at staleness %.1f: snapshot %v, want [%v 7]", c.mode, c.staleness, got, c.want)
		}
		if j.st.model.Params[0] != 1 {
			t.Errorf("%s: the model itself moved to %v", c.mode, j.st.model.Params[0])
		}
	}
}
