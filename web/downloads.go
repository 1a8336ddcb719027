package web

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"regexp"
	"strings"
	texttemplate "text/template"
)

// The worker's release archives (docs/DIST.md), served from the folder
// `make dist` wrote, and the installers that fetch them.

// textTemplate renders the installers: shell and PowerShell, not HTML.
type textTemplate = texttemplate.Template

// SumsFile is the checksum file of a downloads folder.
const SumsFile = "SHA256SUMS"

//go:embed install/install.sh install/install.ps1
var installFiles embed.FS

// downloadName is what a file under /downloads/ may be called: one path
// element of plain characters, not starting with a dot.
var downloadName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$`)

// safeHost is what a Host header may hold to go into an installer: a name,
// an IPv4 or bracketed IPv6 address, and a port.
var safeHost = regexp.MustCompile(`^[A-Za-z0-9.-]{1,253}(:[0-9]{1,5})?$|^\[[0-9A-Fa-f:.]{2,45}\](:[0-9]{1,5})?$`)

// openDownloads opens dir for serving; it must hold SHA256SUMS.
func openDownloads(dir string) (*os.Root, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("downloads %s: %w", dir, err)
	}
	if st, err := root.Lstat(SumsFile); err != nil || !st.Mode().IsRegular() {
		root.Close()
		return nil, fmt.Errorf("downloads %s: no %s there (`make dist` writes the archives and it to dist/)", dir, SumsFile)
	}
	return root, nil
}

// serveDownload answers /downloads/NAME from the downloads folder with
// http.ServeContent: Last-Modified and ETag, conditional and range
// requests. A name that is not one plain file of the folder is refused: a
// path (400), a symbolic link or anything not a regular file (404).
func (h *Handler) serveDownload(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/downloads/")
	if h.downloads == nil {
		http.Error(w, h.noDownloads(), http.StatusNotFound)
		return
	}
	if !downloadName.MatchString(name) {
		http.Error(w, fmt.Sprintf("bad download name %q: a file name of this folder, such as %s", name, SumsFile), http.StatusBadRequest)
		return
	}
	notFound := func() {
		http.Error(w, "no such download: "+name+"; /downloads/"+SumsFile+" lists them", http.StatusNotFound)
	}
	st, err := h.downloads.Lstat(name)
	if err != nil || !st.Mode().IsRegular() {
		notFound()
		return
	}
	f, err := h.downloads.Open(name)
	if err != nil {
		notFound()
		return
	}
	defer f.Close()
	if st, err = f.Stat(); err != nil || !st.Mode().IsRegular() {
		notFound()
		return
	}
	hd := w.Header()
	switch {
	case name == SumsFile:
		hd.Set("Content-Type", "text/plain; charset=utf-8")
		hd.Set("Cache-Control", "no-cache") // a new make dist replaces it
	case strings.HasSuffix(name, ".tar.gz"):
		hd.Set("Content-Type", "application/gzip")
		hd.Set("Cache-Control", "public, max-age=3600")
	case strings.HasSuffix(name, ".zip"):
		hd.Set("Content-Type", "application/zip")
		hd.Set("Cache-Control", "public, max-age=3600")
	default:
		hd.Set("Content-Type", "application/octet-stream")
		hd.Set("Cache-Control", "no-cache")
	}
	hd.Set("ETag", fmt.Sprintf(`"%x-%x"`, st.Size(), st.ModTime().UnixNano()))
	http.ServeContent(w, r, name, st.ModTime(), f)
}

// noDownloads is the answer of a coordinator started without --downloads.
func (h *Handler) noDownloads() string {
	return "this coordinator offers no downloads (serve --downloads DIR serves the archives of make dist); " +
		"see the README, \"Contribute with a native worker\", for the release archives and how to build the worker"
}

// serveInstaller answers /install.sh and /install.ps1: the installer with
// this coordinator's URL, as the client reached it, as its default.
func (h *Handler) serveInstaller(w http.ResponseWriter, r *http.Request, file string) {
	if h.downloads == nil {
		http.Error(w, h.noDownloads(), http.StatusNotFound)
		return
	}
	base, err := h.baseURL(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var buf bytes.Buffer
	if err := h.installers.ExecuteTemplate(&buf, file, struct{ URL string }{base}); err != nil {
		http.Error(w, "rendering "+file+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("Content-Length", fmt.Sprint(buf.Len()))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(buf.Bytes())
}

// baseURL is the coordinator's URL as this request reached it: the public
// URL (--public-url) naming its host, whose scheme says whether a proxy in
// front speaks TLS, else http or https as the connection is.
func (h *Handler) baseURL(r *http.Request) (string, error) {
	host := r.Host
	if !safeHost.MatchString(host) {
		return "", fmt.Errorf("bad Host header %q", host)
	}
	for _, p := range h.publicURLs {
		if u, err := url.Parse(p); err == nil && strings.EqualFold(u.Host, host) && (u.Scheme == "http" || u.Scheme == "https") {
			return u.Scheme + "://" + host, nil
		}
	}
	if r.TLS != nil {
		return "https://" + host, nil
	}
	return "http://" + host, nil
}

// loadInstallers parses the installer templates. They are shell and
// PowerShell, not HTML: the one value put in, the URL, is checked by
// baseURL to hold no quote, space or other character either would read.
func loadInstallers() (*textTemplate, error) {
	t := texttemplate.New("installers")
	for _, name := range []string{"install.sh", "install.ps1"} {
		b, err := fs.ReadFile(installFiles, path.Join("install", name))
		if err != nil {
			return nil, err
		}
		if _, err := t.New(name).Parse(string(b)); err != nil {
			return nil, fmt.Errorf("web: %s: %w", name, err)
		}
	}
	if t.Lookup("install.sh") == nil {
		return nil, errors.New("web: no install.sh")
	}
	return t, nil
}
