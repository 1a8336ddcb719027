package web_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/crowdtrain/crowdtrain/internal/testbrowser"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// The contribute page lists the running jobs; a volunteer who picks one
// trains that job (the tab reconnects pinned to it), and the page says
// which job the tab helps.
func TestContributePagePicksAJob(t *testing.T) {
	testenv.Long(t, "trains in Chromium")
	s := newSite(t, longSpec(t, "mnist-mlp"))
	second := longSpec(t, "mnist-mlp")
	second.Name = "second-job"
	other, err := s.srv.AddJob(second)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testbrowser.New(t)
	do(t, ctx, 30*time.Second, chromedp.Navigate(s.http.URL+"/?memory_mb=2048"), chromedp.WaitVisible("#job-pick"))
	waitPage(t, ctx, "both jobs in the picker", func() bool {
		opts := text(t, ctx, "#job-pick")
		return strings.Contains(opts, s.job.ID) && strings.Contains(opts, other.ID) && strings.Contains(opts, "any")
	})
	choose(t, ctx, "#job-pick", other.ID)
	do(t, ctx, 10*time.Second, chromedp.Click("#contribute"))
	s.waitFor("the tab to train the job it picked", time.Minute, func() bool {
		for _, w := range s.srv.WorkerViews() {
			if w.Kind == protocol.KindBrowser && w.Job == other.ID && w.Accepted > 0 {
				return true
			}
		}
		return false
	})
	waitPage(t, ctx, "the page to name the job it helps", func() bool { return strings.Contains(text(t, ctx, "#helping"), other.ID) })
	for _, w := range s.srv.WorkerViews() {
		if w.Kind == protocol.KindBrowser && w.Job != other.ID {
			t.Errorf("a tab pinned to %s computes for %q", other.ID, w.Job)
		}
	}
	if v := s.view(); v.LeasesIssued != 0 {
		t.Errorf("the job the tab did not pick leased it %d tasks", v.LeasesIssued)
	}
	// The choice is remembered: a reload keeps it.
	do(t, ctx, 30*time.Second, chromedp.Reload(), chromedp.WaitVisible("#job-pick"))
	waitPage(t, ctx, "the remembered pick", func() bool {
		return get(t, ctx, chromedp.Evaluate[string](`document.getElementById('job-pick').value`)) == other.ID
	})
}

// The admin page shows a sweep: a row with its best trial, a table of its
// trials with their values and rung metrics, and a chart of them.
func TestAdminPageShowsSweeps(t *testing.T) {
	testenv.Long(t, "drives the admin page in Chromium through a sweep")
	s := newSite(t, longSpec(t, "mnist-mlp"))
	if _, err := s.srv.PauseJob(t.Context(), s.job.ID); err != nil {
		t.Fatal(err)
	}
	spec, err := jobspec.Parse([]byte(`
name: page-sweep
model: mnist-mlp
target_accuracy: 0
max_epochs: 1
eval_every: 1000000
sweep:
  method: grid
  space:
    outer_optimizer.lr: [0.0005, 0.002]
  asha: {rungs: [3000], reduction: 2}
`))
	if err != nil {
		t.Fatal(err)
	}
	sw, err := s.srv.AddSweep(spec)
	if err != nil {
		t.Fatal(err)
	}
	stop := startNativeWorker(t, s.wsURL(), 1)
	defer stop()
	ctx := testbrowser.New(t)
	do(t, ctx, 30*time.Second, chromedp.Navigate(s.http.URL+"/admin"), chromedp.WaitVisible("#token"))
	setInput(t, ctx, "#token", adminToken)
	do(t, ctx, 10*time.Second, chromedp.Click("#signin"))
	waitPage(t, ctx, "the sweep on the page", func() bool {
		return visible(t, ctx, "#sweeps-panel") && strings.Contains(text(t, ctx, "#sweeps"), "page-sweep")
	})
	waitPage(t, ctx, "two trials with a rung metric and a best", func() bool {
		rows := get(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll('#sweep-trials tbody tr').length`))
		return rows == 2 && strings.Contains(text(t, ctx, "#sweep-trials"), "@") && strings.Contains(text(t, ctx, "#sweeps"), sw.ID[:len("page-sweep")])
	})
	waitPage(t, ctx, "the best trial named", func() bool { return strings.Contains(text(t, ctx, "#sweep-trials"), "★") })
	if lines := get(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll('#sweep-chart .trial-line').length`)); lines < 1 {
		t.Errorf("the sweep chart draws %d trial lines", lines)
	}
	// The page polls: a trial scored after its last refresh shows on
	// the next.
	waitPage(t, ctx, "the sweeps table naming the best trial", func() bool {
		v := sw.View(ctx)
		return v.Best != nil && strings.Contains(text(t, ctx, "#sweeps"), v.Best.ID)
	})
}
