package testbrowser

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/web"
)

// ChromiumVar names a Chrome or Chromium binary to drive instead of the
// ones looked for on $PATH.
const ChromiumVar = "CROWDTRAIN_CHROMIUM"

// Chromium returns the browser to drive, or skips t (fails it under
// testenv.RequireVar=1) when there is none.
func Chromium(t testing.TB) string {
	t.Helper()
	for _, c := range []string{os.Getenv(ChromiumVar), "chromium", "chromium-browser", "google-chrome"} {
		if c == "" {
			continue
		}
		if p, err := exec.LookPath(c); err == nil {
			return p
		}
	}
	testenv.Missing(t, "no Chromium found (install Debian's chromium, or set "+ChromiumVar+" to a Chrome binary)")
	return ""
}

// startAttempts is how many times New tries to start Chromium.
const startAttempts = 3

// New starts headless Chromium with a fresh profile and returns a tab's
// context; the tab's console goes to the test log, and the browser is
// closed when t ends. Chromium's background services are off: the test
// machines have no network beyond loopback. extra adds flags (a test
// server's certificate to trust, say).
func New(t testing.TB, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(Chromium(t)),
		chromedp.NoSandbox,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		// WebGPU: headless Chromium then offers SwiftShader's adapter (a
		// GPU emulated on the CPU), which the WebGPU backend's tests and
		// benchmarks run on. It is a software adapter, so a page choosing
		// automatically still trains on the CPU.
		chromedp.Flag("enable-unsafe-webgpu", true),
		chromedp.WindowSize(1000, 900),
	)
	opts = append(opts, extra...)
	// Chromium now and then exits at start on a loaded machine (its crash
	// handler, a busy /dev/shm) before it prints its DevTools address; a
	// second start almost always works, so a test fails only on the third.
	var (
		ctx         context.Context
		cancel      context.CancelFunc
		cancelAlloc context.CancelFunc
	)
	for attempt := 1; ; attempt++ {
		var actx context.Context
		// A fresh profile each time: a crashed start may leave its lock.
		actx, cancelAlloc = chromedp.NewExecAllocator(context.Background(), append(opts, chromedp.UserDataDir(t.TempDir()))...)
		ctx, cancel = chromedp.NewContext(actx)
		err := chromedp.Do(ctx) // start the browser now, so failures say so
		if err == nil {
			break
		}
		cancel()
		cancelAlloc()
		if attempt == startAttempts {
			t.Fatalf("starting Chromium (%d attempts): %v", attempt, err)
		}
		t.Logf("starting Chromium, attempt %d of %d: %v; trying again", attempt, startAttempts, err)
		time.Sleep(time.Duration(attempt) * time.Second)
	}
	logged := LogConsole(t, ctx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		<-logged
	})
	return ctx
}

// NewTab opens another tab of browser's Chromium, closed when t ends.
func NewTab(t testing.TB, browser context.Context) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser)
	if err := chromedp.Do(ctx); err != nil {
		cancel()
		t.Fatalf("opening a tab: %v", err)
	}
	t.Cleanup(cancel)
	return ctx
}

// AcceptDialogs accepts every JavaScript dialog the tab opens (alert,
// confirm, prompt) until ctx ends, logging each: a page waits on an open
// dialog, and so does every read of it. Overriding window.confirm in the
// page instead lasts only until the page loads again.
func AcceptDialogs(t testing.TB, ctx context.Context) {
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			t.Logf("page dialog (%s): %q: accepted", ev.Type, ev.Message)
			if _, err := chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true}); err != nil {
				t.Logf("accepting the dialog: %v", err)
			}
		}
	}()
}

// LogConsole copies the tab's console into the test log until ctx ends;
// done is closed then.
func LogConsole(t testing.TB, ctx context.Context) (done chan struct{}) {
	done = make(chan struct{})
	msgs := chromedp.Console(ctx)
	go func() {
		defer close(done)
		for m, err := range msgs {
			if err != nil {
				return
			}
			t.Logf("page console: %s", m)
		}
	}()
	return done
}

// BuildWorker compiles ./cmd/wasmworker from the working tree into dir,
// with the wasm_exec.js of the same toolchain beside it: what the
// contribute page serves (web.Options.Dist, serve --web-dist), never a
// stale embedded build.
func BuildWorker(dir string) error {
	build := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(dir, web.WasmFile), "github.com/crowdtrain/crowdtrain/cmd/wasmworker")
	build.Env = append(os.Environ(), "GOOS=js", "GOARCH=wasm")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building the browser worker: %v\n%s", err, out)
	}
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return fmt.Errorf("go env GOROOT: %v", err)
	}
	js, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(goroot)), "lib", "wasm", web.WasmExecFile))
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, web.WasmExecFile), js, 0o644)
}
