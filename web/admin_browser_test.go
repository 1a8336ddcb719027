package web_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/testbrowser"
)

// setInput types value into an input or textarea the way a user does,
// firing input and change.
func setInput(t testing.TB, ctx context.Context, sel, value string) {
	t.Helper()
	get(t, ctx, chromedp.Evaluate[bool](fmt.Sprintf(
		`(() => { const e = document.querySelector(%q); e.focus(); e.value = %q;
		  e.dispatchEvent(new Event('input', {bubbles: true})); e.dispatchEvent(new Event('change', {bubbles: true})); e.blur(); return true })()`, sel, value)))
}

func visible(t testing.TB, ctx context.Context, sel string) bool {
	t.Helper()
	return get(t, ctx, chromedp.Evaluate[bool](fmt.Sprintf(
		`(() => { const e = document.querySelector(%q); return !!e && !e.closest('[hidden]') && e.offsetParent !== null })()`, sel)))
}

func screenVersion(t testing.TB, ctx context.Context) int64 {
	t.Helper()
	s := strings.ReplaceAll(strings.TrimSpace(text(t, ctx, "#job-version")), ",", "")
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return -1
	}
	return v
}

// The operator's page: a wrong token is refused; signed in, the job's
// version rises on screen; Pause stops it and Resume moves it again;
// max_staleness changes through the API; an invalid spec shows its error.
func TestAdminPage(t *testing.T) {
	s := newSite(t, longSpec(t, "mnist-mlp"))
	ctx := testbrowser.New(t)
	stop := startNativeWorker(t, s.wsURL(), 1)
	defer stop()

	do(t, ctx, 30*time.Second, chromedp.Navigate(s.http.URL+"/admin"), chromedp.WaitVisible("#token"))
	if visible(t, ctx, "#admin") {
		t.Fatal("the admin area shows before signing in")
	}
	setInput(t, ctx, "#token", "not-the-admin-token")
	do(t, ctx, 10*time.Second, chromedp.Click("#signin"))
	waitPage(t, ctx, "the wrong token to be refused", func() bool { return strings.TrimSpace(text(t, ctx, "#signin-error")) != "" })
	if visible(t, ctx, "#admin") {
		t.Fatal("a wrong token opened the admin area")
	}

	setInput(t, ctx, "#token", adminToken)
	do(t, ctx, 10*time.Second, chromedp.Click("#signin"))
	waitPage(t, ctx, "the admin area after signing in", func() bool { return visible(t, ctx, "#admin") })
	waitPage(t, ctx, "the job on screen", func() bool { return screenVersion(t, ctx) >= 0 })
	v0 := screenVersion(t, ctx)
	waitPage(t, ctx, "the version to rise on screen", func() bool { return screenVersion(t, ctx) > v0+5 })

	do(t, ctx, 10*time.Second, chromedp.Click("#pause"))
	s.waitFor("the job to pause", 10*time.Second, func() bool { return s.view().State == coordinator.StatePaused })
	waitPage(t, ctx, "the paused state on screen", func() bool { return strings.Contains(text(t, ctx, "#job-state"), "paused") })
	paused := s.view().Version
	time.Sleep(2 * time.Second)
	if v := s.view().Version; v != paused {
		t.Fatalf("version moved from %d to %d while paused", paused, v)
	}
	if sv := screenVersion(t, ctx); sv != paused {
		t.Errorf("the page shows version %d, the job is at %d", sv, paused)
	}
	do(t, ctx, 10*time.Second, chromedp.Click("#resume"))
	waitPage(t, ctx, "the version to move again after Resume", func() bool { return screenVersion(t, ctx) > paused+5 })

	setInput(t, ctx, "#max-staleness", "3")
	do(t, ctx, 10*time.Second, chromedp.Click("#apply-settings"))
	s.waitFor("max_staleness 3 in the API", 10*time.Second, func() bool { return s.view().MaxStaleness == 3 })

	// The mode too: async warm-up, then DiLoCo, from the page, once the
	// page has finished the last change (Apply is disabled until then).
	// Chosen and applied in one go, so the page's refresh cannot come
	// between.
	waitPage(t, ctx, "Apply to be enabled again", func() bool {
		return get(t, ctx, chromedp.Evaluate[bool](`!document.getElementById('apply-settings').disabled`))
	})
	get(t, ctx, chromedp.Evaluate[bool](`(() => { const m = document.getElementById('mode');
		m.value = 'diloco'; m.dispatchEvent(new Event('change'));
		document.getElementById('apply-settings').click(); return true; })()`))
	s.waitFor("mode diloco in the API", 10*time.Second, func() bool { return s.view().Mode == "diloco" })
	waitPage(t, ctx, "the mode on the page", func() bool { return strings.Contains(text(t, ctx, "#job-mode"), "diloco") })
	if v := s.view(); v.Spec.OuterOptimizer.Type != "momentum" || v.MaxStaleness != 3 {
		t.Errorf("after the page's mode change: outer %+v, max_staleness %d", v.Spec.OuterOptimizer, v.MaxStaleness)
	}

	// The wire: the job's bytes per example and compression, the
	// worker's bytes, its link as it measured it, its H and comm share.
	// The job is fp32, so only snapshot deltas compress it: the page
	// shows the updates' compression at most 1 and the snapshots' at
	// least 1 (DiLoCo's workers fetch deltas).
	waitPage(t, ctx, "the job's wire on screen", func() bool {
		w := text(t, ctx, "#job-wire")
		var upd, snap float64
		i, j := strings.Index(w, "updates "), strings.Index(w, "snapshots and deltas ")
		if i < 0 || j < 0 || !strings.Contains(w, "B/example") {
			return false
		}
		if _, err := fmt.Sscanf(w[i:], "updates %fx (fp32)", &upd); err != nil {
			return false
		}
		if _, err := fmt.Sscanf(w[j:], "snapshots and deltas %fx", &snap); err != nil {
			return false
		}
		return upd > 0 && upd <= 1 && snap >= 1
	})
	// The worker's H is its last lease's: DiLoCo's local_steps of 15.
	waitPage(t, ctx, "the worker's wire on screen", func() bool {
		cells := get(t, ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('#workers tbody tr:first-child td')).map((td) => td.textContent)`))
		ws := s.srv.WorkerViews()
		return len(cells) == 17 && len(ws) == 1 && strings.Contains(cells[10], "MB") && strings.Contains(cells[11], "bit/s") &&
			cells[12] == strconv.Itoa(ws[0].LocalSteps) && ws[0].LocalSteps == 15 && strings.HasSuffix(cells[13], "%")
	})

	setInput(t, ctx, "#submit-spec", "name: broken\nmodel: mnist-mlp\nbatch_size: 0\n")
	do(t, ctx, 10*time.Second, chromedp.Click("#submit"))
	waitPage(t, ctx, "the spec error", func() bool { return strings.Contains(text(t, ctx, "#submit-error"), "batch_size") })
	if key := get(t, ctx, chromedp.Evaluate[string](`document.getElementById('submit-error').dataset.key`)); key != "batch_size" {
		t.Errorf("#submit-error names key %q, want batch_size", key)
	}
	if n := len(s.srv.WorkerViews()); n != 1 {
		t.Errorf("%d workers connected", n)
	}
	writeArtifact(t, "admin.png", get(t, ctx, chromedp.FullScreenshot(100)))
}
