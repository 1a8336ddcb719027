package web_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"strings"
	"sync"
)

// refusalLog is a coordinator's log as the mixed-crowd benchmark reads
// it: it counts the REFUSED lines (every one, DEBUG included, since the
// coordinator logs a worker's repeated refusals of one reason at DEBUG
// between WARNs) by worker and reason, and writes to out, with a
// prefix, the WARN and ERROR lines and every line of a refusal the
// benchmark counts against the defences (whatever its level); with
// all, every line.
type refusalLog struct {
	out    io.Writer
	prefix string
	all    bool // write every line, DEBUG included
	mu     sync.Mutex
	counts map[string]map[string]int64 // worker → reason → refusals
}

func newRefusalLog(out io.Writer, prefix string) *refusalLog {
	return &refusalLog{out: out, prefix: prefix, counts: map[string]map[string]int64{}}
}

func (l *refusalLog) logger() *slog.Logger { return slog.New(&refusalHandler{log: l}) }

// byWorker returns a copy of the refusals counted, by worker and reason.
func (l *refusalLog) byWorker() map[string]map[string]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]map[string]int64, len(l.counts))
	for w, rs := range l.counts {
		out[w] = maps.Clone(rs)
	}
	return out
}

// refusalHandler is the slog.Handler behind refusalLog.logger, with the
// attributes its loggers were made with.
type refusalHandler struct {
	log   *refusalLog
	attrs []slog.Attr
}

func (h *refusalHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *refusalHandler) Handle(_ context.Context, r slog.Record) error {
	var worker, reason string
	find := func(a slog.Attr) bool {
		switch a.Key {
		case "worker":
			worker = a.Value.String()
		case "reason":
			reason = a.Value.String()
		}
		return true
	}
	for _, a := range h.attrs {
		find(a)
	}
	r.Attrs(find)
	l := h.log
	refused := strings.Contains(r.Message, " REFUSED (") && reason != ""
	if refused {
		l.mu.Lock()
		if l.counts[worker] == nil {
			l.counts[worker] = map[string]int64{}
		}
		l.counts[worker][reason]++
		l.mu.Unlock()
	}
	if l.all || r.Level >= slog.LevelWarn || refused && !routineReason(reason) {
		l.mu.Lock()
		fmt.Fprintf(l.out, "%s%s %s %s\n", l.prefix, r.Time.UTC().Format("15:04:05.000"), r.Level, r.Message)
		l.mu.Unlock()
	}
	return nil
}

func (h *refusalHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &refusalHandler{log: h.log, attrs: append(append([]slog.Attr(nil), h.attrs...), attrs...)}
}

func (h *refusalHandler) WithGroup(string) slog.Handler { return h }
