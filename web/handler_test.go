package web

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"
)

func newTestHandler(t *testing.T, dist fstest.MapFS) (*Handler, []string) {
	t.Helper()
	var logs []string
	h, err := NewHandler(Options{Dist: dist, Logf: func(f string, a ...any) { logs = append(logs, f) }})
	if err != nil {
		t.Fatal(err)
	}
	return h, logs
}

func get(t *testing.T, h http.Handler, path string, header map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, path, nil)
	for k, v := range header {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// A binary built without the browser worker says so on the page, in the
// log, and when the wasm is asked for, instead of failing in the browser.
func TestMissingWorkerIsExplained(t *testing.T) {
	h, logs := newTestHandler(t, fstest.MapFS{})
	if h.HasWorker() {
		t.Fatal("HasWorker with an empty dist")
	}
	if len(logs) != 1 || !strings.Contains(logs[0], "browsers can see the page but cannot train") {
		t.Errorf("log: %q", logs)
	}
	page := get(t, h, "/", nil)
	body := page.Body.String()
	if page.Code != 200 || !strings.Contains(body, "built without the browser worker") || !strings.Contains(body, "make build") {
		t.Errorf("page %d does not explain the missing worker:\n%s", page.Code, body)
	}
	if !strings.Contains(body, `id="contribute" type="button" disabled`) {
		t.Error("Contribute is not disabled without a worker")
	}
	wasm := get(t, h, "/static/"+WasmFile, nil)
	if wasm.Code != 404 || !strings.Contains(wasm.Body.String(), "make build") {
		t.Errorf("GET the missing wasm: %d %q", wasm.Code, wasm.Body.String())
	}
}

func TestAssetsAreCompressedAndRevalidated(t *testing.T) {
	wasm := bytes.Repeat([]byte("\x00asm some very compressible module "), 4000)
	h, logs := newTestHandler(t, fstest.MapFS{
		WasmFile:     {Data: wasm},
		WasmExecFile: {Data: []byte("// glue")},
	})
	if !h.HasWorker() || len(logs) != 0 {
		t.Fatalf("HasWorker %v, logs %q", h.HasWorker(), logs)
	}
	if body := get(t, h, "/", nil).Body.String(); strings.Contains(body, "built without") || strings.Contains(body, "disabled>Contribute") {
		t.Errorf("page claims a missing worker:\n%s", body)
	}

	plain := get(t, h, "/static/"+WasmFile, nil)
	if plain.Code != 200 || plain.Header().Get("Content-Encoding") != "" || !bytes.Equal(plain.Body.Bytes(), wasm) {
		t.Fatalf("plain GET: %d, encoding %q, %d bytes", plain.Code, plain.Header().Get("Content-Encoding"), plain.Body.Len())
	}
	if ct := plain.Header().Get("Content-Type"); ct != "application/wasm" {
		t.Errorf("Content-Type %q; instantiateStreaming needs application/wasm", ct)
	}

	gz := get(t, h, "/static/"+WasmFile, map[string]string{"Accept-Encoding": "br, gzip"})
	if gz.Header().Get("Content-Encoding") != "gzip" || gz.Body.Len() >= len(wasm)/4 {
		t.Fatalf("gzip GET: encoding %q, %d bytes of %d", gz.Header().Get("Content-Encoding"), gz.Body.Len(), len(wasm))
	}
	gzLen := gz.Body.Len()
	zr, err := gzip.NewReader(gz.Body)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := io.ReadAll(zr); !bytes.Equal(got, wasm) {
		t.Fatal("gzip body does not decompress to the wasm")
	}
	raw, z, ok := h.Compressed(WasmFile)
	if !ok || raw != len(wasm) || z != gzLen {
		t.Errorf("Compressed = %d, %d, %v", raw, z, ok)
	}

	refused := get(t, h, "/static/"+WasmFile, map[string]string{"Accept-Encoding": "gzip;q=0"})
	if refused.Header().Get("Content-Encoding") != "" {
		t.Error("gzip sent to a browser that refused it with q=0")
	}

	etag := plain.Header().Get("ETag")
	if again := get(t, h, "/static/"+WasmFile, map[string]string{"If-None-Match": etag}); again.Code != http.StatusNotModified || again.Body.Len() != 0 {
		t.Errorf("revalidation with the ETag: %d, %d bytes", again.Code, again.Body.Len())
	}
	if cc := plain.Header().Get("Cache-Control"); cc != "no-cache" {
		t.Errorf("Cache-Control %q; an upgraded worker must be seen at once", cc)
	}
}

func TestPagesAndErrors(t *testing.T) {
	h, _ := newTestHandler(t, fstest.MapFS{})
	page := get(t, h, "/", nil)
	for _, id := range []string{"contribute", "pause", "state", "examples", "rate", "accepted", "rejected"} {
		if !strings.Contains(page.Body.String(), `id="`+id+`"`) {
			t.Errorf("the page has no #%s", id)
		}
	}
	if csp := page.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "'wasm-unsafe-eval'") {
		t.Errorf("CSP %q does not allow compiling the worker", csp)
	}
	for _, name := range []string{"contribute.js", "worker.js", "style.css"} {
		if r := get(t, h, "/static/"+name, nil); r.Code != 200 || r.Body.Len() == 0 {
			t.Errorf("/static/%s: %d", name, r.Code)
		}
	}
	if r := get(t, h, "/static/nope.js", nil); r.Code != 404 {
		t.Errorf("unknown asset: %d", r.Code)
	}
	if r := get(t, h, "/elsewhere", nil); r.Code != 404 || !strings.Contains(r.Body.String(), "contribute page is at /") {
		t.Errorf("unknown page: %d %q", r.Code, r.Body.String())
	}
	post := httptest.NewRecorder()
	h.ServeHTTP(post, httptest.NewRequest(http.MethodPost, "/", nil))
	if post.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /: %d", post.Code)
	}
}

// The admin page is static HTML whose ids the admin script and the
// end-to-end tests rely on; its chart library is vendored with its license.
func TestAdminPage(t *testing.T) {
	h, _ := newTestHandler(t, fstest.MapFS{})
	for _, p := range []string{"/admin", "/admin/"} {
		page := get(t, h, p, nil)
		if page.Code != 200 {
			t.Fatalf("GET %s: %d", p, page.Code)
		}
		if ct := page.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
			t.Errorf("GET %s: Content-Type %q", p, ct)
		}
		body := page.Body.String()
		for _, id := range []string{
			"signin-form", "token", "signin", "signin-error", "signout", "admin",
			"jobs", "job-name", "job-state", "job-version", "pause", "resume", "stop",
			"lr", "max-staleness", "apply-settings", "settings-error", "settings-closed",
			"chart-accuracy", "chart-version", "chart-throughput", "chart-staleness",
			"workers", "submit-preset", "submit-spec", "submit-file", "submit", "submit-error",
			"checkpoints", "export", "export-onnx",
		} {
			if !strings.Contains(body, `id="`+id+`"`) {
				t.Errorf("GET %s: no #%s", p, id)
			}
		}
		if !strings.Contains(body, `id="token" name="token" type="password"`) {
			t.Error("#token is not a password input")
		}
		for _, src := range []string{"/static/admin.js", "/static/admin.css", "/static/vendor/uplot-1.6.32/uPlot.iife.min.js", "/static/vendor/uplot-1.6.32/uPlot.min.css"} {
			if !strings.Contains(body, `"`+src+`"`) {
				t.Errorf("the page does not load %s", src)
			}
			if r := get(t, h, src, nil); r.Code != 200 || r.Body.Len() == 0 {
				t.Errorf("GET %s: %d", src, r.Code)
			}
		}
		// The CSP forbids inline code and styles, so the page has none.
		for _, bad := range []string{"<script>", " style=", "<style", " onclick=", " onsubmit=", " onload=", "javascript:"} {
			if strings.Contains(strings.ToLower(body), bad) {
				t.Errorf("the page has %q, which the CSP blocks", bad)
			}
		}
	}

	page := get(t, h, "/admin", nil)
	hd := page.Header()
	csp := hd.Get("Content-Security-Policy")
	for _, want := range []string{"script-src 'self'", "style-src 'self'", "frame-ancestors 'none'", "object-src 'none'", "form-action 'self'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	// connect-src names this coordinator and the relays it vouches for,
	// not every websocket.
	if strings.Contains(csp, " ws: ") || strings.Contains(csp, " wss:;") || strings.Contains(csp, " wss: ") {
		t.Errorf("CSP %q lets the pages connect to any websocket", csp)
	}
	h.AllowConnect(func() []string { return []string{"https://relay.example:8443", "http://bad;host", "ftp://x.example"} })
	csp = get(t, h, "/", nil).Header().Get("Content-Security-Policy")
	if !strings.Contains(csp, "connect-src 'self' ws://example.com wss://example.com https://relay.example:8443 wss://relay.example:8443;") {
		t.Errorf("CSP with one approved relay and two bad origins: %q", csp)
	}
	h.AllowConnect(func() []string { return nil })
	if strings.Contains(csp, "unsafe-inline") {
		t.Errorf("CSP %q allows inline code", csp)
	}
	for k, want := range map[string]string{"X-Frame-Options": "DENY", "Referrer-Policy": "same-origin", "X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"} {
		if got := hd.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	if etag := hd.Get("ETag"); etag == "" {
		t.Error("the admin page has no ETag")
	} else if again := get(t, h, "/admin", map[string]string{"If-None-Match": etag}); again.Code != http.StatusNotModified {
		t.Errorf("revalidating the admin page: %d", again.Code)
	}

	js := get(t, h, "/static/vendor/uplot-1.6.32/uPlot.iife.min.js", nil)
	if ct := js.Header().Get("Content-Type"); ct != "text/javascript; charset=utf-8" {
		t.Errorf("uPlot Content-Type %q", ct)
	}
	if !strings.Contains(js.Body.String(), "uPlot (v1.6.32)") {
		t.Error("the vendored uPlot is not version 1.6.32")
	}
	lic := get(t, h, "/static/vendor/uplot-1.6.32/LICENSE", nil)
	if lic.Code != 200 || !strings.Contains(lic.Body.String(), "MIT License") || !strings.Contains(lic.Body.String(), "Leon Sorokin") {
		t.Errorf("uPlot's license: %d %q", lic.Code, lic.Body.String())
	}
	if r := get(t, h, "/static/vendor/uplot-1.6.32/README.md", nil); r.Code != 200 || !strings.Contains(r.Body.String(), "npm pack uplot@1.6.32") {
		t.Errorf("the vendor README does not say where uPlot came from: %d", r.Code)
	}

	// The backend answers /admin/login and the API; this handler serves
	// only the page, and only to GET and HEAD.
	if r := get(t, h, "/admin/other", nil); r.Code != 404 {
		t.Errorf("GET /admin/other: %d", r.Code)
	}
	post := httptest.NewRecorder()
	h.ServeHTTP(post, httptest.NewRequest(http.MethodPost, "/admin", nil))
	if post.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /admin: %d", post.Code)
	}
	head := httptest.NewRecorder()
	h.ServeHTTP(head, httptest.NewRequest(http.MethodHead, "/admin", nil))
	if head.Code != 200 || head.Body.Len() != 0 {
		t.Errorf("HEAD /admin: %d, %d bytes", head.Code, head.Body.Len())
	}
}

// Every page carries the same security headers.
func TestAdminSecurityHeadersOnEveryPage(t *testing.T) {
	h, _ := newTestHandler(t, fstest.MapFS{})
	for _, p := range []string{"/", "/admin", "/static/admin.js", "/nope"} {
		hd := get(t, h, p, nil).Header()
		if hd.Get("X-Frame-Options") != "DENY" || hd.Get("Referrer-Policy") != "same-origin" || hd.Get("Content-Security-Policy") == "" {
			t.Errorf("%s: X-Frame-Options %q, Referrer-Policy %q, CSP %q", p,
				hd.Get("X-Frame-Options"), hd.Get("Referrer-Policy"), hd.Get("Content-Security-Policy"))
		}
	}
}
