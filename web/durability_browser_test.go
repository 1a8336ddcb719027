package web_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/testbrowser"
	"github.com/crowdtrain/crowdtrain/internal/testdisk"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/store"
)

// The operator sees a checkpoint the coordinator cannot write: with the
// disk full, the admin page says which version is not written and why;
// once space is back and the retry succeeds, the warning goes.
func TestAdminPageShowsAFailingCheckpoint(t *testing.T) {
	testenv.Long(t, "drives the admin page in Chromium")
	testbrowser.Chromium(t)
	disk := testdisk.Mount(t, 48)
	db, err := store.Open(filepath.Join(disk, "ct.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() }) // registered first: runs after the site's cleanup closes the coordinator
	s := newSiteWith(t, longSpec(t, "mnist-mlp"), func(c *coordinator.Config) {
		c.Store, c.CheckpointInterval = db, 200*time.Millisecond
		c.CheckpointRetryMin, c.CheckpointRetryMax = 100*time.Millisecond, 300*time.Millisecond
	})
	ctx := testbrowser.New(t)
	stop := startNativeWorker(t, s.wsURL(), 1)
	defer stop()
	s.waitFor("a checkpoint past version 0", time.Minute, func() bool {
		c := s.view().LastCheckpoint
		return c != nil && c.Version > 0
	})

	do(t, ctx, 30*time.Second, chromedp.Navigate(s.http.URL+"/admin"), chromedp.WaitVisible("#token"))
	setInput(t, ctx, "#token", adminToken)
	do(t, ctx, 10*time.Second, chromedp.Click("#signin"))
	waitPage(t, ctx, "the job on screen", func() bool { return screenVersion(t, ctx) >= 0 })
	if msg := text(t, ctx, "#job-checkpoint-failure"); strings.TrimSpace(msg) != "" {
		t.Fatalf("a checkpoint failure shows while checkpoints are written: %q", msg)
	}

	free := testdisk.Fill(t, disk)
	s.waitFor("a checkpoint write to fail", time.Minute, func() bool { return s.view().CheckpointFailure != nil })
	waitPage(t, ctx, "the failure on the admin page", func() bool {
		msg := text(t, ctx, "#job-checkpoint-failure")
		return strings.Contains(msg, "NOT written") && strings.Contains(msg, "full")
	})
	writeArtifact(t, "admin-checkpoint-failure.png", get(t, ctx, chromedp.FullScreenshot(100)))
	free()
	waitPage(t, ctx, "the failure to clear once space is back", func() bool {
		return strings.TrimSpace(text(t, ctx, "#job-checkpoint-failure")) == ""
	})
	if f := s.view().CheckpointFailure; f != nil {
		t.Fatalf("the page cleared but the API still reports %+v", f)
	}
}
