package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// Unknown log formats and levels are bad input, named with the choices.
func TestLogFlagsRefuseUnknownValues(t *testing.T) {
	for _, c := range []struct{ flag, value, want string }{
		{"--log-format", "xml", "want text or json"},
		{"--log-level", "loud", "want debug, info, warn or error"},
	} {
		code, _, stderr := runCmd(t, context.Background(), "work", c.flag, c.value, "--coordinator", "ws://127.0.0.1:1/ws")
		if code != 2 || !strings.Contains(stderr, c.flag) || !strings.Contains(stderr, c.want) {
			t.Errorf("work %s %s: exit %d, stderr %q; want 2 naming the flag and %q", c.flag, c.value, code, stderr, c.want)
		}
	}
}

// workLog runs work against a coordinator that never answers until ctx
// ends, and returns its stderr.
func workLog(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	_, _, stderr := runCmd(t, ctx, append([]string{"work", "--backend", "cpu", "--kernel", "go", "--priority", "normal",
		"--coordinator", "ws://127.0.0.1:1/ws", "--key-file", ""}, args...)...)
	return stderr
}

// --log-format json writes one JSON object a line; --log-level drops the
// records below it. (The command's exit error, after the log, is plain.)
func TestWorkLogFormatAndLevel(t *testing.T) {
	stderr := workLog(t, "--log-format", "json")
	started := false
	for i, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if strings.HasPrefix(l, "crowdtrain work: ") {
			continue // why the command ended, printed after the log
		}
		var rec struct{ Time, Level, Msg string }
		if err := json.Unmarshal([]byte(l), &rec); err != nil || rec.Time == "" || rec.Level == "" {
			t.Fatalf("line %d is not a JSON log record (%v): %q", i+1, err, l)
		}
		if strings.Contains(rec.Msg, "worker starting:") && rec.Level == "INFO" {
			started = true
		}
	}
	if !started {
		t.Fatalf("no INFO record of the worker starting:\n%s", stderr)
	}
	if quiet := workLog(t, "--log-level", "warn"); strings.Contains(quiet, "worker starting:") || strings.Contains(quiet, "level=INFO") {
		t.Fatalf("INFO records at --log-level warn:\n%s", quiet)
	}
}
