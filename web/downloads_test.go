package web

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
)

const testArchive = "crowdtrain_v1.0.0_linux_amd64.tar.gz"

// downloadsDir is a folder as make dist leaves it, plus what must never be
// served from it: a symbolic link out of it, one to a file in it, a folder,
// a dot file.
func downloadsDir(t *testing.T) (string, []byte) {
	t.Helper()
	dir := t.TempDir()
	body := bytes.Repeat([]byte("0123456789"), 1000)
	outside := filepath.Join(t.TempDir(), "secret")
	for name, b := range map[string][]byte{
		testArchive: body, SumsFile: []byte("abc  " + testArchive + "\n"), ".hidden": []byte("x"),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(outside, []byte("TOP-SECRET-CONTENT"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "escape.tar.gz")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(testArchive, filepath.Join(dir, "alias.tar.gz")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, body
}

func downloadsHandler(t *testing.T, dir string, public ...string) *Handler {
	t.Helper()
	h, err := NewHandler(Options{Dist: fstest.MapFS{}, Logf: func(string, ...any) {}, Downloads: dir, PublicURLs: public})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// The archives are bulk data: whole, in ranges, revalidated; a name outside
// the folder, a link or a folder is refused and nothing of it is sent.
func TestDownloadsServeFilesAndRefuseTheRest(t *testing.T) {
	dir, body := downloadsDir(t)
	h := downloadsHandler(t, dir)

	w := get(t, h, "/downloads/"+testArchive, nil)
	if w.Code != http.StatusOK || !bytes.Equal(w.Body.Bytes(), body) {
		t.Fatalf("whole archive: %d, %d bytes", w.Code, w.Body.Len())
	}
	etag, lastMod := w.Header().Get("ETag"), w.Header().Get("Last-Modified")
	if w.Header().Get("Content-Type") != "application/gzip" || w.Header().Get("Accept-Ranges") != "bytes" ||
		etag == "" || lastMod == "" || !strings.Contains(w.Header().Get("Cache-Control"), "max-age") {
		t.Errorf("archive headers: %v", w.Header())
	}

	w = get(t, h, "/downloads/"+testArchive, map[string]string{"Range": "bytes=1000-1009"})
	if w.Code != http.StatusPartialContent || w.Body.String() != string(body[1000:1010]) ||
		w.Header().Get("Content-Range") != "bytes 1000-1009/10000" {
		t.Errorf("range 1000-1009: %d %q %q", w.Code, w.Body.String(), w.Header().Get("Content-Range"))
	}
	w = get(t, h, "/downloads/"+testArchive, map[string]string{"Range": "bytes=9990-", "If-Range": etag})
	if w.Code != http.StatusPartialContent || w.Body.Len() != 10 {
		t.Errorf("resumed download (If-Range with the ETag): %d, %d bytes", w.Code, w.Body.Len())
	}
	w = get(t, h, "/downloads/"+testArchive, map[string]string{"Range": "bytes=20000-"})
	if w.Code != http.StatusRequestedRangeNotSatisfiable {
		t.Errorf("range past the end: %d", w.Code)
	}
	w = get(t, h, "/downloads/"+testArchive, map[string]string{"If-None-Match": etag})
	if w.Code != http.StatusNotModified || w.Body.Len() != 0 {
		t.Errorf("revalidated with its ETag: %d, %d bytes", w.Code, w.Body.Len())
	}
	w = get(t, h, "/downloads/"+SumsFile, nil)
	if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") ||
		w.Header().Get("Cache-Control") != "no-cache" || !strings.Contains(w.Body.String(), testArchive) {
		t.Errorf("SHA256SUMS: %d %v %q", w.Code, w.Header(), w.Body.String())
	}

	for path, code := range map[string]int{
		"/downloads/..%2f..%2fetc%2fpasswd":           http.StatusBadRequest,
		"/downloads/..%2Fsecret":                      http.StatusBadRequest,
		"/downloads/%2Fetc%2Fpasswd":                  http.StatusBadRequest,
		"/downloads/" + filepath.Join(dir, SumsFile):  http.StatusBadRequest, // an absolute path
		"/downloads/..":                               http.StatusBadRequest,
		"/downloads/.hidden":                          http.StatusBadRequest,
		"/downloads/sub%5c..%5cx":                     http.StatusBadRequest,
		"/downloads/":                                 http.StatusBadRequest,
		"/downloads/escape.tar.gz":                    http.StatusNotFound, // a link out of the folder
		"/downloads/alias.tar.gz":                     http.StatusNotFound, // a link inside: links are not served
		"/downloads/sub":                              http.StatusNotFound,
		"/downloads/crowdtrain_v9_linux_amd64.tar.gz": http.StatusNotFound,
	} {
		w := get(t, h, path, nil)
		if w.Code != code || strings.Contains(w.Body.String(), "TOP-SECRET") || strings.Contains(w.Body.String(), "0123456789") {
			t.Errorf("%s: %d %q, want %d and nothing of the file", path, w.Code, w.Body.String(), code)
		}
	}
}

// The installers carry the URL the coordinator was reached by, https when
// its public URL says so; a Host that could break out of the script is
// refused; without --downloads there are none, and the answer says why.
func TestInstallersNameTheCoordinator(t *testing.T) {
	dir, _ := downloadsDir(t)
	h := downloadsHandler(t, dir, "https://grid.example.org")
	for _, c := range []struct{ host, file, want string }{
		{"127.0.0.1:8080", "/install.sh", "COORDINATOR='http://127.0.0.1:8080'"},
		{"grid.example.org", "/install.sh", "COORDINATOR='https://grid.example.org'"},
		{"[::1]:8080", "/install.ps1", "[string]$Coordinator = 'http://[::1]:8080'"},
	} {
		r := httptest.NewRequest(http.MethodGet, c.file, nil)
		r.Host = c.host
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), c.want) || strings.Contains(w.Body.String(), "{{") {
			t.Errorf("%s from %s: %d, want a script holding %s", c.file, c.host, w.Code, c.want)
		}
	}
	for _, host := range []string{"x'$(id)'", "a b", "evil\"host"} {
		r := httptest.NewRequest(http.MethodGet, "/install.sh", nil)
		r.Host = host
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusBadRequest || strings.Contains(w.Body.String(), "COORDINATOR=") {
			t.Errorf("install.sh for Host %q: %d, want 400 and no script", host, w.Code)
		}
	}

	bare, _ := newTestHandler(t, fstest.MapFS{})
	for _, path := range []string{"/install.sh", "/install.ps1", "/downloads/" + SumsFile} {
		w := get(t, bare, path, nil)
		if w.Code != http.StatusNotFound || !strings.Contains(w.Body.String(), "--downloads") || !strings.Contains(w.Body.String(), "README") {
			t.Errorf("%s without --downloads: %d %q, want 404 saying where downloads are", path, w.Code, w.Body.String())
		}
	}
	if _, err := NewHandler(Options{Dist: fstest.MapFS{}, Downloads: t.TempDir()}); err == nil || !strings.Contains(err.Error(), SumsFile) {
		t.Errorf("a downloads folder without SHA256SUMS: %v, want an error naming it", err)
	}
}
