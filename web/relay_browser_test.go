package web_test

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/natsbox"
	"github.com/crowdtrain/crowdtrain/internal/testbrowser"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// startRelay puts a real relay in front of the site's coordinator, over
// the embedded NATS server: its websocket URL and its server.
func startRelay(t *testing.T, s *site, name string) (string, *coordinator.Server) {
	t.Helper()
	box, err := natsbox.Start(natsbox.Options{Listen: "127.0.0.1:0", Dir: filepath.Join(t.TempDir(), "nats")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(box.Close)
	rootNC, err := nats.Connect(box.URL, nats.UserInfo(box.Root.User, box.Root.Password))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rootNC.Close)
	if err := s.srv.ServeRelays(context.Background(), rootNC, coordinator.RelayGateOptions{RootURL: s.http.URL, Credentials: box}); err != nil {
		t.Fatal(err)
	}
	s.pages.AllowConnect(s.srv.RelayOrigins) // as serve does
	text, err := s.srv.IssueRelayCredential(name, "")
	if err != nil {
		t.Fatal(err)
	}
	credsFile := filepath.Join(t.TempDir(), name+".creds")
	if err := os.WriteFile(credsFile, text, 0o600); err != nil {
		t.Fatal(err)
	}
	creds, err := natsbox.ReadRelayCredential(credsFile, "")
	if err != nil {
		t.Fatal(err)
	}
	relayNC, err := nats.Connect(box.URL, creds.Options...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(relayNC.Close)
	tr, te := loadMNIST(t)
	relay, err := coordinator.New(coordinator.Config{Train: tr, Test: te, Logf: t.Logf, IdleRetry: 50 * time.Millisecond, AdminToken: adminToken})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(relay.Handler())
	hs.Config.ConnState = relay.ConnState
	hs.Start()
	t.Cleanup(hs.Close)
	t.Cleanup(func() { relay.Close() }) // before the listener: Close tells its workers
	ws := "ws" + strings.TrimPrefix(hs.URL, "http") + "/ws"
	if err := relay.RunRelay(context.Background(), coordinator.RelayOptions{Name: name, URL: ws, NATS: relayNC}); err != nil {
		t.Fatal(err)
	}
	return ws, relay
}

// The contribute page served by the root connects its tab to the root's
// relay, which takes the root's page as an Origin and serves the tab its
// snapshots and shards across origins; the root sees the relay only.
func TestContributePageTrainsThroughARelay(t *testing.T) {
	testenv.Long(t, "trains in Chromium through a relay")
	s := newSite(t, longSpec(t, "mnist-mlp"))
	_, relay := startRelay(t, s, "relay-one")
	ctx := testbrowser.New(t)
	do(t, ctx, 30*time.Second, chromedp.Navigate(s.http.URL+"/"), chromedp.WaitVisible("#contribute"))
	waitPage(t, ctx, "the page to find the relay", func() bool { return text(t, ctx, "#ws-url") == s.http.URL })
	do(t, ctx, 10*time.Second, chromedp.Click("#contribute"))
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ws := relay.WorkerViews()
		if len(ws) == 1 && ws[0].Kind == protocol.KindBrowser && ws[0].Accepted >= 3 && s.view().Version >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tab did not train through the relay: relay workers %+v, root %+v, page %q", ws, s.view(), text(t, ctx, "#state")+" "+text(t, ctx, "#last-reason"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if ws := s.srv.WorkerViews(); len(ws) != 0 {
		t.Errorf("the root has %d workers of its own; the tab belongs to the relay", len(ws))
	}
	if rs := s.srv.Relays(); len(rs) != 1 || rs[0].AggregatesApplied == 0 {
		t.Errorf("the root's relays: %+v", rs)
	}
}
