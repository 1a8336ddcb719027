package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strings"
)

// logFlags are the logging flags of serve, work and relay: the format and
// the least level written. Logs go to stderr as log/slog records, so a
// collector can filter on the job, worker, volunteer and relay attributes
// the coordinator adds (README.md, "Logs").
type logFlags struct {
	format, level string
}

// addLogFlags registers --log-format and --log-level on fs.
func addLogFlags(fs *flag.FlagSet) *logFlags {
	f := &logFlags{}
	fs.StringVar(&f.format, "log-format", "text", "log line `format`: text (key=value pairs, strings quoted) or json (one object a line)")
	fs.StringVar(&f.level, "log-level", "info", "least `level` logged: debug (adds per-result refusals and lease chatter), info, warn or error")
	return f
}

// logLevels are the values --log-level takes.
var logLevels = map[string]slog.Level{
	"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError,
}

// logger builds the logger the flags ask for, writing to w. A value the
// flags do not know is a usage error (exit 2) naming the choices.
func (f *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	level, ok := logLevels[strings.ToLower(f.level)]
	if !ok {
		return nil, usagef("--log-level %q: want debug, info, warn or error", f.level)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(f.format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usagef("--log-format %q: want text or json", f.format)
}

// stdLogger is l as a *log.Logger, for the code that takes one (the HTTP
// server's ErrorLog, TLS and relay set-up): each line is an INFO record.
func stdLogger(l *slog.Logger) *log.Logger { return slog.NewLogLogger(l.Handler(), slog.LevelInfo) }

// printf is l as a printf-style function (the worker's and the web
// handler's Logf), each line an INFO record; prefix, if any, starts each
// message.
func printf(l *slog.Logger, prefix string) func(string, ...any) {
	return func(format string, args ...any) { l.Info(prefix + fmt.Sprintf(format, args...)) }
}
