package coordinator_test

import (
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/worker"
)

// Several jobs on one grid (docs/SCHEDULING.md): real workers over real
// websockets, placed by the grid's scheduler.

// endlessMLP is mnist-mlp that trains until stopped: no target, no
// evaluations in the way.
func endlessMLP(t testing.TB, name string, weight float64) jobspec.Spec {
	return jobSpec(t, "mnist-mlp", func(s *jobspec.Spec) {
		s.Name, s.Weight = name, weight
		s.TargetAccuracy, s.MaxEpochs, s.EvalEvery = 0, 1000, 1<<30
		// The grid's shares are of compute granted; a result refused
		// as stale was granted but adds no examples. With most of six
		// workers on one job of a loaded machine, staleness passed 8
		// (a CI run: 2.64x examples for a 3x share); these jobs train
		// to no target, so no result is refused for its age.
		s.MaxStaleness = 1 << 10
	})
}

// examplesOf is each job's examples_seen, by id.
func (g *testGrid) examplesOf() map[string]int64 {
	g.t.Helper()
	var views []coordinator.JobView
	if code := g.getJSON("/api/v1/jobs", &views); code != http.StatusOK {
		g.t.Fatalf("GET /api/v1/jobs: %d", code)
	}
	out := map[string]int64{}
	for _, v := range views {
		out[v.ID] = v.ExamplesSeen
	}
	return out
}

func (g *testGrid) workerViews() []coordinator.WorkerView {
	g.t.Helper()
	var views []coordinator.WorkerView
	if code := g.getJSON("/api/v1/workers", &views); code != http.StatusOK {
		g.t.Fatalf("GET /api/v1/workers: %d", code)
	}
	return views
}

// share measures each job's examples over d.
func (g *testGrid) share(d time.Duration) map[string]int64 {
	before := g.examplesOf()
	time.Sleep(d)
	after := g.examplesOf()
	for id := range after {
		after[id] -= before[id]
	}
	return after
}

// Two jobs with weights 3:1 and six workers: six cannot be split 4.5 :
// 1.5, so one worker moves between them, and over a minute the shares
// come out 3:1. A weight changed live shows within 5 s.
func TestFairShareAcrossJobs(t *testing.T) {
	testenv.Long(t, "measures the workers' shares over a minute")
	t.Parallel()
	g := newTestGrid(t, endlessMLP(t, "three", 3))
	one, err := g.srv.AddJob(endlessMLP(t, "one", 1))
	if err != nil {
		t.Fatal(err)
	}
	three := g.job
	for range 6 {
		g.addWorker(1, nil)
	}
	g.waitFor("both jobs to train", time.Minute, func(coordinator.JobView) bool {
		ex := g.examplesOf()
		return ex[three.ID] > 5000 && ex[one.ID] > 1000
	})
	time.Sleep(3 * time.Second) // past the start
	got := g.share(time.Minute)
	ratio := float64(got[three.ID]) / float64(got[one.ID])
	t.Logf("over a minute: %d examples for weight 3, %d for weight 1: ratio %.3f", got[three.ID], got[one.ID], ratio)
	if math.Abs(ratio-3)/3 > 0.10 {
		t.Errorf("compute ratio %.3f over a minute, want 3 within 10%%", ratio)
	}

	// Reverse the weights: within 5 s the other job leads.
	if code := g.adminJSON(http.MethodPatch, "/api/v1/jobs/"+one.ID, map[string]any{"weight": 3}, nil); code != http.StatusOK {
		t.Fatalf("PATCH weight: %d", code)
	}
	if code := g.adminJSON(http.MethodPatch, "/api/v1/jobs/"+three.ID, map[string]any{"weight": 1}, nil); code != http.StatusOK {
		t.Fatalf("PATCH weight: %d", code)
	}
	// Within 5 s the new split holds: measured over the 20 s after that
	// (on a loaded machine the first seconds, each worker staying 2 s
	// where it is, showed 1.06x; one 5 s window of a full make test,
	// with an epoch's end in it, 1.26x after 2.72x in the 5 s before;
	// 10 s windows beside two busy cores swung from 2.4x to 5.8x as the
	// job below its share caught up).
	first := g.share(5 * time.Second)
	got = g.share(20 * time.Second)
	ratio = float64(got[one.ID]) / float64(got[three.ID])
	t.Logf("in the 5 s after the weights became 1:3: ratio %.3f; in the 20 s after those: %.3f",
		float64(first[one.ID])/float64(first[three.ID]), ratio)
	if ratio < 2 {
		t.Errorf("5 to 25 s after the change the new weight-3 job got %.2fx the other's examples, want at least 2x", ratio)
	}
	var v coordinator.JobView
	g.adminJSON(http.MethodGet, "/api/v1/jobs/"+one.ID, nil, &v)
	if v.Weight != 3 || v.Priority != 0 {
		t.Errorf("job JSON weight %v priority %d after the PATCH", v.Weight, v.Priority)
	}
}

// When a job finishes, each of its workers computes for another job
// within a second, on the same connection.
func TestHandOffWhenJobFinishes(t *testing.T) {
	testenv.Long(t, "trains a job through a full epoch of MNIST")
	short := jobSpec(t, "mnist-mlp", func(s *jobspec.Spec) {
		s.Name, s.TargetAccuracy, s.MaxEpochs, s.EvalEvery = "short", 0, 1, 1<<30
	})
	g := newTestGrid(t, short)
	long, err := g.srv.AddJob(endlessMLP(t, "long", 1))
	if err != nil {
		t.Fatal(err)
	}
	var ws []*worker.Worker
	for range 4 {
		ws = append(ws, g.addWorker(1, nil))
	}
	g.waitFor("workers on the short job", time.Minute, func(v coordinator.JobView) bool { return v.Workers >= 1 && v.ExamplesSeen > 0 })
	ids := map[string]bool{}
	for _, w := range g.workerViews() {
		ids[w.ID] = true
	}
	v := g.waitDone(5 * time.Minute)
	if v.State != coordinator.StateDone || v.DoneAt == nil {
		t.Fatalf("the short job ended %s (%s)", v.State, v.Reason)
	}
	var moved time.Time
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		views := g.workerViews()
		all := len(views) == 4
		for _, w := range views {
			all = all && w.Job == long.ID
		}
		if all {
			moved = time.Now()
			break
		}
	}
	if moved.IsZero() {
		t.Fatalf("10 s after the short job ended its workers are on %+v", g.workerViews())
	}
	took := moved.Sub(*v.DoneAt)
	t.Logf("every worker on the other job %v after the job ended", took.Round(time.Millisecond))
	if took > time.Second {
		t.Errorf("workers took %v to move to the other job, want at most 1 s", took)
	}
	before := map[string]int64{}
	for _, w := range g.workerViews() {
		before[w.ID] = w.Accepted
		if !ids[w.ID] {
			t.Errorf("worker %s is new: the hand-off must not reconnect", w.ID)
		}
	}
	time.Sleep(time.Second)
	for _, w := range g.workerViews() {
		if w.Accepted <= before[w.ID] {
			t.Errorf("worker %s accepted nothing for %s in the second after moving", w.ID, long.ID)
		}
	}
	for i, w := range ws {
		if c := w.Stats().Connects; c != 1 {
			t.Errorf("worker %d connected %d times", i, c)
		}
	}
}

// A job that needs more memory than a browser tab offers never leases to
// it, waits with a warning, and the tab trains a job it can hold.
func TestJobsOnlyGetWorkersThatCanRunThem(t *testing.T) {
	big := jobSpec(t, "mnist-mlp", func(s *jobspec.Spec) {
		s.Name, s.TargetAccuracy, s.MaxEpochs = "big", 0, 1000
		s.Requires.MinMemoryMB = 4096
	})
	g := newTestGrid(t, big)
	tab := g.addWorkerWith(1, nil, func(c *worker.Config) {
		c.Kind, c.Caps = protocol.KindBrowser, &protocol.Caps{MemoryMB: 2048}
	})
	time.Sleep(3 * time.Second)
	v := g.jobView()
	if v.LeasesIssued != 0 || v.ExamplesSeen != 0 {
		t.Fatalf("the 2 GB browser worker was leased %d tasks of a job that needs 4 GB", v.LeasesIssued)
	}
	if v.State != coordinator.StateRunning || !strings.Contains(v.Warning, "2048 MB") || !strings.Contains(v.Warning, "4096 MB") {
		t.Errorf("job %s, warning %q: want it running, waiting, and the warning to say what the workers lack", v.State, v.Warning)
	}
	small, err := g.srv.AddJob(endlessMLP(t, "small", 1))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for tab.Stats().Accepted == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if tab.Stats().Accepted == 0 || tab.Stats().JobID != small.ID {
		t.Fatalf("the tab did not train the job it can hold: %+v", tab.Stats())
	}
	if v := g.jobView(); v.LeasesIssued != 0 {
		t.Errorf("the big job leased %d tasks while only the tab was connected", v.LeasesIssued)
	}
	// A native worker with the memory takes the big job.
	g.addWorkerWith(1, nil, func(c *worker.Config) { c.Caps = &protocol.Caps{MemoryMB: 8192} })
	v = g.waitFor("the big job to train on the native worker", 30*time.Second, func(v coordinator.JobView) bool { return v.ExamplesSeen > 0 })
	if v.Warning != "" {
		t.Errorf("warning %q once a worker can run it", v.Warning)
	}
}

// A worker pinned to a job (crowdtrain work --job ID) computes only for
// it; a pin to a job that is not running leaves it idle, saying why.
func TestPinnedWorkerComputesOnlyForItsJob(t *testing.T) {
	g := newTestGrid(t, endlessMLP(t, "first", 1))
	second, err := g.srv.AddJob(endlessMLP(t, "second", 1))
	if err != nil {
		t.Fatal(err)
	}
	w := g.addWorkerWith(1, nil, func(c *worker.Config) { c.Job = second.ID })
	deadline := time.Now().Add(30 * time.Second)
	for w.Stats().Accepted < 20 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if s := w.Stats(); s.Accepted < 20 || s.JobID != second.ID {
		t.Fatalf("pinned worker: %+v", s)
	}
	if v := g.jobView(); v.LeasesIssued != 0 {
		t.Errorf("the job the worker is not pinned to leased it %d tasks", v.LeasesIssued)
	}
	idle := g.addWorkerWith(1, nil, func(c *worker.Config) { c.Job = "no-such-job" })
	time.Sleep(time.Second)
	if s := idle.Stats(); !s.Idle || s.Accepted != 0 || s.JobID != "" {
		t.Errorf("a worker pinned to no job: %+v, want idle", s)
	}
}
