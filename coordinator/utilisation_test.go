package coordinator_test

import (
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/worker"
)

// A worker's utilisation is the share of its wall time spent computing,
// shown alike in the job view, the worker view and /metrics. How large
// the share is depends on the machine's load, so this test asserts only
// that it is there and in (0, 1] in each of the three places; the
// rule itself is tested on a fake clock in utilisation_internal_test.go.
func TestUtilisationIsTheShareOfTimeComputing(t *testing.T) {
	const token = "metrics-token-0123456789"
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) { c.MetricsToken = token })
	w := g.addWorker(1, func(b worker.Backend) worker.Backend { return &slowBackend{Backend: b, delay: 40 * time.Millisecond} })
	v := g.waitFor("20 accepted updates", time.Minute, func(v coordinator.JobView) bool { return v.UpdatesApplied >= 20 })
	if !(v.WorkerUtilisation > 0 && v.WorkerUtilisation <= 1) {
		t.Errorf("job view: worker_utilisation %.3f, want in (0, 1]", v.WorkerUtilisation)
	}
	var views []coordinator.WorkerView
	if code := g.getJSON("/api/v1/workers", &views); code != http.StatusOK || len(views) != 1 {
		t.Fatalf("GET /api/v1/workers: %d, %d workers", code, len(views))
	}
	if u := views[0].Utilisation; !(u > 0 && u <= 1) || views[0].ID != w.Stats().WorkerID {
		t.Errorf("worker view %s: utilisation %.3f, want in (0, 1]", views[0].ID, u)
	}
	_, body := g.send(http.DefaultClient, http.MethodGet, "/metrics", nil, bearer(token))
	for _, name := range []string{"crowdtrain_worker_utilisation", "crowdtrain_job_worker_utilisation"} {
		m := regexp.MustCompile(`(?m)^` + name + `\{[^}]*\} ([0-9.e+-]+)$`).FindSubmatch(body)
		if m == nil {
			t.Errorf("/metrics has no %s", name)
			continue
		}
		if u, err := strconv.ParseFloat(string(m[1]), 64); err != nil || !(u > 0 && u <= 1) {
			t.Errorf("/metrics: %s %s, want in (0, 1]", name, m[1])
		}
	}
	t.Logf("utilisation: job %.3f, worker %.3f", v.WorkerUtilisation, views[0].Utilisation)
}
