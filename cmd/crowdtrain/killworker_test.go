package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
)

// leftLine matches the coordinator's log line for a worker that left, with
// the number of its leases queued again and its results accepted and
// rejected.
var leftLine = regexp.MustCompile(`worker \S+ left \(.*; (\d+) leases queued again\): (\d+) accepted, (\d+) rejected`)

// connectedAs matches a worker's log line naming the id it got (quoted
// in the message, which the text log quotes again).
var connectedAs = regexp.MustCompile(`connected as \\"([^"\\]+)\\"`)

// DiLoCo (H=16, inner AdamW, rounds of 2) with each of its two native
// worker processes SIGKILLed every 5 s and started again (in turn, one
// kill every 2.5 s: the job takes about 5 s undisturbed on a fast
// machine). Each kill lands while the worker holds a lease (it is stopped
// until the API shows one). The job still reaches 97%, nothing is rejected
// as invalid, and each killed worker's leases are queued again as soon as
// its connection drops, so no round waits out its timeout and no lease its
// deadline.
func TestDiLoCoSurvivesAWorkerSIGKILLedEvery5s(t *testing.T) {
	testenv.Long(t, "runs coordinator and worker processes")
	dir := t.TempDir()
	spec := filepath.Join(dir, "job.yaml")
	os.WriteFile(spec, []byte("name: diloco-kill\nmodel: mnist-mlp\nmode: diloco\nlocal_steps: 16\nround_size: 2\n"+
		"inner_optimizer:\n  type: adamw\n"), 0o644)
	addr := freeAddr(t)
	srv := startProc(t, "serve", "--addr", addr, "--db", "", "--job", spec, "--admin-token", modesAdminToken)
	ws := "ws://" + addr + "/ws"
	type worker struct {
		p  *proc
		id string
	}
	startWorker := func() worker {
		p := startProc(t, "work", "--coordinator", ws)
		return worker{p, connectedAs.FindStringSubmatch(p.waitLine("connected as", 30*time.Second))[1]}
	}
	workerView := func(id string) coordinator.WorkerView {
		var ws []coordinator.WorkerView
		adminCall(t, http.MethodGet, "http://"+addr+"/api/v1/workers", nil, &ws)
		for _, w := range ws {
			if w.ID == id {
				return w
			}
		}
		return coordinator.WorkerView{}
	}
	// killHoldingLeases stops w until the coordinator shows it holding a
	// lease, then SIGKILLs it and returns what the coordinator showed; a
	// view with no leases (and w running on) if it held none in a few tries.
	killHoldingLeases := func(w worker) coordinator.WorkerView {
		for range 20 {
			w.p.cmd.Process.Signal(syscall.SIGSTOP)
			time.Sleep(50 * time.Millisecond) // let most results in flight land
			if wv := workerView(w.id); len(wv.Leases) > 0 {
				w.p.kill()
				return wv
			}
			w.p.cmd.Process.Signal(syscall.SIGCONT)
			time.Sleep(20 * time.Millisecond)
		}
		return coordinator.WorkerView{}
	}

	workers := []worker{startWorker(), startWorker()}
	waitJob(t, addr, time.Minute, "the first diloco result", func(v coordinator.JobView) bool {
		return v.RoundResults > 0 || v.Version > 0
	})
	kills, held := 0, 0
	every := 5 * time.Second / time.Duration(len(workers))
	nextKill, deadline := time.Now().Add(every), time.Now().Add(3*time.Minute)
	var v coordinator.JobView
	for {
		if jobs, err := getJobs(addr); err == nil && len(jobs) == 1 {
			v = jobs[0]
			if v.State != coordinator.StateRunning && v.State != coordinator.StateFinishing {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("job not finished after 3 minutes and %d kills: %+v\ncoordinator log:\n%s", kills, v, srv.logText())
		}
		if time.Now().Before(nextKill) {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		i := kills % len(workers)
		wv := killHoldingLeases(workers[i])
		n := len(wv.Leases)
		if n == 0 {
			continue // it held no lease: look at the job, then try again
		}
		// Its leases come back when the connection drops, not at their
		// deadline: each is queued again or was settled by a result that
		// was on its way when the worker stopped, or the job ended.
		line := srv.waitLine(fmt.Sprintf("worker %s left", workers[i].id), 5*time.Second)
		m := leftLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("unexpected log line for a worker that left: %s", line)
		}
		queued, accepted, rejected := atoi(m[1]), atoi(m[2]), atoi(m[3])
		settled := accepted + rejected - int(wv.Accepted+wv.Rejected)
		if queued+settled != n && getJobState(addr) == coordinator.StateRunning {
			t.Errorf("killed worker %s held %d leases and settled %d after; the coordinator logged: %s", workers[i].id, n, settled, line)
		}
		kills++
		held += n
		workers[i] = startWorker()
		nextKill = nextKill.Add(every)
	}
	if v.State != coordinator.StateDone || v.Eval == nil || v.Eval.Accuracy < 0.97 || v.Mode != "diloco" {
		t.Fatalf("job ended %s in mode %s (%s), eval %+v; want done in diloco at >= 0.97", v.State, v.Mode, v.Reason, v.Eval)
	}
	if kills == 0 {
		t.Fatalf("the job finished before a worker was killed holding a lease (%d examples): the test proves nothing on a machine this fast", v.ExamplesSeen)
	}
	if v.Rejections["invalid"] != 0 {
		t.Errorf("invalid rejections: %v", v.Rejections)
	}
	if v.RoundsShort != 0 || v.LeasesExpired != 0 {
		t.Errorf("%d rounds closed short at their timeout and %d leases expired: a killed worker's leases should be queued again when its connection drops",
			v.RoundsShort, v.LeasesExpired)
	}
	t.Logf("%d kills holding %d leases, each queued again when its connection dropped (or settled by a result in flight); accuracy %.4f at version %d, %d examples, %d results, rejections %v",
		kills, held, v.Eval.Accuracy, v.Eval.Version, v.ExamplesSeen, v.UpdatesApplied, v.Rejections)
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// getJobState is the only job's state, or "" if the API does not answer.
func getJobState(addr string) string {
	if jobs, err := getJobs(addr); err == nil && len(jobs) == 1 {
		return jobs[0].State
	}
	return ""
}
