package coordinator_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/crowdtrain/crowdtrain/coordinator"
)

// clientFrom is an HTTP client whose connections come from ip (any of
// 127.0.0.0/8 is this machine), to play several client addresses.
func clientFrom(t *testing.T, ip string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	tr := &http.Transport{DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// send makes a request with c and returns the response with its body read.
func (g *testGrid) send(c *http.Client, method, path string, body io.Reader, header map[string]string) (*http.Response, []byte) {
	g.t.Helper()
	req, err := http.NewRequest(method, g.http.URL+path, body)
	if err != nil {
		g.t.Fatal(err)
	}
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		g.t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	return resp, b
}

func bearer(token string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + token}
}

// Guessing the admin token is limited per address on every route that
// checks it; once limited, even the right token from that address is
// refused, while other addresses and signed-in sessions carry on.
func TestBearerGuessingIsLimited(t *testing.T) {
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) {
		c.AuthFailBurst, c.AuthFailEvery = 3, time.Hour
		c.MetricsToken = "metrics-token-0123456789"
	})
	here, other := clientFrom(t, "127.0.0.1"), clientFrom(t, "127.0.0.2")

	// The operator signs in before the guessing starts.
	login, _ := json.Marshal(map[string]string{"token": testAdminToken})
	resp, _ := g.send(here, http.MethodPost, "/admin/login", bytes.NewReader(login), nil)
	if resp.StatusCode != http.StatusNoContent || len(resp.Cookies()) != 1 {
		t.Fatalf("sign-in: %d", resp.StatusCode)
	}
	session := map[string]string{"Cookie": resp.Cookies()[0].Name + "=" + resp.Cookies()[0].Value}

	// Three failures on three different token routes use up the burst.
	for _, path := range []string{"/api/v1/workers", "/api/v1/jobs/" + g.job.ID + "/checkpoints", "/metrics"} {
		if resp, body := g.send(here, http.MethodGet, path, nil, bearer("guess-guess-guess-guess")); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("guess at %s: %d %s; want 401", path, resp.StatusCode, body)
		}
	}
	resp, body := g.send(here, http.MethodGet, "/api/v1/workers", nil, bearer("guess-guess-guess-guess"))
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "too many failed token checks") {
		t.Fatalf("fourth guess: %d, Retry-After %q, %s; want 429 saying why and when to retry", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	for _, path := range []string{"/api/v1/workers", "/api/v1/session"} {
		if resp, _ := g.send(here, http.MethodGet, path, nil, bearer(testAdminToken)); resp.StatusCode != http.StatusTooManyRequests {
			t.Errorf("the right token at %s from the limited address: %d, want 429 like any guess", path, resp.StatusCode)
		}
	}
	if resp, _ := g.send(here, http.MethodGet, "/metrics", nil, bearer("metrics-token-0123456789")); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("the right metrics token from the limited address: %d, want 429", resp.StatusCode)
	}
	if resp, _ := g.send(here, http.MethodPost, "/admin/login", bytes.NewReader(login), nil); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("sign-in with the right token from the limited address: %d, want 429", resp.StatusCode)
	}
	if resp, body := g.send(other, http.MethodGet, "/api/v1/workers", nil, bearer(testAdminToken)); resp.StatusCode != http.StatusOK {
		t.Errorf("the right token from another address: %d %s, want 200", resp.StatusCode, body)
	}
	if resp, body := g.send(here, http.MethodGet, "/api/v1/workers", nil, session); resp.StatusCode != http.StatusOK {
		t.Errorf("the signed-in session at the limited address: %d %s, want 200", resp.StatusCode, body)
	}
	if resp, body := g.send(here, http.MethodPost, "/api/v1/jobs/"+g.job.ID+"/pause", nil, session); resp.StatusCode != http.StatusOK {
		t.Errorf("a change through the signed-in session: %d %s, want 200", resp.StatusCode, body)
	}
}

// /metrics takes a token when one is configured (and counts failures like
// the admin token), and is public otherwise.
func TestMetricsToken(t *testing.T) {
	const token = "metrics-token-0123456789"
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) { c.MetricsToken = token })
	c := http.DefaultClient
	for _, h := range []map[string]string{nil, bearer("wrong-wrong-wrong-wrong"), bearer(testAdminToken), {"Authorization": token}} {
		if resp, body := g.send(c, http.MethodGet, "/metrics", nil, h); resp.StatusCode != http.StatusUnauthorized || strings.Contains(string(body), "go_goroutines") {
			t.Errorf("/metrics with %v: %d; want 401 and no figures", h, resp.StatusCode)
		}
	}
	resp, body := g.send(c, http.MethodGet, "/metrics", nil, bearer(token))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "go_goroutines") {
		t.Errorf("/metrics with its token: %d, want 200 and the figures", resp.StatusCode)
	}
	// The rest of the public API does not need it.
	if resp, _ := g.send(c, http.MethodGet, "/api/v1/jobs", nil, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("/api/v1/jobs: %d", resp.StatusCode)
	}
}

// upgrade asks for a websocket at /ws with the given Host and Origin and
// returns the status: 101 when it would be accepted.
func (g *testGrid) upgrade(host, origin string) int {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := http.Header{}
	if origin != "" {
		h.Set("Origin", origin)
	}
	c, resp, err := websocket.Dial(ctx, g.wsURL(), &websocket.DialOptions{Host: host, HTTPHeader: h})
	if err == nil {
		c.CloseNow()
		return http.StatusSwitchingProtocols
	}
	if resp == nil {
		g.t.Fatalf("dial with Host %q, Origin %q: %v", host, origin, err)
	}
	return resp.StatusCode
}

// A page on another site (including one whose name now resolves to this
// machine: DNS rebinding) may not use the coordinator: a foreign Host or
// Origin is refused on /ws, the API, the admin routes and the pages; the
// names given as public URLs are accepted.
func TestForeignHostAndOriginAreRefused(t *testing.T) {
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) {
		c.PublicURLs = []string{"https://grid.example.org", "http://10.1.2.3:8080"}
	})
	self := strings.TrimPrefix(g.http.URL, "http://") // 127.0.0.1:PORT
	port := self[strings.LastIndex(self, ":")+1:]
	refused := []struct{ name, host, origin string }{
		{"a rebound name", "evil.example", "http://evil.example"},
		{"a rebound name without an Origin", "evil.example:" + port, ""},
		{"a foreign Origin", self, "http://evil.example"},
		{"https on this http host and port", self, "https://" + self},
		{"another port", self, "http://127.0.0.1:1"},
		{"a public URL's host on another port", "grid.example.org:8443", ""},
		{"a public URL's origin with another scheme", "grid.example.org", "http://grid.example.org"},
		{"a null origin", self, "null"},
	}
	accepted := []struct{ name, host, origin string }{
		{"this address", self, "http://" + self},
		{"localhost", "localhost:" + port, "http://localhost:" + port},
		{"no Origin (a native worker)", self, ""},
		{"a public https URL behind a proxy", "grid.example.org", "https://grid.example.org"},
		{"a public URL with its port", "10.1.2.3:8080", "http://10.1.2.3:8080"},
	}
	routes := []struct{ method, path string }{
		{http.MethodGet, "/api/v1/jobs"},
		{http.MethodGet, "/api/v1/jobs/" + g.job.ID + "/shards/v2/0"},
		{http.MethodGet, "/api/v1/workers"},          // admin
		{http.MethodPost, "/api/v1/jobs/nope/pause"}, // admin, a change
		{http.MethodGet, "/"},                        // the pages
		{http.MethodPost, "/admin/login"},
	}
	for _, c := range refused {
		if code := g.upgrade(c.host, c.origin); code != http.StatusForbidden {
			t.Errorf("/ws from %s (Host %q, Origin %q): %d, want 403", c.name, c.host, c.origin, code)
		}
		for _, r := range routes {
			h := bearer(testAdminToken)
			h["Host"] = c.host
			if c.origin != "" {
				h["Origin"] = c.origin
			}
			resp, body := g.send(http.DefaultClient, r.method, r.path, nil, h)
			if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "--public-url") {
				t.Errorf("%s %s from %s: %d %.200q; want 403 saying how to allow it", r.method, r.path, c.name, resp.StatusCode, body)
			}
		}
	}
	for _, c := range accepted {
		if code := g.upgrade(c.host, c.origin); code != http.StatusSwitchingProtocols {
			t.Errorf("/ws from %s (Host %q, Origin %q): %d, want 101", c.name, c.host, c.origin, code)
		}
		h := bearer(testAdminToken)
		h["Host"] = c.host
		if c.origin != "" {
			h["Origin"] = c.origin
		}
		if resp, body := g.send(http.DefaultClient, http.MethodGet, "/api/v1/workers", nil, h); resp.StatusCode != http.StatusOK {
			t.Errorf("GET /api/v1/workers from %s: %d %s, want 200", c.name, resp.StatusCode, body)
		}
	}
	// Load balancers probe /healthz by address.
	if resp, _ := g.send(http.DefaultClient, http.MethodGet, "/healthz", nil, map[string]string{"Host": "10.9.9.9"}); resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz by address: %d", resp.StatusCode)
	}
}

// A request body trickled a byte at a time held its connection (and its
// goroutine) for ever, on any route: 300 such sign-ins from one address
// were all still open after 90 s. The body must arrive within
// ReadBodyTimeout of the headers, or the connection is closed.
func TestTrickledRequestBodiesAreCut(t *testing.T) {
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) { c.ReadBodyTimeout = 300 * time.Millisecond })
	for _, path := range []string{"/admin/login", "/healthz", "/api/v1/jobs"} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(g.http.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		host := strings.TrimPrefix(g.http.URL, "http://")
		if _, err := fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{", path, host); err != nil {
			t.Fatal(err)
		}
		// Keep trickling, and read whatever comes, until the coordinator
		// closes the connection.
		start := time.Now()
		closed := make(chan struct{})
		go func() {
			defer close(closed)
			_, _ = io.Copy(io.Discard, conn)
		}()
	trickle:
		for {
			select {
			case <-closed:
				break trickle
			case <-time.After(50 * time.Millisecond):
				if time.Since(start) > 5*time.Second {
					t.Fatalf("POST %s: a body trickled for 5 s is still being read (body timeout 300ms)", path)
				}
				_, _ = conn.Write([]byte(" "))
			}
		}
	}
}

// One address may hold only so many HTTP connections: each can pin kernel
// memory with a response it does not read (a worker holding a lease got
// its snapshot free 500 times over, unread, and pinned 630 MB), or hold
// a goroutine. Connections past the limit are closed as they arrive,
// another address is unaffected, and a slot comes back when a connection
// closes.
func TestHTTPConnectionsPerAddressAreLimited(t *testing.T) {
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) { c.MaxHTTPConnsPerAddress = 3 })
	addr := strings.TrimPrefix(g.http.URL, "http://")
	dialFrom := func(ip string) net.Conn {
		t.Helper()
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// answers reports whether the server answers a request on c.
	answers := func(c net.Conn) bool {
		t.Helper()
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	held := []net.Conn{dialFrom("127.0.0.2"), dialFrom("127.0.0.2"), dialFrom("127.0.0.2")}
	for i, c := range held {
		if !answers(c) {
			t.Fatalf("connection %d of 3 was not served", i+1)
		}
	}
	if answers(dialFrom("127.0.0.2")) {
		t.Fatal("a 4th connection from one address was served; want it closed")
	}
	if !answers(dialFrom("127.0.0.3")) {
		t.Fatal("another address was refused")
	}
	held[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for !answers(dialFrom("127.0.0.2")) {
		if time.Now().After(deadline) {
			t.Fatal("no slot came back after a connection closed")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Behind a TLS proxy (named by --trusted-proxy, saying X-Forwarded-Proto:
// https) the session cookie is Secure, so a browser never sends it over
// plain HTTP; from anyone else the header changes nothing.
func TestSessionCookieIsSecureBehindATLSProxy(t *testing.T) {
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) { c.TrustedProxies = []string{"127.0.0.1"} })
	login, _ := json.Marshal(map[string]string{"token": testAdminToken})
	for _, c := range []struct {
		from   string
		secure bool
	}{{"127.0.0.1", true}, {"127.0.0.2", false}} {
		resp, body := g.send(clientFrom(t, c.from), http.MethodPost, "/admin/login", bytes.NewReader(login), map[string]string{"X-Forwarded-Proto": "https"})
		if resp.StatusCode != http.StatusNoContent || len(resp.Cookies()) != 1 {
			t.Fatalf("sign-in from %s: %d %s", c.from, resp.StatusCode, body)
		}
		if got := resp.Cookies()[0].Secure; got != c.secure {
			t.Errorf("sign-in from %s with X-Forwarded-Proto https: Secure %v, want %v", c.from, got, c.secure)
		}
	}
}

// An https --public-url says browsers reach the coordinator over TLS
// (here or at a proxy): the session cookie is Secure whatever the request
// says, and every response carries HSTS. Without one, neither.
func TestHTTPSPublicURLMeansSecureCookieAndHSTS(t *testing.T) {
	login, _ := json.Marshal(map[string]string{"token": testAdminToken})
	for _, c := range []struct {
		public string
		secure bool
	}{{"https://grid.example.org", true}, {"http://10.1.2.3:8080", false}} {
		g := newTestGridWith(t, quietJob(t), func(cfg *coordinator.Config) { cfg.PublicURLs = []string{c.public} })
		resp, body := g.send(clientFrom(t, "127.0.0.1"), http.MethodPost, "/admin/login", bytes.NewReader(login), nil)
		if resp.StatusCode != http.StatusNoContent || len(resp.Cookies()) != 1 {
			t.Fatalf("--public-url %s: sign-in: %d %s", c.public, resp.StatusCode, body)
		}
		if got := resp.Cookies()[0].Secure; got != c.secure {
			t.Errorf("--public-url %s: session cookie Secure %v, want %v", c.public, got, c.secure)
		}
		resp, _ = g.send(clientFrom(t, "127.0.0.1"), http.MethodGet, "/api/v1/jobs", nil, nil)
		hsts := resp.Header.Get("Strict-Transport-Security")
		if c.secure && !strings.HasPrefix(hsts, "max-age=") || !c.secure && hsts != "" {
			t.Errorf("--public-url %s: Strict-Transport-Security %q", c.public, hsts)
		}
	}
}
