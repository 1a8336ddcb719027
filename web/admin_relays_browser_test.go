package web_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/crowdtrain/crowdtrain/internal/testbrowser"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
)

// The admin page's topology: this coordinator, a relay in front of it
// (a real one, over the embedded NATS server) and the worker behind it.
func TestAdminPageShowsRelays(t *testing.T) {
	testenv.Long(t, "drives the admin page in Chromium beside a relay")
	s := newSite(t, longSpec(t, "mnist-mlp"))
	relayWS, _ := startRelay(t, s, "relay-one")
	stop := startNativeWorker(t, relayWS, 1)
	defer stop()

	ctx := testbrowser.New(t)
	do(t, ctx, 30*time.Second, chromedp.Navigate(s.http.URL+"/admin"), chromedp.WaitVisible("#token"))
	setInput(t, ctx, "#token", adminToken)
	do(t, ctx, 10*time.Second, chromedp.Click("#signin"))
	waitPage(t, ctx, "the relay and its worker on the page", func() bool {
		cells := get(t, ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('#relays tbody tr:first-child td')).map((td) => td.textContent)`))
		return len(cells) == 8 && cells[0] == "relay-one" && cells[1] == relayWS && cells[2] == "1" &&
			strings.Contains(text(t, ctx, "#topology-root"), "1 relays with 1 workers behind them")
	})
	// Its aggregates reach the root and move the model.
	s.waitFor("the relay's aggregates applied", time.Minute, func() bool { return s.view().Version > 3 })
	waitPage(t, ctx, "the relay's upstream rate and aggregates", func() bool {
		cells := get(t, ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('#relays tbody tr:first-child td')).map((td) => td.textContent)`))
		return len(cells) == 8 && strings.Contains(cells[3], "/s") && !strings.HasPrefix(cells[4], "0 /")
	})
	if !strings.Contains(text(t, ctx, "#topology-root"), "0 workers connected here") {
		t.Errorf("topology: %q", text(t, ctx, "#topology-root"))
	}
	writeArtifact(t, "admin-relays.png", get(t, ctx, chromedp.FullScreenshot(100)))

	// Withdrawn on the page: the public list loses it; approved again, it
	// is back. Revoked: the relay is gone from the page.
	publicRelays := func() int { return len(s.srv.Relays()) } // GET /api/v1/relays
	// Withdraw and Revoke ask to confirm.
	testbrowser.AcceptDialogs(t, ctx)
	do(t, ctx, 10*time.Second, chromedp.Click(`#relays tbody tr:first-child button.approve`))
	waitPage(t, ctx, "the relay withdrawn", func() bool {
		return publicRelays() == 0 && strings.Contains(text(t, ctx, "#relays tbody tr:first-child td"), "awaiting approval")
	})
	do(t, ctx, 10*time.Second, chromedp.Click(`#relays tbody tr:first-child button.approve`))
	waitPage(t, ctx, "the relay approved again", func() bool { return publicRelays() == 1 })
	// A heartbeat the relay sent before the revocation, handled after it,
	// once listed it again as awaiting approval (TestRelayIdentityIsItsCredential).
	do(t, ctx, 10*time.Second, chromedp.Click(`#relays tbody tr:first-child button.revoke`))
	waitPage(t, ctx, "the relay revoked", func() bool {
		return publicRelays() == 0 && len(s.srv.RelaysAdmin()) == 0 &&
			get(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll('#relays tbody tr').length`)) == 0
	})
}
