package web_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/testbrowser"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/jobspec"
)

// signInAdmin opens the admin page in ctx and signs in.
func signInAdmin(t testing.TB, ctx context.Context, s *site) {
	t.Helper()
	do(t, ctx, 30*time.Second, chromedp.Navigate(s.http.URL+"/admin"), chromedp.WaitVisible("#token"))
	setInput(t, ctx, "#token", adminToken)
	do(t, ctx, 10*time.Second, chromedp.Click("#signin"))
	waitAdmin(t, ctx, "the admin area after signing in", func() bool { return visible(t, ctx, "#admin") })
}

// throughputPoints is how many points the page's throughput chart holds.
func throughputPoints(t testing.TB, ctx context.Context) int {
	t.Helper()
	return get(t, ctx, chromedp.Evaluate[int](`state.charts.throughput ? state.charts.throughput.data[0].length : -1`))
}

// A job that reaches its target, watched on the admin page: it reads as
// finished with its final figures, not as an epoch under way; the
// throughput chart stops where the job stopped; the settings form is
// disabled and says why. Its wire shows fp32 updates as uncompressed.
func TestAdminPageShowsAFinishedJob(t *testing.T) {
	testenv.Long(t, "trains a job to its target under the admin page in Chromium")
	spec, err := jobspec.Load("mnist-mlp")
	if err != nil {
		t.Fatal(err)
	}
	spec.TargetAccuracy = 0.5 // reached in a few dozen updates
	spec.EvalEvery = 20
	s := newSite(t, spec)
	ctx := testbrowser.New(t)
	signInAdmin(t, ctx, s)
	waitAdmin(t, ctx, "the running job on screen", func() bool { return strings.Contains(text(t, ctx, "#job-state"), "running") })
	if get(t, ctx, chromedp.Evaluate[bool](`Array.from(document.getElementById('settings-form').elements).some((e) => e.disabled)`)) {
		t.Error("the settings form of a running job has disabled fields")
	}

	stop := startNativeWorker(t, s.wsURL(), 1)
	defer stop()
	s.waitFor("the job to reach its target", 3*time.Minute, func() bool { return s.view().State == coordinator.StateDone })
	waitAdmin(t, ctx, "the done state on screen", func() bool { return strings.TrimSpace(text(t, ctx, "#job-state")) == "done" })
	v := s.view()

	// 1. Finished, with its final figures: no share of an epoch.
	epoch := text(t, ctx, "#job-epoch")
	wantAcc := fmt.Sprintf("final accuracy %.2f%%", v.Eval.Accuracy*100)
	if strings.Contains(epoch, "% done") || !strings.Contains(epoch, "finished") ||
		!strings.Contains(epoch, wantAcc) || !strings.HasPrefix(epoch, fmt.Sprintf("%d complete", v.Epoch)) {
		t.Errorf("a finished job's epoch reads %q; want %d complete, finished, with its %s", epoch, v.Epoch, wantAcc)
	}
	if cell := get(t, ctx, chromedp.Evaluate[string](`document.querySelector('#jobs tbody tr').cells[3].textContent`)); strings.Contains(cell, "%") {
		t.Errorf("the jobs table shows a finished job's epoch as %q, a share of an epoch under way", cell)
	}

	// 2. The throughput chart stops: the job's events still come every
	// second, and add nothing to it.
	before := throughputPoints(t, ctx)
	time.Sleep(3 * time.Second)
	if after := throughputPoints(t, ctx); after != before {
		t.Errorf("the throughput chart went from %d to %d points after the job ended", before, after)
	}
	if live := text(t, ctx, "#live"); live != "live" {
		t.Errorf("the event stream reads %q; the check above means nothing without it", live)
	}

	// 3. The settings cannot be edited, and the page says why.
	enabled := get(t, ctx, chromedp.Evaluate[[]string](`Array.from(document.getElementById('settings-form').elements).filter((e) => !e.disabled).map((e) => e.id)`))
	if len(enabled) != 0 {
		t.Errorf("the settings form of a finished job still lets the operator edit %v", enabled)
	}
	if why := text(t, ctx, "#settings-closed"); !visible(t, ctx, "#settings-closed") || !strings.Contains(why, "ended (done)") {
		t.Errorf("the settings form says %q (shown: %v); want why it is disabled", why, visible(t, ctx, "#settings-closed"))
	}

	// The wire: fp32 updates are not compressed; what the snapshots save
	// is shown apart.
	wire := text(t, ctx, "#job-wire")
	var upd float64
	i := strings.Index(wire, "updates ")
	if i < 0 {
		t.Fatalf("the job's wire reads %q; want the updates' compression", wire)
	}
	if _, err := fmt.Sscanf(wire[i:], "updates %fx (fp32)", &upd); err != nil || upd > 1 || upd < 0.9 {
		t.Errorf("the job's wire reads %q: updates' compression %v (%v), want about 1 (fp32)", wire, upd, err)
	}
	if !strings.Contains(wire, "snapshots and deltas ") {
		t.Errorf("the job's wire reads %q; want the snapshots' compression apart", wire)
	}
	writeArtifact(t, "admin-finished.png", get(t, ctx, chromedp.FullScreenshot(100)))
}
