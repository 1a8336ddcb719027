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
