package coordinator

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// One WARN per key per interval; the rest DEBUG; keys apart.
func TestWarnLimiter(t *testing.T) {
	var w warnLimiter
	every := int64(10 * time.Second)
	steps := []struct {
		key  string
		at   int64
		want slog.Level
	}{
		{"w1 invalid", 0, slog.LevelWarn},
		{"w1 invalid", every - 1, slog.LevelDebug},
		{"w2 invalid", every - 1, slog.LevelWarn},
		{"w1 banned", every - 1, slog.LevelWarn},
		{"w1 invalid", every, slog.LevelWarn},
		{"w1 invalid", every + 1, slog.LevelDebug},
	}
	for i, s := range steps {
		if got := w.level(s.key, s.at, every); got != s.want {
			t.Errorf("step %d (%s at %d): %v, want %v", i, s.key, s.at, got, s.want)
		}
	}
	// Past its size the limiter starts over rather than grow.
	for i := range warnLimiterKeys + 10 {
		w.level(fmt.Sprint("k", i), 0, every)
	}
	if len(w.last) > warnLimiterKeys {
		t.Errorf("%d keys kept, at most %d", len(w.last), warnLimiterKeys)
	}
}

// LogfLogger writes one line a record: the level unless INFO, the
// message (quoted whole if it holds a control character), then the
// attributes, quoted where they need it; DEBUG is dropped.
func TestLogfLoggerLines(t *testing.T) {
	var lines []string
	l := LogfLogger(func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }).With(logJob, "j1")
	l.Info("job j1: started", "n", 3)
	l.Warn("refused", logWorker, "w 1", "client", "evil\nline")
	l.Debug("chatter")
	l.WithGroup("g").Error("broken\x1b[2J", "k", "v")
	want := []string{
		"job j1: started job=j1 n=3",
		`WARN refused job=j1 worker="w 1" client="evil\nline"`,
		`ERROR "broken\x1b[2J" job=j1 g.k=v`,
	}
	if strings.Join(lines, "|") != strings.Join(want, "|") {
		t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}
