package web_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/internal/testbrowser"
	"github.com/crowdtrain/crowdtrain/worker/cpu"

	"github.com/chromedp/chromedp"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/web"
	"github.com/crowdtrain/crowdtrain/worker"
)

// The browser tests run the real thing: the browser worker compiled to
// WebAssembly from this tree, served by a real coordinator on loopback, in
// headless Chromium. Without Chromium they skip, unless
// CROWDTRAIN_REQUIRE_BROWSER=1 (CI), where they fail.

var (
	distOnce sync.Once
	distDir  string
	distErr  error

	mnistOnce   sync.Once
	train, test *dataset.Set
	mnistErr    error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if distDir != "" {
		os.RemoveAll(distDir)
	}
	os.Exit(code)
}

// buildWorker compiles ./cmd/wasmworker from this tree once per test binary,
// so the tests never run a stale embedded build.
func buildWorker(t testing.TB) string {
	t.Helper()
	distOnce.Do(func() {
		distDir, distErr = os.MkdirTemp("", "crowdtrain-dist-")
		if distErr != nil {
			return
		}
		distErr = testbrowser.BuildWorker(distDir)
	})
	if distErr != nil {
		t.Fatal(distErr)
	}
	return distDir
}

func loadMNIST(t testing.TB) (*dataset.Set, *dataset.Set) {
	t.Helper()
	mnistOnce.Do(func() { train, test, mnistErr = dataset.LoadMNIST("") })
	if mnistErr != nil {
		t.Fatalf("MNIST is a declared dependency and must be found: %v", mnistErr)
	}
	return train, test
}

// site is a coordinator with the contribute page on a loopback port. It
// records every shard download, to show that a reload takes shards from the
// browser's cache.
type site struct {
	t      testing.TB
	srv    *coordinator.Server
	http   *httptest.Server
	job    *coordinator.Job
	pages  *web.Handler
	mu     sync.Mutex
	shards map[string]int // shard path → GETs that reached the coordinator
}

func newSite(t testing.TB, spec jobspec.Spec) *site {
	t.Helper()
	return newSiteWith(t, spec, nil)
}

// newSiteWith is newSite with edit, if not nil, changing the coordinator's
// Config first.
func newSiteWith(t testing.TB, spec jobspec.Spec, edit func(*coordinator.Config)) *site {
	t.Helper()
	testbrowser.Chromium(t)
	tr, te := loadMNIST(t)
	pages, err := web.NewHandler(web.Options{Dist: os.DirFS(buildWorker(t)), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	cfg := coordinator.Config{Train: tr, Test: te, Logf: t.Logf, IdleRetry: 50 * time.Millisecond, Pages: pages, AdminToken: adminToken}
	if edit != nil {
		edit(&cfg)
	}
	srv, err := coordinator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	job, err := srv.AddJob(spec)
	if err != nil {
		t.Fatal(err)
	}
	s := &site{t: t, srv: srv, job: job, pages: pages, shards: map[string]int{}}
	h := srv.Handler()
	s.http = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/shards/") {
			s.mu.Lock()
			s.shards[r.URL.Path]++
			s.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		srv.Close()
		s.http.Close()
	})
	return s
}

// adminToken is the test sites' admin token.
const adminToken = "browser-test-admin-token"

func (s *site) wsURL() string { return "ws" + strings.TrimPrefix(s.http.URL, "http") + "/ws" }

func (s *site) view() coordinator.JobView {
	v, _, err := s.srv.JobView(context.Background(), s.job.ID)
	if err != nil {
		s.t.Fatal(err)
	}
	return v
}

// browserWorkers sums what the connected browser workers have done.
func (s *site) browserWorkers() (n int, accepted, examples int64) {
	for _, w := range s.srv.WorkerViews() {
		if w.Kind == protocol.KindBrowser {
			n++
			accepted += w.Accepted
			examples += w.Examples
		}
	}
	return n, accepted, examples
}

func (s *site) waitFor(what string, timeout time.Duration, cond func() bool) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			v := s.view()
			s.t.Fatalf("timed out after %v waiting for %s (job %s: version %d, applied %d, rejected %v, workers %d)",
				timeout, what, v.State, v.Version, v.UpdatesApplied, v.Rejections, v.Workers)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func do(t testing.TB, ctx context.Context, timeout time.Duration, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := chromedp.Do(tctx, steps...); err != nil {
		t.Fatalf("browser: %v", err)
	}
}

// contribute opens the contribute page in ctx's browser and presses
// Contribute.
func (s *site) contribute(t testing.TB, ctx context.Context) {
	t.Helper()
	do(t, ctx, 30*time.Second, chromedp.Navigate(s.http.URL+"/"), chromedp.WaitVisible("#contribute"), chromedp.Click("#contribute"))
}

func get[T any](t testing.TB, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	// A read of the page takes milliseconds; on a machine loaded by the
	// other shards, 30 s tells a stalled renderer from a hung one.
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(tctx, a)
	if err != nil {
		t.Fatalf("browser: %v", err)
	}
	return v
}

// number reads a counter the page shows, such as #accepted.
func number(t testing.TB, ctx context.Context, sel string) int64 {
	t.Helper()
	s := text(t, ctx, sel)
	n, err := strconv.ParseInt(strings.ReplaceAll(s, ",", ""), 10, 64)
	if err != nil {
		t.Fatalf("%s shows %q, not a number", sel, s)
	}
	return n
}

func text(t testing.TB, ctx context.Context, sel string) string {
	t.Helper()
	return get(t, ctx, chromedp.TextContent(sel))
}

// choose selects value in a <select> the way a user does, firing change.
func choose(t testing.TB, ctx context.Context, sel, value string) {
	t.Helper()
	get(t, ctx, chromedp.Evaluate[bool](fmt.Sprintf(
		`(() => { const e = document.querySelector(%q); e.value = %q; e.dispatchEvent(new Event('change')); return true })()`, sel, value)))
}

// longSpec is mnist-mlp with a target it will not reach during a test, so
// the job keeps handing out work.
func longSpec(t testing.TB, preset string) jobspec.Spec {
	t.Helper()
	spec, err := jobspec.Load(preset)
	if err != nil {
		t.Fatal(err)
	}
	spec.TargetAccuracy = 0.9999
	spec.MaxEpochs = 1000
	spec.LeaseTimeout = jobspec.Duration{Duration: 2 * time.Minute}
	return spec
}

func TestContributeFromBrowser(t *testing.T) {
	s := newSite(t, longSpec(t, "mnist-mlp"))
	ctx := testbrowser.New(t)
	page := s.http.URL + "/"

	// The CPU-use choice is remembered across visits.
	do(t, ctx, 30*time.Second, chromedp.Navigate(page), chromedp.WaitVisible("#contribute"))
	choose(t, ctx, "#cpu", "0.5")
	do(t, ctx, 30*time.Second, chromedp.Reload(), chromedp.WaitVisible("#contribute"))
	if cpu := get(t, ctx, chromedp.Value("#cpu")); cpu != "0.5" {
		t.Fatalf("CPU use after a reload is %q, want the 0.5 chosen before it", cpu)
	}
	choose(t, ctx, "#cpu", "1")

	// Contribute: the coordinator counts updates from a browser worker.
	do(t, ctx, 10*time.Second, chromedp.Click("#contribute"))
	s.waitFor("20 accepted updates from a browser worker", 2*time.Minute, func() bool {
		_, acc, _ := s.browserWorkers()
		return acc >= 20
	})
	for _, w := range s.srv.WorkerViews() {
		// Without ?backend= the page picks the fastest CPU backend
		// (backend_browser_test.go has the others).
		if w.Kind == protocol.KindBrowser && w.Backend != "wasm-simd" {
			t.Errorf("browser worker reports backend %q, want wasm-simd", w.Backend)
		}
		// Its snapshot GETs name it (X-Crowdtrain-Worker), so they count
		// for it: 20 results need at least 10 snapshots of 940 KB. Its
		// results carry the link it measured.
		if w.Kind == protocol.KindBrowser && (w.BytesOut < 10*940_000 || w.Link.DownBps <= 0 || w.Link.UpBps <= 0 || w.CommFraction <= 0) {
			t.Errorf("browser worker: bytes_out %d, link %+v, comm_fraction %v; want its snapshots counted and a link measured", w.BytesOut, w.Link, w.CommFraction)
		}
	}
	waitPage(t, ctx, "#accepted to reach 20", func() bool { return number(t, ctx, "#accepted") >= 20 })
	if st := text(t, ctx, "#state"); st != "training" {
		t.Errorf("#state is %q while training", st)
	}
	if number(t, ctx, "#examples") <= 0 || number(t, ctx, "#rate") <= 0 {
		t.Errorf("#examples %d and #rate %d should both be positive while training", number(t, ctx, "#examples"), number(t, ctx, "#rate"))
	}

	// Pause: the worker says bye and no more updates arrive.
	do(t, ctx, 10*time.Second, chromedp.Click("#pause"))
	s.waitFor("the paused browser worker to leave", 30*time.Second, func() bool {
		n, _, _ := s.browserWorkers()
		return n == 0
	})
	if st := text(t, ctx, "#state"); st != "paused" {
		t.Errorf("#state is %q after Pause", st)
	}
	before := s.view()
	if before.LeasesHeld != 0 {
		t.Errorf("%d leases still held after the browser worker paused; bye should return them", before.LeasesHeld)
	}
	time.Sleep(2 * time.Second)
	if after := s.view(); after.UpdatesApplied != before.UpdatesApplied {
		t.Fatalf("updates kept arriving while paused: %d, then %d", before.UpdatesApplied, after.UpdatesApplied)
	}

	// Resume: updates flow again.
	do(t, ctx, 10*time.Second, chromedp.Click("#pause"))
	s.waitFor("updates after Resume", time.Minute, func() bool {
		return s.view().UpdatesApplied >= before.UpdatesApplied+10
	})
	writeArtifact(t, "contribute.png", get(t, ctx, chromedp.FullScreenshot(100)))

	// "Pause while this tab is hidden": hiding the tab pauses, showing it
	// resumes. Headless tabs are never hidden, so the page is told it is.
	do(t, ctx, 10*time.Second, chromedp.Click("#pause-hidden"))
	setHidden := func(hidden bool) {
		get(t, ctx, chromedp.Evaluate[bool](fmt.Sprintf(`(() => {
			Object.defineProperty(document, 'hidden', {configurable: true, get: () => %t});
			document.dispatchEvent(new Event('visibilitychange')); return true })()`, hidden)))
	}
	setHidden(true)
	s.waitFor("the hidden tab's worker to leave", 30*time.Second, func() bool { n, _, _ := s.browserWorkers(); return n == 0 })
	if st := text(t, ctx, "#state"); st != "paused (tab hidden)" {
		t.Errorf("#state is %q while hidden", st)
	}
	setHidden(false)
	s.waitFor("the worker back when the tab shows again", 30*time.Second, func() bool { n, _, _ := s.browserWorkers(); return n == 1 })
	do(t, ctx, 10*time.Second, chromedp.Click("#pause-hidden"))

	// A reload takes shards from Cache Storage: the page counts the cache
	// hits, and the coordinator does not see those shards again.
	do(t, ctx, 30*time.Second, chromedp.Reload(), chromedp.WaitVisible("#contribute"), chromedp.Click("#contribute"))
	waitPage(t, ctx, "shards from the cache after a reload", func() bool { return number(t, ctx, "#cached") > 0 })
	// A download cut off by Pause or by the reload itself never reached
	// the cache and is fetched again; any more than those two means the
	// cache is not used.
	s.mu.Lock()
	again := 0
	for path, n := range s.shards {
		if n > 1 {
			again += n - 1
			t.Logf("%s was downloaded %d times", path, n)
		}
	}
	shards := len(s.shards)
	s.mu.Unlock()
	if again > 2 {
		t.Errorf("%d repeated shard downloads across %d shards; the browser should have served them from its cache", again, shards)
	}

	// Several cores: one Web Worker, one Go instance, one connection each.
	if cores := get(t, ctx, chromedp.Evaluate[int](`navigator.hardwareConcurrency`)); cores > 1 {
		choose(t, ctx, "#workers", "2")
		s.waitFor("two browser workers", time.Minute, func() bool { n, _, _ := s.browserWorkers(); return n == 2 })
	} else {
		t.Logf("this browser reports %d core: the several-workers case is not exercised", cores)
	}
}

// Closing the tab returns the browser worker's leases at once, not at their
// deadline.
func TestClosingTheTabReturnsLeases(t *testing.T) {
	testenv.Long(t, "trains in Chromium")
	s := newSite(t, longSpec(t, "mnist-mlp"))
	browser := testbrowser.New(t)
	tab, closeTab := chromedp.NewContext(browser)
	defer closeTab()
	do(t, tab, 30*time.Second, chromedp.Navigate(s.http.URL+"/"), chromedp.WaitVisible("#contribute"), chromedp.Click("#contribute"))
	s.waitFor("the browser worker to hold a lease", time.Minute, func() bool {
		n, acc, _ := s.browserWorkers()
		return n == 1 && acc > 0 && s.view().LeasesHeld > 0
	})
	closed := time.Now()
	closeTab() // closes the target, like a volunteer closing the tab
	s.waitFor("the closed tab's leases to return", 10*time.Second, func() bool {
		n, _, _ := s.browserWorkers()
		return n == 0 && s.view().LeasesHeld == 0
	})
	t.Logf("leases back %v after the tab closed (lease timeout %v)", time.Since(closed).Round(time.Millisecond), s.job.Spec.LeaseTimeout.Duration)
	if v := s.view(); v.LeasesExpired != 0 {
		t.Errorf("%d leases expired; closing the tab should return them, not leave them to time out", v.LeasesExpired)
	}
}

// waitPage polls a condition on the page.
func waitPage(t testing.TB, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			// Not text(): it waits for its element, and the admin page
			// has no #state, so the message would wait 30 s and then
			// say only that the page did not answer.
			shown := get(t, ctx, chromedp.Evaluate[[]string](`['#state', '#notice'].map((s) => { const e = document.querySelector(s); return e ? e.textContent : '(none)' })`))
			t.Fatalf("timed out waiting for %s (page state %q, notice %q)", what, shown[0], shown[1])
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func writeArtifact(t *testing.T, name string, b []byte) {
	t.Helper()
	p := filepath.Join(t.ArtifactDir(), name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d bytes)", p, len(b))
}

// startNativeWorker runs a native CPU worker in this process until stop.
func startNativeWorker(t testing.TB, wsURL string, threads int) (stop func()) {
	t.Helper()
	b, err := cpu.New(threads)
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(worker.Config{Coordinator: wsURL, Backend: b, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("native worker: %v", err)
		}
	}
}
