package web

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log"
	"mime"
	"net/http"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Names of the browser worker's files in dist.
const (
	WasmFile     = "crowdtrain.wasm"
	WasmExecFile = "wasm_exec.js"
)

//go:embed static
var staticFiles embed.FS

//go:embed all:dist
var distFiles embed.FS

// Options configures a Handler.
type Options struct {
	// Dist holds the browser worker (WasmFile and WasmExecFile); nil means
	// the files embedded at build time. Tests point it at a fresh build.
	Dist fs.FS
	// Logf receives a warning when the browser worker is missing; nil
	// means log.Printf.
	Logf func(format string, args ...any)
	// Downloads is the folder of the worker's release archives and their
	// SHA256SUMS (what `make dist` writes), served under /downloads/ with
	// /install.sh and /install.ps1; "" serves none.
	Downloads string
	// PublicURLs are the coordinator's public URLs (serve --public-url):
	// the installers take their scheme for the host they were fetched from.
	PublicURLs []string
}

// Handler serves the contribute page at /, the admin page at /admin, and
// their assets under /static/.
type Handler struct {
	assets  map[string]*asset // by slash-separated path under /static/
	index   *template.Template
	admin   *asset // the admin page: static HTML, its data comes from the API
	missing string // why there is no browser worker; "" when there is one
	// connect lists other origins the pages may fetch from: the
	// coordinator's relays, which serve their tabs' snapshots and shards
	// (AllowConnect).
	connect atomic.Pointer[func() []string]

	downloads  *os.Root // Options.Downloads; nil without
	publicURLs []string
	installers *textTemplate // install.sh and install.ps1
}

// AllowConnect lets the pages (and their workers) fetch from the origins
// origins returns, asked on each page load: a coordinator's relays.
func (h *Handler) AllowConnect(origins func() []string) { h.connect.Store(&origins) }

// policy is the page's Content-Security-Policy for request r:
// contentSecurityPolicy, whose connect-src names this coordinator (its
// own origin, and its websocket at the request's host) and the relays'
// origins AllowConnect gives (scheme://host:port, checked; each with its
// websocket twin), not ws: and wss: at large.
func (h *Handler) policy(r *http.Request) string {
	var extra []string
	if host := r.Host; host != "" && !strings.ContainsAny(host, " ;,'\"/\\") {
		extra = append(extra, "ws://"+host, "wss://"+host)
	}
	if f := h.connect.Load(); f != nil {
		for _, o := range (*f)() {
			u, err := url.Parse(o)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.RawQuery != "" ||
				strings.ContainsAny(u.Host, " ;,'\"") {
				continue
			}
			ws := "ws://"
			if u.Scheme == "https" {
				ws = "wss://"
			}
			extra = append(extra, u.Scheme+"://"+u.Host, ws+u.Host)
		}
	}
	if len(extra) == 0 {
		return contentSecurityPolicy
	}
	return strings.Replace(contentSecurityPolicy, "connect-src 'self'", "connect-src 'self' "+strings.Join(extra, " "), 1)
}

// asset is one file held in memory with its ETag and, made on first
// request, its gzip form.
type asset struct {
	body        []byte
	etag        string
	contentType string
	gzipOnce    sync.Once
	gzipped     []byte // nil when compression would not pay
}

// NewHandler loads the pages and the browser worker.
func NewHandler(opts Options) (*Handler, error) {
	if opts.Logf == nil {
		opts.Logf = log.Printf
	}
	dist := opts.Dist
	if dist == nil {
		sub, err := fs.Sub(distFiles, "dist")
		if err != nil {
			return nil, err
		}
		dist = sub
	}
	static, err := fs.Sub(staticFiles, "static")
	if err != nil {
		return nil, err
	}
	h := &Handler{assets: map[string]*asset{}, publicURLs: opts.PublicURLs}
	if opts.Downloads != "" {
		if h.downloads, err = openDownloads(opts.Downloads); err != nil {
			return nil, err
		}
	}
	if h.installers, err = loadInstallers(); err != nil {
		return nil, err
	}
	var indexSrc []byte
	err = fs.WalkDir(static, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(static, name)
		if err != nil {
			return err
		}
		switch name {
		case "index.html":
			indexSrc = b
		case "admin.html":
			h.admin = newAsset(name, b)
		default:
			h.assets[name] = newAsset(name, b)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if indexSrc == nil || h.admin == nil {
		return nil, errors.New("web: static/ lacks index.html or admin.html")
	}
	h.index, err = template.New("index.html").Parse(string(indexSrc))
	if err != nil {
		return nil, fmt.Errorf("web: index.html: %w", err)
	}
	var missing []string
	for _, name := range []string{WasmFile, WasmExecFile} {
		b, err := fs.ReadFile(dist, name)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			missing = append(missing, name)
		case err != nil:
			return nil, fmt.Errorf("web: reading the browser worker's %s: %w", name, err)
		default:
			h.assets[name] = newAsset(name, b)
		}
	}
	if len(missing) > 0 {
		h.missing = fmt.Sprintf("this crowdtrain binary was built without the browser worker (%s missing): build it with `make build`, which compiles ./cmd/wasmworker for GOOS=js GOARCH=wasm and embeds it",
			strings.Join(missing, ", "))
		opts.Logf("contribute page: %s; browsers can see the page but cannot train", h.missing)
	}
	return h, nil
}

func newAsset(name string, body []byte) *asset {
	sum := sha256.Sum256(body)
	ct := mime.TypeByExtension(path.Ext(name))
	switch path.Ext(name) {
	case ".wasm":
		ct = "application/wasm" // WebAssembly.instantiateStreaming insists
	case ".js":
		ct = "text/javascript; charset=utf-8"
	}
	if ct == "" {
		ct = "application/octet-stream"
	}
	return &asset{body: body, etag: `"` + hex.EncodeToString(sum[:12]) + `"`, contentType: ct}
}

// HasWorker reports whether the browser worker is built in.
func (h *Handler) HasWorker() bool { return h.missing == "" }

// contentSecurityPolicy lets the pages run only their own scripts, compile
// WebAssembly, talk to their own origin (policy adds the worker's socket
// and the approved relays) and post forms only to it. Styles come only
// from files: uPlot sizes its elements through the CSSOM, which style-src
// does not restrict.
const contentSecurityPolicy = "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; " +
	"connect-src 'self'; worker-src 'self'; img-src 'self' data:; style-src 'self'; " +
	"object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Security-Policy", h.policy(r))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Frame-Options", "DENY") // for browsers without frame-ancestors
	w.Header().Set("Referrer-Policy", "same-origin")
	switch {
	case r.URL.Path == "/" || r.URL.Path == "/index.html":
		h.serveIndex(w, r)
	case r.URL.Path == "/admin" || r.URL.Path == "/admin/":
		h.admin.serve(w, r)
	case strings.HasPrefix(r.URL.Path, "/downloads/"):
		h.serveDownload(w, r)
	case r.URL.Path == "/install.sh" || r.URL.Path == "/install.ps1":
		h.serveInstaller(w, r, strings.TrimPrefix(r.URL.Path, "/"))
	case strings.HasPrefix(r.URL.Path, "/static/"):
		name := strings.TrimPrefix(r.URL.Path, "/static/")
		a := h.assets[name]
		if a == nil {
			if (name == WasmFile || name == WasmExecFile) && h.missing != "" {
				http.Error(w, h.missing, http.StatusNotFound)
				return
			}
			http.Error(w, "no such file: "+r.URL.Path, http.StatusNotFound)
			return
		}
		a.serve(w, r)
	default:
		http.Error(w, "no such page: "+r.URL.Path+"; the contribute page is at /, the admin page at /admin", http.StatusNotFound)
	}
}

func (h *Handler) serveIndex(w http.ResponseWriter, r *http.Request) {
	var buf bytes.Buffer
	if err := h.index.Execute(&buf, struct{ Missing string }{h.missing}); err != nil {
		http.Error(w, "rendering the page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(buf.Bytes())
}

// serve answers with the asset: 304 when the browser has this version,
// gzip when it accepts that and compression pays.
func (a *asset) serve(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("ETag", a.etag)
	hd.Set("Cache-Control", "no-cache")
	hd.Set("Content-Type", a.contentType)
	hd.Set("Vary", "Accept-Encoding")
	if etagMatches(r.Header.Get("If-None-Match"), a.etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	body := a.body
	if acceptsGzip(r.Header.Get("Accept-Encoding")) {
		if gz := a.gzip(); gz != nil {
			hd.Set("Content-Encoding", "gzip")
			body = gz
		}
	}
	hd.Set("Content-Length", strconv.Itoa(len(body)))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(body)
}

// gzip compresses the asset once, on first use: the worker's wasm is
// megabytes, and a coordinator that no browser visits never pays for it.
func (a *asset) gzip() []byte {
	a.gzipOnce.Do(func() {
		if len(a.body) < 1024 {
			return
		}
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		_, _ = zw.Write(a.body)
		_ = zw.Close()
		if buf.Len() < len(a.body)*9/10 {
			a.gzipped = buf.Bytes()
		}
	})
	return a.gzipped
}

// Compressed returns the size of the named asset as served raw and as
// served with gzip (the same when compression does not pay), for the
// benchmarks; ok is false when there is no such asset.
func (h *Handler) Compressed(name string) (raw, gz int, ok bool) {
	a := h.assets[name]
	if a == nil {
		return 0, 0, false
	}
	if z := a.gzip(); z != nil {
		return len(a.body), len(z), true
	}
	return len(a.body), len(a.body), true
}

func acceptsGzip(header string) bool {
	for _, part := range strings.Split(header, ",") {
		coding, params, _ := strings.Cut(part, ";")
		if !strings.EqualFold(strings.TrimSpace(coding), "gzip") {
			continue
		}
		for _, p := range strings.Split(params, ";") {
			k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
			if q, err := strconv.ParseFloat(v, 64); k == "q" && err == nil && q == 0 {
				return false // "gzip;q=0" refuses it
			}
		}
		return true
	}
	return false
}

func etagMatches(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimSpace(t)
		if t == etag || t == "*" {
			return true
		}
	}
	return false
}
