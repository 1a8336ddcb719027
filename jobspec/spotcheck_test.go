package jobspec

import (
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/engine"
)

func TestSpotCheckKeys(t *testing.T) {
	s, err := Parse([]byte("name: t\nmodel: mnist-mlp\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s.SpotCheck != engine.DefaultSpotCheckRate || s.SpotCheckStrikes != engine.DefaultSpotCheckStrikes || s.SpotCheckTolerance != engine.DefaultSpotCheckTolerance {
		t.Fatalf("defaults: %v %v %v", s.SpotCheck, s.SpotCheckStrikes, s.SpotCheckTolerance)
	}
	s, err = Parse([]byte("name: t\nmodel: mnist-mlp\nspot_check: 0\nspot_check_strikes: 5\nspot_check_tolerance: 0.001\n"))
	if err != nil || s.SpotCheck != 0 || s.SpotCheckStrikes != 5 || s.SpotCheckTolerance != 0.001 {
		t.Fatalf("given: %+v %v", s, err)
	}
	for bad, key := range map[string]string{
		"spot_check: 1.5":           "spot_check",
		"spot_check: -0.1":          "spot_check",
		"spot_check: .nan":          "spot_check",
		"spot_check_strikes: 0":     "spot_check_strikes",
		"spot_check_tolerance: 0":   "spot_check_tolerance",
		"spot_check_tolerance: 2":   "spot_check_tolerance",
		"spot_check: [0.1]":         "spot_check",
		"spot_check_strikes: three": "spot_check_strikes",
	} {
		_, err := Parse([]byte("name: t\nmodel: mnist-mlp\n" + bad + "\n"))
		if err == nil || !strings.Contains(err.Error(), key+":") {
			t.Errorf("%s: got %v, want an error naming %s", bad, err, key)
		}
	}
	// A spec stored before the keys existed keeps spot checks off.
	var old Spec
	if err := old.UnmarshalJSON([]byte(`{"name":"t","mode":"async"}`)); err != nil {
		t.Fatal(err)
	}
	if old.SpotCheck != 0 || old.SpotCheckStrikes != engine.DefaultSpotCheckStrikes || old.SpotCheckTolerance != engine.DefaultSpotCheckTolerance {
		t.Fatalf("old spec: %v %v %v", old.SpotCheck, old.SpotCheckStrikes, old.SpotCheckTolerance)
	}
}
