package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/testdisk"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
)

// smallDisk is a tmpfs of mib MiB that the test can fill.
func smallDisk(t *testing.T, mib int) string {
	t.Helper()
	testenv.Long(t, "runs coordinator processes on a tmpfs")
	return testdisk.Mount(t, mib)
}

func metricsText(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

const quickJob = `name: quick
model: mnist-mlp
target_accuracy: 0.9
eval_every: 50
checkpoint_every: 100
`

// The disk is full when the job ends: the final checkpoint fails, the job
// shows "finishing" (not done) with the failure in the API and /metrics,
// and once space is freed the retry writes it and the job is done. Killed
// then (SIGKILL: no shutdown to help), a restart finds it done with its
// final model.
func TestDiskFullAtTheEndRetriesTheFinalCheckpoint(t *testing.T) {
	disk := smallDisk(t, 48)
	dbPath, spec := filepath.Join(disk, "ct.db"), filepath.Join(t.TempDir(), "job.yaml")
	os.WriteFile(spec, []byte(quickJob), 0o644)
	addr := freeAddr(t)
	args := []string{"serve", "--addr", addr, "--db", dbPath, "--job", spec, "--checkpoint-interval", "200ms",
		"--checkpoint-retry-min", "100ms", "--checkpoint-retry-max", "400ms"}
	srv := startProc(t, append(args, "--local-workers", "1")...)
	waitJob(t, addr, time.Minute, "the first checkpoint", func(v coordinator.JobView) bool { return v.LastCheckpoint != nil })
	freeDisk := testdisk.Fill(t, disk)

	ended := waitJob(t, addr, 2*time.Minute, "the job to end with its final checkpoint failing", func(v coordinator.JobView) bool {
		// The writer may still be retrying an older checkpoint for a moment
		// when the job ends: wait for it to be failing on the final one.
		return v.State == coordinator.StateFinishing && v.CheckpointFailure != nil && v.CheckpointFailure.Version == v.Version &&
			v.CheckpointFailure.Failures >= 2
	})
	if f := ended.CheckpointFailure; !strings.Contains(f.LastError, "full") {
		t.Fatalf("checkpoint failure %+v; want the final version %d failing with disk full", f, ended.Version)
	}
	waitJob(t, addr, 10*time.Second, "the final checkpoint to be retried", func(v coordinator.JobView) bool {
		f := v.CheckpointFailure
		return f != nil && f.Version == ended.Version && f.Failures > ended.CheckpointFailure.Failures
	})
	code, stdout, stderr := runCmd(t, context.Background(), "status", "--coordinator", "http://"+addr)
	if code != 0 || !strings.Contains(stdout, "finishing") || !strings.Contains(stdout, "NOT WRITTEN") {
		t.Errorf("status exit %d while the final checkpoint fails; want it to show finishing and the checkpoint NOT WRITTEN:\n%s%s", code, stdout, stderr)
	}
	m := metricsText(t, addr)
	for _, want := range []string{`crowdtrain_checkpoint_write_failures_total{job="` + ended.ID + `"}`,
		`crowdtrain_checkpoint_last_error_info{error=`, `crowdtrain_checkpoint_pending_since_seconds{job="` + ended.ID + `"}`} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(m, `crowdtrain_checkpoint_pending_since_seconds{job="`+ended.ID+`"} 0`+"\n") {
		t.Error("/metrics says no checkpoint is pending")
	}

	freeDisk()
	done := waitJob(t, addr, 30*time.Second, "the final checkpoint to be written once space is back", func(v coordinator.JobView) bool {
		return v.State != coordinator.StateFinishing
	})
	if done.State != coordinator.StateDone || done.CheckpointFailure != nil || done.LastCheckpoint == nil ||
		done.LastCheckpoint.Version != ended.Version || done.Version != ended.Version {
		t.Fatalf("after freeing space: %s at v%d, last checkpoint %+v, failure %+v; want done with v%d written",
			done.State, done.Version, done.LastCheckpoint, done.CheckpointFailure, ended.Version)
	}
	srv.kill()

	db := openChecked(t, dbPath)
	rec, err := db.Job(context.Background(), done.ID)
	if err != nil || rec.State != coordinator.StateDone {
		t.Fatalf("job record after the kill: %+v, %v; want done", rec, err)
	}
	last, err := db.LatestCheckpoint(context.Background(), done.ID)
	db.Close()
	if err != nil || last.Version != done.Version {
		t.Fatalf("latest checkpoint v%d (%v), want the final v%d", last.Version, err, done.Version)
	}
	// No job is unfinished, so the restart also starts --job anew: find ours.
	startProc(t, args...)
	var again coordinator.JobView
	for deadline := time.Now().Add(time.Minute); again.ID == "" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		jobs, _ := getJobs(addr)
		for _, j := range jobs {
			if j.ID == done.ID {
				again = j
			}
		}
	}
	if again.ID != done.ID || again.State != coordinator.StateDone || again.Version != done.Version || again.Eval == nil ||
		again.Eval.Accuracy != done.Eval.Accuracy {
		t.Fatalf("after a restart: %s %s v%d eval %+v; want %s done at v%d with accuracy %v",
			again.ID, again.State, again.Version, again.Eval, done.ID, done.Version, done.Eval.Accuracy)
	}
}

// SIGTERM while the disk is still full: serve tries the checkpoint it
// could not write, says it is not written and exits non-zero; the next
// start resumes from the last durable checkpoint.
func TestSIGTERMWithTheDiskFullExitsNonZeroAndResumes(t *testing.T) {
	disk := smallDisk(t, 48)
	dbPath, spec := filepath.Join(disk, "ct.db"), filepath.Join(t.TempDir(), "job.yaml")
	os.WriteFile(spec, []byte(strings.Replace(quickJob, "0.9", "0.995", 1)), 0o644) // runs on
	addr := freeAddr(t)
	args := []string{"serve", "--addr", addr, "--db", dbPath, "--job", spec, "--checkpoint-interval", "200ms",
		"--checkpoint-retry-min", "100ms", "--checkpoint-retry-max", "400ms", "--store-shutdown-timeout", "2s"}
	srv := startProc(t, append(args, "--local-workers", "1")...)
	written := waitJob(t, addr, time.Minute, "a checkpoint past version 0", func(v coordinator.JobView) bool {
		return v.LastCheckpoint != nil && v.LastCheckpoint.Version > 0
	})
	freeDisk := testdisk.Fill(t, disk)
	failing := waitJob(t, addr, time.Minute, "a checkpoint to fail", func(v coordinator.JobView) bool { return v.CheckpointFailure != nil })
	durable := failing.LastCheckpoint.Version
	if durable < written.LastCheckpoint.Version {
		t.Fatalf("last checkpoint went back from v%d to v%d", written.LastCheckpoint.Version, durable)
	}

	start := time.Now()
	srv.cmd.Process.Signal(syscall.SIGTERM)
	var err error
	select {
	case err = <-srv.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not exit within 30s of SIGTERM with the disk full; log:\n%s", srv.logText())
	}
	srv.cmd.ProcessState = &os.ProcessState{} // exited; cleanup must not kill
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("serve exited with %v after SIGTERM with the disk full; want status 1\n%s", err, srv.logText())
	}
	log := srv.logText()
	if !strings.Contains(log, "checkpoint not written") || !strings.Contains(log, "free space") ||
		!strings.Contains(log, "resumes the job from its last durable checkpoint") {
		t.Fatalf("serve's last words do not say the checkpoint was not written and what happens next:\n%s", log)
	}
	t.Logf("exited in %v: %s", time.Since(start).Round(time.Millisecond), log[strings.LastIndex(log, "crowdtrain serve:"):])

	freeDisk()
	db := openChecked(t, dbPath)
	last, err := db.LatestCheckpoint(context.Background(), failing.ID)
	db.Close()
	if err != nil || last.Version < durable || last.Version >= failing.CheckpointFailure.Version {
		t.Fatalf("latest checkpoint v%d (%v); want the last durable one (v%d or later), before the failed v%d",
			last.Version, err, durable, failing.CheckpointFailure.Version)
	}
	startProc(t, args...) // no workers: the resumed version stays put
	resumed := waitJob(t, addr, time.Minute, "the resumed job", func(coordinator.JobView) bool { return true })
	if resumed.ID != failing.ID || resumed.State != coordinator.StateRunning || resumed.Version != last.Version || resumed.Run != 2 {
		t.Fatalf("after a restart: %s %s v%d run %d; want %s running from v%d in run 2",
			resumed.ID, resumed.State, resumed.Version, resumed.Run, failing.ID, last.Version)
	}
}
