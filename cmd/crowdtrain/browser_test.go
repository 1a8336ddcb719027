package main

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/crowdtrain/crowdtrain/internal/testbrowser"
)

// openContributeTab starts headless Chromium on the contribute page of
// the coordinator at addr and presses contribute: a browser tab joins
// the crowd, until t ends.
func openContributeTab(t *testing.T, addr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(testbrowser.New(t), time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+addr+"/"), chromedp.WaitVisible("#contribute"), chromedp.Click("#contribute")); err != nil {
		t.Fatalf("browser: contribute: %v", err)
	}
}
