package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/internal/testenv"
)

func runCmd(t *testing.T, ctx context.Context, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(ctx, args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestBadInputExitsWithStatus2(t *testing.T) {
	dir := t.TempDir()
	unknownKey := filepath.Join(dir, "job.yaml")
	os.WriteFile(unknownKey, []byte("name: x\nmodel: mnist-mlp\nlearning_rate: 0.1\n"), 0o644)
	badValue := filepath.Join(dir, "job.json")
	os.WriteFile(badValue, []byte(`{"name": "x", "model": "mnist-mlp", "batch_size": -3}`), 0o644)
	cases := []struct {
		args  []string
		words []string
	}{
		{[]string{"serve", "--job", "mnist-rnn"}, []string{"mnist-rnn", "mnist-cnn, mnist-mlp"}},
		{[]string{"serve", "--job", unknownKey}, []string{"learning_rate", "unknown key"}},
		{[]string{"serve", "--job", badValue}, []string{"batch_size", "-3"}},
		{[]string{"serve", "--no-such-flag"}, []string{"no-such-flag"}},
		{[]string{"serve", "--progress", "0s"}, []string{"--progress must be positive"}},
		{[]string{"serve", "--checkpoint-retry-min", "2m", "--checkpoint-retry-max", "1m"}, []string{"--checkpoint-retry-min", "--checkpoint-retry-max"}},
		{[]string{"serve", "--max-worker-records", "0"}, []string{"--max-worker-records"}},
		{[]string{"serve", "--ping-misses", "0"}, []string{"--ping-misses"}},
		{[]string{"serve", "--max-control-bytes", "10"}, []string{"--max-control-bytes", "1024"}},
		{[]string{"bench", "--model", "nope"}, []string{"nope", "mnist-mlp"}},
		{[]string{"work", "--coordinator", "ftp://x"}, []string{"ws://"}},
		{[]string{"frobnicate"}, []string{"unknown command"}},
		{[]string{"relay-credential", "--token", "t"}, []string{"one relay NAME"}},
		{[]string{"relay-credential", "a", "b", "--token", "t"}, []string{"one relay NAME"}},
		{[]string{"relay-credential", "a.b", "--token", "t"}, []string{"a.b", "letters, digits"}},
		{[]string{"relay-credential", "--revoke", "ra", "--out", "x", "--token", "t"}, []string{"--revoke takes no --out"}},
		{[]string{"relay-credential", "ra", "--token", ""}, []string{"admin token"}},
		{[]string{"relay", "--upstream", "nats://127.0.0.1:1"}, []string{"--creds is required", "relay-credential"}},
		{[]string{"serve", "--relay-stream-bytes", "1000"}, []string{"--relay-stream-bytes", "16 MiB"}},
		{[]string{"serve", "--relay-approval", "maybe"}, []string{"--relay-approval", "auto or manual"}},
		{[]string{"serve", "--db", "x.db", "--nats-listen", "127.0.0.1:0", "--nats-tls-cert", "c.pem"}, []string{"--nats-tls-key", "together"}},
		{[]string{"serve", "--nats-tls-cert", "c.pem", "--nats-tls-key", "k.pem"}, []string{"--nats-listen"}},
		{nil, []string{"Usage"}},
	}
	for _, c := range cases {
		code, _, stderr := runCmd(t, context.Background(), c.args...)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2 (stderr %q)", c.args, code, stderr)
		}
		for _, w := range c.words {
			if !strings.Contains(stderr, w) {
				t.Errorf("%v: stderr %q should mention %q", c.args, stderr, w)
			}
		}
	}
}

// A missing data set is bad input like a bad spec: exit 2, before the
// database is created.
func TestMissingMNISTSaysWhereItLooked(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(t.TempDir(), "ct.db")
	code, _, stderr := runCmd(t, context.Background(), "serve", "--data", dir, "--addr", "127.0.0.1:0", "--db", db)
	if code != 2 || !strings.Contains(stderr, dir) || !strings.Contains(stderr, "--data") {
		t.Fatalf("exit %d, stderr %q; want 2 naming %s and how to fix it", code, stderr, dir)
	}
	if _, err := os.Stat(db); !os.IsNotExist(err) {
		t.Fatalf("the database %s exists (stat: %v); a failed start must not create it", db, err)
	}
}

func TestBenchPrintsExamplesPerSecondLast(t *testing.T) {
	code, stdout, stderr := runCmd(t, context.Background(), "bench", "--model", "mnist-mlp", "--batch", "64", "--threads", "1",
		"--rounds", "3", "--round", "50ms")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if !regexp.MustCompile(`^examples/s: [1-9][0-9]*$`).MatchString(lines[len(lines)-1]) {
		t.Fatalf("last line %q, want `examples/s: N`", lines[len(lines)-1])
	}
}

// serve with local workers trains, status shows it, and cancelling (what
// Ctrl-C does) stops it cleanly with exit status 0.
func TestServeStatusAndCleanStop(t *testing.T) {
	testenv.Long(t, "starts a coordinator with workers")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	const token = "serve-test-admin-token"
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	logs := &lockedBuffer{}
	go func() {
		done <- run(ctx, []string{"serve", "--addr", addr, "--job", "mnist-mlp", "--local-workers", "2", "--progress", "200ms",
			"--db", filepath.Join(t.TempDir(), "ct.db"), "--admin-token", token},
			io.Discard, logs)
	}()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var jobs []struct {
			Version int64 `json:"version"`
			Workers int   `json:"workers"`
		}
		resp, err := http.Get("http://" + addr + "/api/v1/jobs")
		if err == nil {
			json.NewDecoder(resp.Body).Decode(&jobs)
			resp.Body.Close()
			if len(jobs) == 1 && jobs[0].Workers == 2 && jobs[0].Version > 10 {
				break
			}
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("coordinator did not train with two workers: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	code, stdout, stderr := runCmd(t, context.Background(), "status", "--coordinator", "http://"+addr, "--token", token)
	if code != 0 || !strings.Contains(stdout, "mnist-mlp") || strings.Count(stdout, " cpu-") != 2 {
		t.Fatalf("status exit %d:\n%s\n%s", code, stdout, stderr)
	}
	// Without the token the public summary still shows; the workers do not.
	code, stdout, _ = runCmd(t, context.Background(), "status", "--coordinator", "http://"+addr, "--token", "")
	if code != 0 || !strings.Contains(stdout, "mnist-mlp") || strings.Contains(stdout, " cpu-") || !strings.Contains(stdout, "--token") {
		t.Fatalf("status without the token, exit %d:\n%s", code, stdout)
	}

	// submit: a preset, a spec file with a bad key, and without the token.
	code, stdout, stderr = runCmd(t, context.Background(), "submit", "--coordinator", "http://"+addr, "--token", token, "mnist-cnn")
	if code != 0 || !strings.Contains(stdout, "submitted mnist-cnn-") {
		t.Fatalf("submit mnist-cnn: exit %d\n%s\n%s", code, stdout, stderr)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("name: bad\nmodel: mnist-mlp\nbatch_size: 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runCmd(t, context.Background(), "submit", "--coordinator", "http://"+addr, "--token", token, bad)
	if code != 2 || !strings.Contains(stderr, "batch_size") {
		t.Fatalf("submit a bad spec: exit %d, %s; want 2 naming batch_size", code, stderr)
	}
	code, _, stderr = runCmd(t, context.Background(), "submit", "--coordinator", "http://"+addr, "--token", "wrong-token-wrong-token", "mnist-cnn")
	if code != 1 || !strings.Contains(stderr, "refused the admin token") {
		t.Fatalf("submit with a wrong token: exit %d, %s", code, stderr)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("serve exited %d after Ctrl-C; its log:\n%s", code, logs.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop within 20s of Ctrl-C")
	}
}

// lockedBuffer collects a goroutine's log for the test to print.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A --db that is not ours is refused and left untouched.
func TestServeRefusesAForeignDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notes.db")
	content := []byte("these are my notes, not a database\n")
	os.WriteFile(path, content, 0o644)
	code, _, stderr := runCmd(t, context.Background(), "serve", "--addr", "127.0.0.1:0", "--db", path)
	if code == 0 || !strings.Contains(stderr, path) {
		t.Fatalf("exit %d, stderr %q; want a failure naming %s", code, stderr, path)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, content) {
		t.Fatal("the file was modified")
	}
}
