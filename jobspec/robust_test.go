package jobspec

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestRobustKey(t *testing.T) {
	s, err := Parse([]byte("name: a\nmodel: mnist-mlp\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (Robust{Method: "centered_clip", Tau: 1.5, Iterations: 3, Bucket: 2}); s.Robust != want {
		t.Fatalf("default robust %+v, want %+v", s.Robust, want)
	}
	s, err = Parse([]byte("name: a\nmodel: mnist-mlp\nmode: sync\nround_size: 8\nrobust: {method: trimmed_mean, bucket: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Robust.Method != "trimmed_mean" || s.Robust.Trim != DefaultRobustTrim || s.Robust.Bucket != 1 {
		t.Fatalf("trimmed_mean read as %+v", s.Robust)
	}
	for _, c := range []struct{ spec, key, words string }{
		{"robust: {method: krum}\n", "robust", "centered_clip, trimmed_mean, median, none"},
		{"robust: {tau: -1}\n", "robust", "tau must be"},
		{"robust: {iterations: 1000}\n", "robust", "iterations must be 1 to 100"},
		{"robust: {method: trimmed_mean, trim: 0.6}\n", "robust", "trim must be"},
		{"robust: {bucket: -2}\n", "robust", "bucket must be"},
		{"robust: {radius: 3}\n", "robust.radius", "unknown key"},
		{"robust: centered_clip\n", "robust", "mapping"},
		{"robust: {tau: abc}\n", "robust", "abc"},
	} {
		_, err := Parse([]byte("name: a\nmodel: mnist-mlp\n" + c.spec))
		var se *Error
		if !errors.As(err, &se) || !strings.Contains(err.Error(), c.key) || !strings.Contains(err.Error(), c.words) {
			t.Errorf("%q: got %v, want an *Error naming %q and saying %q", c.spec, err, c.key, c.words)
		}
	}
	// A spec stored before the key existed gets the default.
	var old Spec
	if err := json.Unmarshal([]byte(`{"name":"x","mode":"async"}`), &old); err != nil {
		t.Fatal(err)
	}
	if old.Robust.Method != "centered_clip" {
		t.Fatalf("stored spec without robust read as %+v", old.Robust)
	}
}
