package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
)

// pythonWithModules returns a Python 3 that imports numpy, websockets and
// msgpack, or skips the test saying what to install (and fails instead
// when CROWDTRAIN_REQUIRE_BROWSER=1 says CI installed them).
func pythonWithModules(t *testing.T) string {
	t.Helper()
	candidates := []string{"python3", "/usr/bin/python3"}
	for _, c := range candidates {
		path, err := exec.LookPath(c)
		if err != nil {
			continue
		}
		if exec.Command(path, "-c", "import numpy, websockets, msgpack").Run() == nil {
			return path
		}
	}
	msg := "no python3 with numpy, websockets and msgpack (apt-get install python3-numpy python3-websockets python3-msgpack)"
	if os.Getenv("CROWDTRAIN_REQUIRE_BROWSER") == "1" {
		t.Fatal(msg + "; CROWDTRAIN_REQUIRE_BROWSER=1 says these tests must run")
	}
	t.Skip(msg)
	return ""
}

// scripts/pyworker.py, written from docs/PROTOCOL.md alone, trains
// mnist-mlp against a real coordinator: alone on the job, its results are
// accepted, none is rejected, and the job's evaluation after 300 of its
// updates (the one at version 250) is well above chance.
func TestPythonWorkerFromTheProtocolDoc(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a coordinator and a Python worker; skipped with -short")
	}
	python := pythonWithModules(t)
	const token = "pyworker-test-admin-token"
	addr := freeAddr(t)
	startProc(t, "serve", "--addr", addr, "--job", "mnist-mlp", "--db", "", "--admin-token", token)
	waitJob(t, addr, 30*time.Second, "the coordinator", func(coordinator.JobView) bool { return true })

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	py := exec.CommandContext(ctx, python, filepath.Join("..", "..", "scripts", "pyworker.py"),
		"--coordinator", "ws://"+addr+"/ws", "--seconds", "80", "--results", "300")
	var out strings.Builder
	py.Stdout, py.Stderr = &out, &out
	if err := py.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- py.Wait() }()

	// While it works, the admin API shows it with accepted results.
	var seen coordinator.WorkerView
	deadline := time.Now().Add(60 * time.Second)
	for seen.Accepted < 3 && time.Now().Before(deadline) {
		for _, w := range pythonWorkers(t, addr, token) {
			seen = w
		}
		time.Sleep(100 * time.Millisecond)
	}
	if seen.Accepted < 3 {
		t.Fatalf("the Python worker has %d accepted results after 60 s (%+v); its output:\n%s", seen.Accepted, seen, out.String())
	}
	if seen.Rejected != 0 {
		t.Errorf("the Python worker, alone on the job, had %d results rejected; its output:\n%s", seen.Rejected, out.String())
	}
	if err := <-done; err != nil {
		t.Fatalf("pyworker.py: %v\n%s", err, out.String())
	}
	v := waitJob(t, addr, 30*time.Second, "an evaluation of the Python worker's model", func(v coordinator.JobView) bool { return v.Eval != nil })
	if v.UpdatesApplied < 300 || v.UpdatesRejected != 0 {
		t.Errorf("job applied %d updates and rejected %d; the Python worker alone had 300 accepted", v.UpdatesApplied, v.UpdatesRejected)
	}
	if v.Eval.Accuracy < 0.85 {
		t.Errorf("test accuracy %.4f at version %d after the Python worker's updates, want > 0.85 (SGD on mnist-mlp gets there in 250 steps)", v.Eval.Accuracy, v.Eval.Version)
	}
	t.Logf("pyworker: job version %d, test accuracy %.4f at version %d; %s", v.Version, v.Eval.Accuracy, v.Eval.Version, strings.TrimSpace(out.String()))
}

// pythonWorkers lists the connected workers whose backend is numpy.
func pythonWorkers(t *testing.T, addr, token string) []coordinator.WorkerView {
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/api/v1/workers", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var all []coordinator.WorkerView
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&all) != nil {
		return nil
	}
	var py []coordinator.WorkerView
	for _, w := range all {
		if w.Backend == "numpy" {
			py = append(py, w)
		}
	}
	return py
}
