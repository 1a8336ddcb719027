package coordinator_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// logBuffer collects what a handler writes; handlers write whole lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Split(strings.TrimSuffix(b.buf.String(), "\n"), "\n")
}

// waitFor returns the first line holding every one of words, waiting up
// to 10 s for it.
func (b *logBuffer) waitFor(t *testing.T, words ...string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, l := range b.lines() {
			if containsAll(l, words) {
				return l
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line holds %q within 10s; log:\n%s", words, strings.Join(b.lines(), "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (b *logBuffer) has(words ...string) bool {
	for _, l := range b.lines() {
		if containsAll(l, words) {
			return true
		}
	}
	return false
}

func containsAll(s string, words []string) bool {
	for _, w := range words {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}

// Strings a hostile worker sends in its hello, trying to start log lines
// of its own, colour the terminal, or close the quotes around them. (A
// volunteer name may hold no control character: the hello is refused.)
const (
	hostileClient  = "evil/1.0\ntime=2026-01-01T00:00:00Z level=ERROR msg=FORGED \x1b[31mred\x1b[0m"
	hostileBackend = "raw\r\nlevel=ERROR msg=FORGED2"
	hostileName    = `mallory" level=ERROR msg="FORGED3`
)

// loggedGrid runs the test grid with its log going to a handler of
// format at level, and plays one hostile worker: it joins with the
// strings above, sends a result for a lease it does not hold (a routine
// refusal) and two results of the wrong length (broken ones).
func loggedGrid(t *testing.T, format string, level slog.Level) (*logBuffer, *testGrid, *protocol.Welcome) {
	t.Helper()
	out := &logBuffer{}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(out, opts)
	if format == "json" {
		h = slog.NewJSONHandler(out, opts)
	}
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) { c.Logger = slog.New(h) })
	rc := &rawClient{t: t, conn: g.dialRaw()}
	rc.send(&protocol.Hello{Protocol: protocol.Version, Kind: protocol.KindNative, Backend: hostileBackend, Threads: 1,
		Client: hostileClient, Name: hostileName})
	w, ok := rc.read().(*protocol.Welcome)
	if !ok {
		t.Fatal("expected a welcome")
	}
	rc.welcome = w
	ls := rc.leases(2)
	l := ls[0]
	n := w.Job.NumParams
	rc.send(&protocol.Result{LeaseID: l.ID + 1000, JobID: l.JobID, BaseVersion: l.BaseVersion, Codec: protocol.CodecF32,
		Update: make(protocol.Floats, n), Examples: l.Count, LossSum: 1})
	if a := rc.ack(l.ID + 1000); a.Reason != protocol.ReasonUnknownLease {
		t.Fatalf("a result for a lease not held: %+v", a)
	}
	for _, l := range ls {
		rc.send(&protocol.Result{LeaseID: l.ID, JobID: l.JobID, BaseVersion: l.BaseVersion, Codec: protocol.CodecF32,
			Update: make(protocol.Floats, n-1), Examples: l.Count, LossSum: 1})
		if a := rc.ack(l.ID); a.Reason != protocol.ReasonInvalid {
			t.Fatalf("a result of the wrong length: %+v", a)
		}
	}
	// Each line was written before the message it logs went out: the
	// welcome after the join's line, an ack after its refusal's.
	return out, g, w
}

// JSON logs parse line by line, a refused result's line carries the job,
// worker and volunteer, and a worker's strings round-trip exactly as
// attributes without ever starting a line.
func TestJSONLogCarriesJobAndWorkerAndStaysOneRecordALine(t *testing.T) {
	out, g, w := loggedGrid(t, "json", slog.LevelDebug)
	var refusedInvalid, refusedRoutine, joined map[string]any
	invalidLevels := []any{}
	for i, l := range out.lines() {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("line %d is not one JSON object (%v): %q", i+1, err, l)
		}
		if rec["level"] == "ERROR" {
			t.Errorf("an ERROR line (forged?): %q", l)
		}
		msg, _ := rec["msg"].(string)
		switch {
		case strings.Contains(msg, "REFUSED (invalid)"):
			invalidLevels = append(invalidLevels, rec["level"])
			if refusedInvalid == nil {
				refusedInvalid = rec
			}
		case strings.Contains(msg, "REFUSED (unknown_lease)"):
			refusedRoutine = rec
		case strings.Contains(msg, "worker "+w.WorkerID+" joined"):
			joined = rec
		}
	}
	if refusedInvalid == nil || refusedRoutine == nil || joined == nil {
		t.Fatalf("missing lines: refused invalid %v, refused unknown_lease %v, joined %v; log:\n%s",
			refusedInvalid, refusedRoutine, joined, strings.Join(out.lines(), "\n"))
	}
	for what, rec := range map[string]map[string]any{"invalid": refusedInvalid, "unknown_lease": refusedRoutine} {
		if rec["job"] != g.job.ID || rec["worker"] != w.WorkerID || rec["reason"] != what {
			t.Errorf("refused (%s) line: job %v, worker %v, reason %v; want %s, %s, %s", what, rec["job"], rec["worker"], rec["reason"], g.job.ID, w.WorkerID, what)
		}
		if v, _ := rec["volunteer"].(string); v == "" {
			t.Errorf("refused (%s) line names no volunteer: %v", what, rec)
		}
	}
	// The second broken result within 10 s is not a second warning.
	if fmt.Sprint(invalidLevels) != "[WARN DEBUG]" || refusedRoutine["level"] != "DEBUG" {
		t.Errorf("levels: two broken results %v, a result for a lease not held %v; want [WARN DEBUG] and DEBUG", invalidLevels, refusedRoutine["level"])
	}
	if joined["client"] != hostileClient || joined["name"] != hostileName || joined["job"] != g.job.ID || joined["worker"] != w.WorkerID {
		t.Errorf("joined line's attributes do not round-trip: %v", joined)
	}
}

// The text handler quotes what a worker sent: every line parses as
// key=value pairs with one time, one level and one message, no raw
// control character reaches the log, and the worker's strings come back
// whole from their quotes.
func TestTextLogQuotesWorkerStrings(t *testing.T) {
	out, g, w := loggedGrid(t, "text", slog.LevelInfo)
	var joined map[string]string
	for i, l := range out.lines() {
		if strings.ContainsAny(l, "\x1b\r") {
			t.Errorf("line %d carries a raw control character: %q", i+1, l)
		}
		kv, err := parseLogfmt(l)
		if err != nil {
			t.Fatalf("line %d: %v: %q", i+1, err, l)
		}
		if kv["level"] == "ERROR" || kv["time"] == "2026-01-01T00:00:00Z" {
			t.Errorf("line %d is a forged record: %q", i+1, l)
		}
		if strings.Contains(kv["msg"], "worker "+w.WorkerID+" joined") {
			joined = kv
		}
	}
	if joined == nil {
		t.Fatalf("no joined line; log:\n%s", strings.Join(out.lines(), "\n"))
	}
	if joined["client"] != hostileClient || joined["name"] != hostileName || joined["job"] != g.job.ID {
		t.Errorf("joined line's attributes do not round-trip: %q", joined)
	}
	refused, err := parseLogfmt(out.waitFor(t, "REFUSED (invalid)"))
	if err != nil {
		t.Fatal(err)
	}
	if refused["level"] != "WARN" || refused["job"] != g.job.ID || refused["worker"] != w.WorkerID || refused["reason"] != "invalid" {
		t.Errorf("refused line: %q", refused)
	}
	// INFO hides the per-result chatter.
	if out.has("REFUSED (unknown_lease)") {
		t.Errorf("a routine refusal logged at level INFO:\n%s", strings.Join(out.lines(), "\n"))
	}
}

// parseLogfmt splits a text handler's line into its keys and values,
// unquoting quoted values; a key seen twice, or a line that is not
// key=value pairs, is an error.
func parseLogfmt(line string) (map[string]string, error) {
	kv := map[string]string{}
	for rest := line; rest != ""; {
		eq := strings.IndexByte(rest, '=')
		if eq <= 0 || strings.ContainsAny(rest[:eq], " \"") {
			return nil, fmt.Errorf("no key=value at %q", rest)
		}
		key, v := rest[:eq], rest[eq+1:]
		var val string
		if strings.HasPrefix(v, `"`) {
			end := 1
			for end < len(v) && v[end] != '"' {
				if v[end] == '\\' {
					end++
				}
				end++
			}
			if end >= len(v) {
				return nil, fmt.Errorf("unterminated quote in %q", v)
			}
			var err error
			if val, err = strconv.Unquote(v[:end+1]); err != nil {
				return nil, fmt.Errorf("%s: %w", v[:end+1], err)
			}
			v = v[end+1:]
		} else {
			end := strings.IndexByte(v, ' ')
			if end < 0 {
				end = len(v)
			}
			val, v = v[:end], v[end:]
		}
		if _, dup := kv[key]; dup {
			return nil, fmt.Errorf("key %s twice", key)
		}
		kv[key] = val
		if v != "" && v[0] != ' ' {
			return nil, fmt.Errorf("no space after the value of %s", key)
		}
		rest = strings.TrimPrefix(v, " ")
	}
	for _, k := range []string{"time", "level", "msg"} {
		if _, ok := kv[k]; !ok {
			return nil, fmt.Errorf("no %s", k)
		}
	}
	return kv, nil
}

// WARN keeps the refusals and drops joins and leaves.
func TestLogLevelFilters(t *testing.T) {
	out, _, w := loggedGrid(t, "text", slog.LevelWarn)
	_ = out.waitFor(t, "REFUSED (invalid)")
	if out.has("worker "+w.WorkerID+" joined") || out.has("level=INFO") || out.has("level=DEBUG") {
		t.Errorf("below WARN logged at level WARN:\n%s", strings.Join(out.lines(), "\n"))
	}
}
