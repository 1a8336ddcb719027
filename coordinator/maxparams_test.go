package coordinator

import (
	"bufio"
	"strings"
	"testing"
)

// MemTotal is read from /proc/meminfo's format; anything else is no
// answer (and the caller falls back to a conservative constant).
func TestMemTotalFromMeminfo(t *testing.T) {
	for text, want := range map[string]int64{
		"MemTotal:       131072000 kB\nMemFree:        1000 kB\n": 131072000 << 10,
		"MemFree: 1 kB\nMemTotal: 8 kB\n":                         8 << 10,
		"MemTotal: 12 MB\n":                                       -1,
		"MemTotal: lots kB\n":                                     -1,
		"":                                                        -1,
	} {
		got, ok := memTotal(bufio.NewScanner(strings.NewReader(text)))
		if want < 0 && ok || want >= 0 && (!ok || got != want) {
			t.Errorf("memTotal(%q) = %d, %v; want %d", text, got, ok, want)
		}
	}
	if n := DefaultMaxParams(); n < 1<<20 {
		t.Errorf("DefaultMaxParams() = %d on this machine; a quarter of any machine that runs the tests holds more than 1M parameters", n)
	}
}
