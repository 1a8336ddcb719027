package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A bad --hours, --max-cpu, --idle-cpu or --priority is refused with exit
// status 2 by a message that names the flag and the value.
func TestWorkMannersFlagsAreChecked(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir()) // no config file
	for _, c := range []struct {
		args  []string
		words []string
	}{
		{[]string{"--hours", "22"}, []string{"-hours", `"22"`, "FROM-TO"}},
		{[]string{"--hours", "25-07"}, []string{"-hours", "0..24"}},
		{[]string{"--hours", "8-8"}, []string{"-hours", "starts where it ends"}},
		{[]string{"--max-cpu", "0%"}, []string{"-max-cpu", `"0%"`, "(0, 100]"}},
		{[]string{"--max-cpu", "150%"}, []string{"-max-cpu", "(0, 100]"}},
		{[]string{"--max-cpu", "half"}, []string{"-max-cpu", `"half"`}},
		{[]string{"--idle-cpu", "-5"}, []string{"-idle-cpu", "(0, 100]"}},
		{[]string{"--priority", "high"}, []string{"-priority", "low or normal"}},
		{[]string{"--idle-only", "--idle-after", "0s"}, []string{"--idle-after", "positive"}},
	} {
		code, _, stderr := runCmd(t, context.Background(), append([]string{"work", "--key-file", ""}, c.args...)...)
		if code != 2 {
			t.Errorf("work %q: exit %d, want 2; stderr %q", c.args, code, stderr)
		}
		for _, w := range c.words {
			if !strings.Contains(stderr, w) {
				t.Errorf("work %q: stderr %q does not say %q", c.args, stderr, w)
			}
		}
	}
}

// startLine runs work until it logs its start line, and returns that
// line. The coordinator never answers: nothing listens on port 1.
func startLine(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	code, _, stderr := runCmd(t, ctx, append([]string{"work", "--backend", "cpu", "--kernel", "go", "--priority", "normal"}, args...)...)
	for l := range strings.SplitSeq(stderr, "\n") {
		if strings.Contains(l, "worker starting:") {
			return l
		}
	}
	t.Fatalf("work %q: exit %d and no start line; stderr %q", args, code, stderr)
	return ""
}

// The config file holds the flags' settings, so that a service needs no
// flags; a flag given on the command line wins over the file; the file is
// found in the config directory without --config.
func TestWorkConfigFileAndFlagsOverIt(t *testing.T) {
	cfgHome := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfgHome)
	file := filepath.Join(cfgHome, "crowdtrain", "worker.yaml")
	os.MkdirAll(filepath.Dir(file), 0o700)
	os.WriteFile(file, []byte("# a volunteer's settings\ncoordinator: ws://127.0.0.1:1/from-file\nkey_file: ''\nhours: 22-07\nmax_cpu: 50%\nthreads: 1\n"), 0o600)

	l := startLine(t)
	for _, w := range []string{"coordinator ws://127.0.0.1:1/from-file", "only in the hours 22-07", "computing 50% of the time"} {
		if !strings.Contains(l, w) {
			t.Errorf("from the file in the config directory: %q lacks %q", l, w)
		}
	}
	if strings.Contains(l, "low priority") {
		t.Errorf("--priority normal ignored: %q", l)
	}
	l = startLine(t, "--coordinator", "ws://127.0.0.1:1/from-flag", "--max-cpu", "25", "--idle-only")
	for _, w := range []string{"coordinator ws://127.0.0.1:1/from-flag", "only while the machine is idle", "only in the hours 22-07", "computing 25% of the time"} {
		if !strings.Contains(l, w) {
			t.Errorf("flags over the file: %q lacks %q", l, w)
		}
	}
	// --config names another file, which replaces the default one.
	other := filepath.Join(t.TempDir(), "other.yaml")
	os.WriteFile(other, []byte("coordinator: ws://127.0.0.1:1/other\nkey_file: ''\n"), 0o600)
	l = startLine(t, "--config", other)
	if !strings.Contains(l, "coordinator ws://127.0.0.1:1/other") || strings.Contains(l, "hours") || strings.Contains(l, "% of the time") {
		t.Errorf("--config %s: %q", other, l)
	}
}

// A config file's mistakes are refused with exit status 2, naming the key
// and its line.
func TestWorkConfigFileRefusals(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	dir := t.TempDir()
	for _, c := range []struct {
		file  string
		words []string
	}{
		{"coordinator: ws://127.0.0.1:1/ws\nmax_cpus: 50%\n", []string{"line 2", `unknown key "max_cpus"`, "max_cpu"}},
		{"max_cpu: 500%\n", []string{"line 1", "max_cpu", `"500%"`, "(0, 100]"}},
		{"hours: 7\n", []string{"line 1", "hours", "FROM-TO"}},
		{"idle_only: maybe\n", []string{"line 1", "idle_only"}},
		{"threads: [1, 2]\n", []string{"line 1", "threads: takes one value, not a list"}},
		{"- coordinator\n", []string{"want a mapping"}},
		{"hours: 22-07\nhours: 9-17\n", []string{"line 2", "hours: set twice (first at line 1)"}},
		{"config: other.yaml\n", []string{"line 1", "config: not a setting a config file can hold"}},
		{"token: abc\n", []string{`unknown key "token"`}},
		{"coordinator: [unclosed\n", []string{"worker.yaml"}},
	} {
		path := filepath.Join(dir, "worker.yaml")
		os.WriteFile(path, []byte(c.file), 0o600)
		code, _, stderr := runCmd(t, context.Background(), "work", "--config", path)
		if code != 2 {
			t.Errorf("file %q: exit %d, want 2; stderr %q", c.file, code, stderr)
		}
		for _, w := range c.words {
			if !strings.Contains(stderr, w) {
				t.Errorf("file %q: stderr %q does not say %q", c.file, stderr, w)
			}
		}
	}
	code, _, stderr := runCmd(t, context.Background(), "work", "--config", filepath.Join(dir, "missing.yaml"))
	if code != 2 || !strings.Contains(stderr, "missing.yaml does not exist") {
		t.Errorf("--config of a missing file: exit %d, stderr %q", code, stderr)
	}
}
