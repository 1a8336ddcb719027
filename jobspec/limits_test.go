package jobspec

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// Every key with an upper bound takes its limit and refuses one past it,
// in a submitted spec and, for a live key, in a patch of a running job;
// the refusal names the key and the limit.
func TestUpperBoundsNameTheKeyAndTheLimit(t *testing.T) {
	cases := []struct {
		key, at, over, limit string
		mode                 string // a mode where the key applies, "" for the default
	}{
		{"max_staleness", "1048576", "1048577", "1048576", ""},
		{"max_epochs", "1048576", "1048577", "1048576", ""},
		{"eval_every", "1073741824", "1073741825", "1073741824", ""},
		{"checkpoint_every", "1073741824", "1073741825", "1073741824", ""},
		{"max_update_norm_ratio", "1000000", "1000001", "1000000", ""},
		{"target_loss", "1000000", "1000001", "1e+06", ""},
		{"weight", "1000000", "1000001", "1e+06", ""},
		{"priority", "1000", "1001", "1000", ""},
		{"lease_timeout", "24h", "25h", "24h0m0s", ""},
		{"round_timeout", "24h", "25h", "24h0m0s", "mode: diloco\n"},
		{"relay_window", "10m", "11m", "10m0s", ""},
	}
	live := LiveKeys()
	for _, c := range cases {
		base := "name: a\nmodel: mnist-mlp\n" + c.mode
		if c.key == "target_loss" {
			base += "target_accuracy: 0\n"
		}
		if _, err := Parse([]byte(base + c.key + ": " + c.at + "\n")); err != nil {
			t.Errorf("%s: %s at the limit: %v", c.key, c.at, err)
		}
		_, err := Parse([]byte(base + c.key + ": " + c.over + "\n"))
		var se *Error
		if !errors.As(err, &se) || se.Key != c.key || !strings.Contains(se.Problem, c.limit) {
			t.Errorf("%s: %s: got %v; want an error for %s naming its limit %s", c.key, c.over, err, c.key, c.limit)
		}
		if !slices.Contains(live, c.key) {
			continue
		}
		cur, err := Parse([]byte(base))
		if err != nil {
			t.Fatal(err)
		}
		over := c.over
		if strings.HasSuffix(over, "h") || strings.HasSuffix(over, "m") {
			over = `"` + over + `"`
		}
		next, _, err := Patch(cur, []byte(`{"`+c.key+`": `+over+`}`))
		if !errors.As(err, &se) || se.Key != c.key || !strings.Contains(se.Problem, c.limit) {
			t.Errorf("PATCH %s: %s: got %v; want an error for %s naming its limit %s", c.key, over, err, c.key, c.limit)
		}
		if next.MaxStaleness != cur.MaxStaleness || next.Weight != cur.Weight || next.RelayWindow != cur.RelayWindow {
			t.Errorf("PATCH %s: %s refused but the spec changed", c.key, over)
		}
	}
	// A spec built in Go, not decoded, meets the same bounds.
	s, err := Parse([]byte("name: a\nmodel: mnist-mlp\n"))
	if err != nil {
		t.Fatal(err)
	}
	s.Weight, s.Priority = 2e6, 0
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "weight") {
		t.Errorf("Validate of weight 2e6: %v, want a weight error", err)
	}
	s.Weight, s.Priority = 1, -1001
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "priority") {
		t.Errorf("Validate of priority -1001: %v, want a priority error", err)
	}
}
