package attack

import (
	"slices"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/protocol"
)

func TestParseBinds(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"127.0.0.5", []string{"127.0.0.5"}},
		{"127.0.0.2-127.0.0.6", []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6"}},
		{"127.0.0.9, 127.0.0.3", []string{"127.0.0.9", "127.0.0.3"}},
		{"10.0.0.255-10.0.1.1", []string{"10.0.0.255", "10.0.1.0", "10.0.1.1"}},
		{"::1-::2", []string{"::1", "::2"}},
	} {
		got, err := ParseBinds(c.in)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("ParseBinds(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, c := range []struct{ in, says string }{
		{"127.0.0.6-127.0.0.2", "must go up"},
		{"127.0.0.1-::1", "same family"},
		{"localhost", "not an IP address"},
		{"127.0.0.1,", "empty entry"},
		{"10.0.0.0-10.1.0.0", "more than 10000"},
	} {
		if _, err := ParseBinds(c.in); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("ParseBinds(%q): %v; want an error saying %q", c.in, err, c.says)
		}
	}
}

func TestKeysAreDistinctVolunteerKeys(t *testing.T) {
	ks := newKeys(4)
	for i, k := range ks {
		if err := protocol.CheckVolunteerKey(k); err != nil {
			t.Fatalf("key %d: %v", i, err)
		}
		if slices.Index(ks, k) != i {
			t.Fatalf("key %d repeats", i)
		}
	}
	cfg := Config{Coordinator: "ws://127.0.0.1:1/ws", Kind: Zero, N: 2, Keys: 3}
	if err := cfg.Check(); err == nil || !strings.Contains(err.Error(), "keys must be in 0..n") {
		t.Fatalf("3 keys for 2 attackers: %v", err)
	}
}
