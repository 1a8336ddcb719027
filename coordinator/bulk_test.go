package coordinator_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/web"
)

// An address holding no lease may download only its budget of snapshots
// and shards; a worker fetching its own leases' data is not limited.
func TestAnonymousBulkDownloadsAreBudgeted(t *testing.T) {
	const burst = 3 << 20
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) { c.AnonBulkBurst, c.AnonBulkRate = burst, 1 })
	rc := g.joinRaw() // from 127.0.0.1
	l := rc.leases(1)[0]
	worker, anon := clientFrom(t, "127.0.0.1"), clientFrom(t, "127.0.0.2")

	fetched := 0
	for range 5 {
		for _, path := range []string{l.SnapshotURL, l.ShardURL} {
			resp, body := g.send(worker, http.MethodGet, path, nil, nil)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Cache-Control") != "public, max-age=31536000, immutable" {
				t.Fatalf("the lease holder's GET %s after %d bytes: %d, Cache-Control %q", path, fetched, resp.StatusCode, resp.Header.Get("Cache-Control"))
			}
			fetched += len(body)
		}
	}
	if fetched <= 2*burst {
		t.Fatalf("the worker fetched only %d bytes; the test needs more than the budget", fetched)
	}

	got, refused := 0, false
	var etag string
	for i := 0; i < 20 && !refused; i++ {
		resp, body := g.send(anon, http.MethodGet, l.ShardURL, nil, nil)
		switch resp.StatusCode {
		case http.StatusOK:
			got += len(body)
			etag = resp.Header.Get("ETag")
		case http.StatusTooManyRequests:
			refused = true
			if resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "holding a lease") {
				t.Errorf("refusal: Retry-After %q, %s; want a wait and the reason", resp.Header.Get("Retry-After"), body)
			}
		default:
			t.Fatalf("anonymous GET %s: %d %s", l.ShardURL, resp.StatusCode, body)
		}
	}
	if !refused || got > burst {
		t.Fatalf("an address with no lease downloaded %d bytes (refused: %v); want a 429 within its %d-byte budget", got, refused, burst)
	}
	// A cache's revalidation costs nothing and still works.
	if resp, _ := g.send(anon, http.MethodGet, l.ShardURL, nil, map[string]string{"If-None-Match": etag}); resp.StatusCode != http.StatusNotModified {
		t.Errorf("revalidation while over budget: %d, want 304", resp.StatusCode)
	}
	// The lease holder's other data is not free: the shard of no lease of
	// its own is charged to its address.
	other := fmt.Sprintf("/api/v1/jobs/%s/shards/v2/%d", g.job.ID, (l.ShardID+1)%4)
	for i := 0; ; i++ {
		resp, _ := g.send(worker, http.MethodGet, other, nil, nil)
		if resp.StatusCode == http.StatusTooManyRequests {
			break
		}
		if i == 20 {
			t.Fatalf("the worker fetched a shard it holds no lease on %d times", i)
		}
	}
}

// smallSendBuffers gives accepted connections a small kernel send buffer,
// as a host serving many clients has per socket; loopback's own buffers
// would hold a whole shard and hide the reader's pace.
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(16 << 10)
	}
	return c, err
}

// readPaced GETs path over a socket with a small receive buffer, reading at
// about rate bytes/s for at most limit. It returns the body's length as
// announced, the bytes read and the error that ended the read (nil at the
// end of the body).
func readPaced(t *testing.T, addr, path string, rate int, limit time.Duration) (want, got int, err error) {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, addr)
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 4096), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", path, resp.Status)
	}
	want, _ = strconv.Atoi(resp.Header.Get("Content-Length"))
	start := time.Now()
	buf := make([]byte, 4096)
	for time.Since(start) < limit {
		n, err := resp.Body.Read(buf)
		got += n
		if errors.Is(err, io.EOF) {
			return want, got, nil
		}
		if err != nil {
			return want, got, err
		}
		time.Sleep(time.Until(start.Add(time.Duration(float64(got) / float64(rate) * float64(time.Second)))))
	}
	return want, got, fmt.Errorf("still reading after %v", limit)
}

// A client reading slower than the minimum rate is cut once the grace
// period is over; one reading faster gets the whole body.
func TestSlowReaderIsCut(t *testing.T) {
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) {
		c.MinReadRate, c.MinReadGrace = 256<<10, 200*time.Millisecond
		c.AnonBulkBurst = 1 << 30
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(g.srv.Handler())
	hs.Listener.Close()
	hs.Listener = smallSendBuffers{ln}
	hs.Start()
	defer hs.Close()
	addr := ln.Addr().String()
	shard := "/api/v1/jobs/" + g.job.ID + "/shards/v2/0"

	want, got, err := readPaced(t, addr, shard, 32<<10, 5*time.Second)
	if err == nil || got >= want || strings.Contains(err.Error(), "still reading") {
		t.Errorf("a reader at 32 KiB/s (minimum 256 KiB/s): read %d of %d bytes, ended by %v; want it cut", got, want, err)
	}
	want, got, err = readPaced(t, addr, shard, 1<<20, 5*time.Second)
	if err != nil || got != want || want == 0 {
		t.Errorf("a reader at 1 MiB/s: read %d of %d bytes, ended by %v; want the whole body", got, want, err)
	}
}

// The pages' files count toward the same budget: a new visitor loads the
// contribute page and the browser worker, a client fetching the worker
// again and again is refused.
func TestPageFilesCountTowardTheBudget(t *testing.T) {
	wasm := make([]byte, 5<<20)
	_, _ = rand.NewChaCha8([32]byte{1}).Read(wasm) // incompressible: served whole either way
	pages, err := web.NewHandler(web.Options{Dist: fstest.MapFS{
		web.WasmFile:     {Data: wasm},
		web.WasmExecFile: {Data: []byte("// wasm_exec.js")},
	}, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) {
		c.Pages, c.AnonBulkBurst, c.AnonBulkRate = pages, 8<<20, 1
	})
	visitor := clientFrom(t, "127.0.0.2")
	gz := map[string]string{"Accept-Encoding": "gzip"}
	if resp, body := g.send(visitor, http.MethodGet, "/", nil, gz); resp.StatusCode != http.StatusOK || len(body) == 0 {
		t.Fatalf("the contribute page: %d", resp.StatusCode)
	}
	resp, body := g.send(visitor, http.MethodGet, "/static/"+web.WasmFile, nil, gz)
	if resp.StatusCode != http.StatusOK || !bytes.Equal(body, wasm) {
		t.Fatalf("a new visitor's browser worker: %d, %d bytes of %d", resp.StatusCode, len(body), len(wasm))
	}
	etag := resp.Header.Get("ETag")
	resp, body = g.send(visitor, http.MethodGet, "/static/"+web.WasmFile, nil, gz)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || resp.Header.Get("ETag") != "" {
		t.Fatalf("the browser worker again, past the budget: %d, Retry-After %q, ETag %q, %d bytes; want 429 with a wait and no cache headers",
			resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("ETag"), len(body))
	}
	resp, _ = g.send(visitor, http.MethodGet, "/static/"+web.WasmFile, nil, map[string]string{"If-None-Match": etag})
	if resp.StatusCode != http.StatusNotModified {
		t.Errorf("revalidating the cached worker past the budget: %d, want 304", resp.StatusCode)
	}
	if resp, _ := g.send(clientFrom(t, "127.0.0.3"), http.MethodGet, "/static/"+web.WasmFile, nil, gz); resp.StatusCode != http.StatusOK {
		t.Errorf("another visitor: %d, want 200", resp.StatusCode)
	}
}

// The worker's release archives (serve --downloads) are bulk data too, and
// a range of one is charged like the whole: ranges do not get round the
// budget.
func TestDownloadRangesCountTowardTheBudget(t *testing.T) {
	dir := t.TempDir()
	archive := make([]byte, 5<<20)
	_, _ = rand.NewChaCha8([32]byte{2}).Read(archive)
	for name, b := range map[string][]byte{"crowdtrain_v1_linux_amd64.tar.gz": archive, web.SumsFile: []byte("x")} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pages, err := web.NewHandler(web.Options{Dist: fstest.MapFS{}, Logf: t.Logf, Downloads: dir})
	if err != nil {
		t.Fatal(err)
	}
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) {
		c.Pages, c.AnonBulkBurst, c.AnonBulkRate = pages, 8<<20, 1
	})
	visitor := clientFrom(t, "127.0.0.2")
	const path = "/downloads/crowdtrain_v1_linux_amd64.tar.gz"
	resp, body := g.send(visitor, http.MethodGet, path, nil, nil)
	if resp.StatusCode != http.StatusOK || !bytes.Equal(body, archive) {
		t.Fatalf("the archive: %d, %d bytes", resp.StatusCode, len(body))
	}
	rng := map[string]string{"Range": "bytes=0-4194303"} // 4 MiB: past the 3 MiB left
	if resp, body = g.send(visitor, http.MethodGet, path, nil, rng); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a 4 MiB range past the budget: %d, %d bytes; want 429", resp.StatusCode, len(body))
	}
	if resp, body = g.send(clientFrom(t, "127.0.0.3"), http.MethodGet, path, nil, rng); resp.StatusCode != http.StatusPartialContent || len(body) != 4<<20 {
		t.Errorf("another visitor's range: %d, %d bytes; want 206 with 4 MiB", resp.StatusCode, len(body))
	}
}
