package coordinator

import "testing"

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
