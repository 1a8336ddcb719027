package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
)

// Attribute keys of the coordinator's log lines, so that an operator can
// pick out one job, worker, volunteer or relay (README.md, "Logs").
// The message keeps the words it had as a printf line; the attributes
// repeat the identities in it in a form a log pipeline can filter on.
const (
	logJob       = "job"
	logWorker    = "worker"
	logVolunteer = "volunteer"
	logRelay     = "relay"
)

// LogfLogger adapts a printf-style function (testing.T.Logf, a
// Config.Logf of before Config.Logger) into a logger. Each record
// becomes one call: the message, then its attributes as key=value, a
// level other than INFO in front. Records below INFO are dropped.
// Strings are quoted when they hold anything but printable characters,
// and a message with a control character in it is quoted whole, so a
// worker's string cannot start a line of its own.
func LogfLogger(logf func(format string, args ...any)) *slog.Logger {
	return slog.New(&logfHandler{logf: logf})
}

type logfHandler struct {
	logf   func(string, ...any)
	attrs  string // preformatted " key=value" pairs from WithAttrs
	groups []string
}

func (h *logfHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *logfHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	if r.Level != slog.LevelInfo {
		b.WriteString(r.Level.String())
		b.WriteByte(' ')
	}
	b.WriteString(quoteIfControl(r.Message))
	b.WriteString(h.attrs)
	r.Attrs(func(a slog.Attr) bool {
		appendAttr(&b, h.groups, a)
		return true
	})
	h.logf("%s", b.String())
	return nil
}

func (h *logfHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	var b strings.Builder
	b.WriteString(h.attrs)
	for _, a := range attrs {
		appendAttr(&b, h.groups, a)
	}
	return &logfHandler{logf: h.logf, attrs: b.String(), groups: h.groups}
}

func (h *logfHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return &logfHandler{logf: h.logf, attrs: h.attrs, groups: append(slices.Clip(h.groups), name)}
}

func appendAttr(b *strings.Builder, groups []string, a slog.Attr) {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return
	}
	if a.Value.Kind() == slog.KindGroup {
		inner := groups
		if a.Key != "" {
			inner = append(slices.Clip(groups), a.Key)
		}
		for _, g := range a.Value.Group() {
			appendAttr(b, inner, g)
		}
		return
	}
	b.WriteByte(' ')
	for _, g := range groups {
		b.WriteString(g)
		b.WriteByte('.')
	}
	b.WriteString(a.Key)
	b.WriteByte('=')
	v := a.Value.String()
	if v == "" || strings.ContainsFunc(v, func(r rune) bool { return !unicode.IsPrint(r) || r == ' ' || r == '"' || r == '=' }) {
		v = strconv.Quote(v)
	}
	b.WriteString(v)
}

// quoteIfControl quotes s when it holds a control character (a newline,
// an escape), which would break or forge a line.
func quoteIfControl(s string) string {
	if strings.ContainsFunc(s, unicode.IsControl) {
		return strconv.Quote(s)
	}
	return s
}

// printfLogger is Config.Logf made from a logger: each call is an INFO
// record, so the coordinator's lines not yet given a level and
// attributes of their own still go through Config.Logger.
func printfLogger(l *slog.Logger) func(string, ...any) {
	return func(format string, args ...any) { l.Info(fmt.Sprintf(format, args...)) }
}

// helloRefusalWarnEvery is how often refused hellos of one address and
// reason may log at WARN; in between they log at DEBUG.
const helloRefusalWarnEvery = 10 * time.Second

// helloRefusalLevel is the level of a refused hello's line from the
// client key (its address) for reason.
func (s *Server) helloRefusalLevel(key, reason string) slog.Level {
	return s.refusedHellos.level(key+"\x00"+reason, time.Now().UnixNano(), int64(helloRefusalWarnEvery))
}

// warnLimiter lets a warning through once per key per interval; the rest
// go out at DEBUG. A hostile worker repeating one refused thing should
// not fill the log with the same WARN line.
type warnLimiter struct {
	mu   sync.Mutex
	last map[string]int64 // key -> unix nanoseconds of its last warning
}

// warnLimiterKeys bounds the limiter's memory: past it, it starts over.
const warnLimiterKeys = 4096

func (w *warnLimiter) level(key string, now, every int64) slog.Level {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.last == nil || len(w.last) >= warnLimiterKeys {
		w.last = map[string]int64{}
	}
	if t, ok := w.last[key]; ok && now-t < every {
		return slog.LevelDebug
	}
	w.last[key] = now
	return slog.LevelWarn
}
