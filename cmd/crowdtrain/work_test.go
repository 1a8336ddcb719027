package main

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/worker/cuda"
)

func TestBackendFlagIsChecked(t *testing.T) {
	for _, cmd := range []string{"work", "bench"} {
		code, _, stderr := runCmd(t, context.Background(), cmd, "--backend", "gpu")
		if code != 2 || !strings.Contains(stderr, "want auto, cpu or cuda") {
			t.Errorf("%s --backend gpu: exit %d, stderr %q", cmd, code, stderr)
		}
	}
	code, _, stderr := runCmd(t, context.Background(), "work", "--backend", "cuda", "--device", "-1")
	if code != 2 || !strings.Contains(stderr, "--device") {
		t.Errorf("--device -1: exit %d, stderr %q", code, stderr)
	}
}

// Without a GPU, --backend cuda fails saying what is missing, and auto
// falls back to the CPU saying why.
func TestNoGPUIsExplained(t *testing.T) {
	if g, err := cuda.Open(0); err == nil {
		g.Close()
		t.Skip("this machine has a usable GPU")
	}
	code, _, stderr := runCmd(t, context.Background(), "bench", "--backend", "cuda", "--rounds", "1", "--round", "10ms")
	if code != 1 || !strings.Contains(stderr, "--backend cuda: ") || !strings.Contains(stderr, "install") {
		t.Errorf("bench --backend cuda: exit %d, stderr %q", code, stderr)
	}
	code, stdout, stderr := runCmd(t, context.Background(), "bench", "--backend", "auto", "--rounds", "1", "--round", "10ms")
	if code != 0 || !strings.Contains(stderr, "no usable GPU, training on the CPU") || !strings.Contains(stdout, "backend cpu-") || !strings.Contains(stderr, "backend cpu: kernel ") {
		t.Errorf("bench --backend auto: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// The daemon's contract with systemd: SIGTERM hands the work back (the
// coordinator sees the worker leave at once) and exits 0.
func TestWorkStopsCleanlyOnSIGTERM(t *testing.T) {
	testenv.Long(t, "starts a coordinator and a worker process")
	addr := freeAddr(t)
	startProc(t, "serve", "--addr", addr, "--job", "mnist-mlp", "--db", "")
	waitJob(t, addr, 30*time.Second, "the coordinator", func(coordinator.JobView) bool { return true })
	w := startProc(t, "work", "--coordinator", "ws://"+addr+"/ws", "--backend", "auto")
	w.waitLine("connected as", 30*time.Second)
	waitJob(t, addr, 30*time.Second, "the worker to train", func(v coordinator.JobView) bool { return v.Workers == 1 && v.Version > 2 })
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-w.done:
		if err != nil {
			t.Fatalf("work exited with %v after SIGTERM; log:\n%s", err, w.logText())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("work did not stop within 15s of SIGTERM; log:\n%s", w.logText())
	}
	v := waitJob(t, addr, 5*time.Second, "the worker to leave", func(v coordinator.JobView) bool { return v.Workers == 0 })
	if v.LeasesHeld != 0 {
		t.Errorf("%d leases still held after the worker left", v.LeasesHeld)
	}
}
