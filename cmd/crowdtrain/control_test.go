//go:build cgo

package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// startServe runs `crowdtrain serve` in this process on a free loopback
// port, and returns its API URL once it answers; the coordinator stops
// when the test ends.
func startServe(t *testing.T, token string, args ...string) string {
	t.Helper()
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	logs := &lockedBuffer{}
	go func() {
		done <- run(ctx, append([]string{"serve", "--addr", addr, "--admin-token", token, "--progress", "1h"}, args...), io.Discard, logs)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("serve did not stop; log:\n%s", logs.String())
		}
	})
	base := "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(base + "/api/v1/jobs")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not answer: %v; log:\n%s", err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Every operator control of the CLI, against a running coordinator: what
// each prints, what the coordinator then reports, and the exit statuses of
// bad input (2) and of a refusal (1).
func TestControlsAgainstARunningCoordinator(t *testing.T) {
	const token = "control-test-admin-token"
	base := startServe(t, token, "--job", "mnist-mlp", "--local-workers", "1", "--join", "open", "--db", filepath.Join(t.TempDir(), "ct.db"))
	ctl := func(want int, args ...string) string {
		t.Helper()
		code, stdout, stderr := runCmd(t, context.Background(), append(args, "--coordinator", base)...)
		if code != want {
			t.Fatalf("crowdtrain %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, want, stdout, stderr)
		}
		return stdout + stderr
	}
	tokenFile := filepath.Join(t.TempDir(), "admin-token")
	os.WriteFile(tokenFile, []byte(token+"\n"), 0o600)
	t.Setenv(adminTokenEnv, "")

	// jobs list --json: the API's array, every job with its id (public:
	// no token needed).
	var jobs []jobView
	if err := json.Unmarshal([]byte(ctl(0, "jobs", "list", "--json")), &jobs); err != nil || len(jobs) != 1 {
		t.Fatalf("jobs list --json: %v, %d jobs", err, len(jobs))
	}
	id := jobs[0].ID
	if jobs[0].State != "running" || jobs[0].Name != "mnist-mlp" {
		t.Fatalf("jobs list --json: %+v", jobs[0])
	}
	// The table; the token from a file, then from the environment.
	if out := ctl(0, "jobs", "list"); !strings.Contains(out, id) || !strings.Contains(out, "running") {
		t.Fatalf("jobs list:\n%s", out)
	}
	if out := ctl(0, "tokens", "list", "--token-file", tokenFile); !strings.Contains(out, "no join tokens") {
		t.Fatalf("tokens list with --token-file:\n%s", out)
	}
	t.Setenv(adminTokenEnv, token)
	if out := ctl(0, "jobs", "show", id); !strings.Contains(out, `"id": "`+id+`"`) || !strings.Contains(out, `"spec"`) {
		t.Fatalf("jobs show:\n%s", out)
	}

	// pause, resume: the flags after the id, as `jobs pause ID --coordinator URL`.
	if out := ctl(0, "jobs", "pause", id); !strings.Contains(out, "paused") {
		t.Fatalf("jobs pause: %s", out)
	}
	if s := jobState(t, base, id); s.State != "paused" {
		t.Fatalf("after jobs pause, the job is %s", s.State)
	}
	if out := ctl(1, "jobs", "pause", id); !strings.Contains(out, "paused") {
		t.Fatalf("pausing a paused job: %s", out)
	}
	ctl(0, "jobs", "resume", id)
	if s := jobState(t, base, id); s.State != "running" {
		t.Fatalf("after jobs resume, the job is %s", s.State)
	}

	// patch: numbers as numbers; a bad key is a usage error naming it.
	if out := ctl(0, "jobs", "patch", id, "lr=0.0005", "weight=3", "priority=2"); !strings.Contains(out, "lr 0.0005") {
		t.Fatalf("jobs patch: %s", out)
	}
	if s := jobState(t, base, id); s.LR != 0.0005 || s.Weight != 3 || s.Priority != 2 {
		t.Fatalf("after jobs patch: lr %g, weight %g, priority %d", s.LR, s.Weight, s.Priority)
	}
	if out := ctl(2, "jobs", "patch", id, "batch_size=3"); !strings.Contains(out, "batch_size") {
		t.Fatalf("patching a key that cannot change: %s", out)
	}
	if out := ctl(2, "jobs", "patch", id, "lr"); !strings.Contains(out, "KEY=VALUE") {
		t.Fatalf("patch without =: %s", out)
	}
	if out := ctl(1, "jobs", "show", "no-such-job"); !strings.Contains(out, "no-such-job") {
		t.Fatalf("show an unknown job: %s", out)
	}

	// tokens issue prints the secret alone on stdout; list shows the name.
	code, secret, stderr := runCmd(t, context.Background(), "tokens", "issue", "alice", "--coordinator", base)
	if code != 0 || !strings.Contains(secret, ".") || strings.Count(strings.TrimSpace(secret), "\n") != 0 {
		t.Fatalf("tokens issue: exit %d, stdout %q, stderr %s", code, secret, stderr)
	}
	if out := ctl(0, "tokens", "list"); !strings.Contains(out, "alice") || strings.Contains(out, strings.TrimSpace(secret)) {
		t.Fatalf("tokens list:\n%s", out)
	}
	var tl struct {
		Tokens []tokenView `json:"tokens"`
	}
	if err := json.Unmarshal([]byte(ctl(0, "tokens", "list", "--json")), &tl); err != nil || len(tl.Tokens) != 1 || tl.Tokens[0].Name != "alice" {
		t.Fatalf("tokens list --json: %v %+v", err, tl)
	}

	// volunteers: the local worker is one; ban it, see it banned, pardon it.
	var vl struct {
		Volunteers []volunteerView `json:"volunteers"`
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(vl.Volunteers) == 0 {
		if err := json.Unmarshal([]byte(ctl(0, "volunteers", "list", "--json")), &vl); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("no volunteer listed")
		}
		time.Sleep(100 * time.Millisecond)
	}
	vid := vl.Volunteers[0].ID
	if out := ctl(0, "volunteers", "ban", vid, "--reason", "testing bans"); !strings.Contains(out, "banned") {
		t.Fatalf("volunteers ban: %s", out)
	}
	if out := ctl(0, "volunteers", "list"); !strings.Contains(out, vid) || !strings.Contains(out, `yes: "testing bans"`) {
		t.Fatalf("volunteers list after the ban:\n%s", out)
	}
	if out := ctl(0, "volunteers", "pardon", vid); !strings.Contains(out, "pardoned") {
		t.Fatalf("volunteers pardon: %s", out)
	}
	if err := json.Unmarshal([]byte(ctl(0, "volunteers", "list", "--json")), &vl); err != nil || vl.Volunteers[0].Banned {
		t.Fatalf("after the pardon: %v %+v", err, vl.Volunteers)
	}
	if out := ctl(1, "volunteers", "ban", "nobody"); !strings.Contains(out, "nobody") {
		t.Fatalf("banning an unknown volunteer: %s", out)
	}

	// status --json: jobs and workers as the API gives them.
	var st struct {
		Jobs    []jobView    `json:"jobs"`
		Workers []workerView `json:"workers"`
	}
	if err := json.Unmarshal([]byte(ctl(0, "status", "--json")), &st); err != nil || len(st.Jobs) != 1 || st.Jobs[0].ID != id {
		t.Fatalf("status --json: %v %+v", err, st)
	}

	// stop ends the job; a second stop is refused.
	// (finishing: its last checkpoint is being written.)
	if out := ctl(0, "jobs", "stop", id); !strings.Contains(out, "stopped") && !strings.Contains(out, "finishing") {
		t.Fatalf("jobs stop: %s", out)
	}
	for deadline := time.Now().Add(30 * time.Second); jobState(t, base, id).State != "stopped"; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after jobs stop, the job is %s", jobState(t, base, id).State)
		}
	}
	ctl(1, "jobs", "stop", id)

	// Usage errors and a wrong token.
	t.Setenv(adminTokenEnv, "")
	for _, c := range []struct {
		want  int
		args  []string
		words string
	}{
		{2, []string{"jobs", "pause", id}, "admin token"},
		{2, []string{"volunteers", "list"}, "admin token"},
		{2, []string{"jobs", "frob", "--token", token}, "unknown jobs command"},
		{2, []string{"jobs", "pause", "--token", token}, "one job ID"},
		{2, []string{"tokens", "issue", "--token", token}, "NAME"},
		{2, []string{"volunteers", "list", "--token-file", filepath.Join(t.TempDir(), "none")}, "cannot read the admin token"},
		{1, []string{"tokens", "list", "--token", "wrong-token-wrong-token"}, "refused the admin token"},
	} {
		if out := ctl(c.want, c.args...); !strings.Contains(out, c.words) {
			t.Errorf("crowdtrain %s: %s; want %q", strings.Join(c.args, " "), out, c.words)
		}
	}
}

func jobState(t *testing.T, base, id string) jobView {
	t.Helper()
	var j jobView
	if err := (apiClient{base: base}).do(context.Background(), http.MethodGet, "/api/v1/jobs/"+id, nil, &j); err != nil {
		t.Fatal(err)
	}
	return j
}
