package coordinator

import (
	"crypto/sha256"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// Defaults of the HTTP access limits; docs/SECURITY.md says what each
// defends.
const (
	defaultAuthFailBurst   = 5
	defaultAuthFailEvery   = 10 * time.Second
	defaultClientTableSize = 10000
	defaultAnonBulkRate    = 256 << 10 // bytes/s
	// The contribute page and its wasm (about 3 MB gzipped, 11.5 MB raw
	// for a client that does not ask for gzip) load in one go.
	defaultAnonBulkBurst   = 16 << 20
	defaultMinReadRate     = 64 << 10 // bytes/s, well under a 10 Mbit/s home link
	defaultMinReadGrace    = 10 * time.Second
	defaultMetricsPageMax  = 5000
	defaultReadBodyTimeout = 10 * time.Second
)

func (c *Config) setAccessDefaults() {
	orDefault(&c.AuthFailBurst, defaultAuthFailBurst)
	orDefault(&c.AuthFailEvery, defaultAuthFailEvery)
	orDefault(&c.ClientTableSize, defaultClientTableSize)
	orDefault(&c.AnonBulkRate, defaultAnonBulkRate)
	orDefault(&c.AnonBulkBurst, defaultAnonBulkBurst)
	orDefault(&c.MinReadRate, defaultMinReadRate)
	orDefault(&c.MinReadGrace, defaultMinReadGrace)
	orDefault(&c.MetricsPageMax, defaultMetricsPageMax)
	orDefault(&c.ReadBodyTimeout, defaultReadBodyTimeout)
}

// siteName is one scheme, host and port the coordinator is reached by.
type siteName struct{ scheme, host, port string }

// hostPolicy decides which Host and Origin headers name this coordinator.
// Checking Host defeats DNS rebinding (a page at evil.example whose name
// now resolves to 127.0.0.1 sends Host: evil.example); checking Origin by
// scheme, host and port keeps other pages' scripts out.
type hostPolicy struct {
	names   []siteName
	proxies trustedProxies
	// pages are other sites whose pages may use this coordinator: a
	// relay's root, whose contribute page connects its tabs here
	// (AllowPages). Their scripts may also read the bulk data (CORS).
	pages atomic.Pointer[[]siteName]
	// secure: a public URL is https, so browsers reach the coordinator
	// over TLS only: cookies are Secure and responses carry HSTS.
	secure bool
}

// allowPages lets pages at the URLs use the coordinator.
func (p *hostPolicy) allowPages(urls ...string) {
	var names []siteName
	for _, raw := range urls {
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
			continue
		}
		names = append(names, siteName{u.Scheme, normalHost(u.Hostname()), portOr(u.Port(), u.Scheme)})
	}
	p.pages.Store(&names)
}

// pageAllowed reports whether origin is one of the pages allowed here.
func (p *hostPolicy) pageAllowed(origin string) bool {
	pages := p.pages.Load()
	if pages == nil {
		return false
	}
	u, err := url.Parse(origin)
	if err != nil || u.Hostname() == "" || u.Path != "" {
		return false
	}
	return slices.Contains(*pages, siteName{u.Scheme, normalHost(u.Hostname()), portOr(u.Port(), u.Scheme)})
}

func newHostPolicy(publicURLs []string, proxies trustedProxies) (*hostPolicy, error) {
	p := &hostPolicy{proxies: proxies}
	for _, raw := range publicURLs {
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
			return nil, fmt.Errorf("public URL %q: give the scheme, host and port volunteers use, such as https://grid.example.org or http://10.0.0.5:8080", raw)
		}
		p.names = append(p.names, siteName{u.Scheme, normalHost(u.Hostname()), portOr(u.Port(), u.Scheme)})
		p.secure = p.secure || u.Scheme == "https"
	}
	return p, nil
}

func normalHost(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }

func portOr(port, scheme string) string {
	if port != "" {
		return port
	}
	if scheme == "https" {
		return "443"
	}
	return "80"
}

// splitHost splits a Host header into host and port ("" when absent).
func splitHost(hostport string) (host, port string) {
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		return normalHost(h), p
	}
	return normalHost(strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")), ""
}

func isLoopbackName(host string) bool {
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}

// hostAllowed reports whether a request's Host header names this
// coordinator: a loopback name on any port, or a public URL's host and
// port (a Host without a port means the scheme's default).
func (p *hostPolicy) hostAllowed(hostport string) bool {
	host, port := splitHost(hostport)
	if host == "" {
		return false
	}
	if isLoopbackName(host) {
		return true
	}
	for _, n := range p.names {
		if n.host == host && (n.port == port || port == "" && n.port == portOr("", n.scheme)) {
			return true
		}
	}
	return false
}

// scheme is how the client reached us: https over TLS here, or as a
// trusted proxy says in X-Forwarded-Proto.
func (p *hostPolicy) scheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	if p.proxies.contains(remoteIP(r)) {
		if s := strings.ToLower(strings.TrimSpace(r.Header.Get("X-Forwarded-Proto"))); s == "https" || s == "http" {
			return s
		}
	}
	return "http"
}

// originAllowed reports whether a browser Origin may use the coordinator:
// one of the public URLs, or, on a loopback name, the very scheme, host and
// port of this request.
func (p *hostPolicy) originAllowed(r *http.Request, origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Hostname() == "" || u.Path != "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false // "null" (sandboxed frames, file: pages) too
	}
	o := siteName{u.Scheme, normalHost(u.Hostname()), portOr(u.Port(), u.Scheme)}
	if p.pageAllowed(origin) {
		return true
	}
	// Loopback names are allowed on any port, so for them the page must
	// come from this very scheme, host and port.
	if host, port := splitHost(r.Host); isLoopbackName(host) {
		scheme := p.scheme(r)
		return o == siteName{scheme, host, portOr(port, scheme)}
	}
	for _, n := range p.names {
		if o == n {
			return true
		}
	}
	return false
}

// checkAccess refuses requests whose Host or Origin does not name this
// coordinator, on every route but /healthz (which load balancers probe by
// address and which shows nothing).
// hstsValue is the Strict-Transport-Security header of a coordinator with
// an https public URL. No includeSubDomains: the operator's other hosts are
// not the coordinator's to pin.
const hstsValue = "max-age=31536000"

func (s *Server) checkAccess(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A body trickled a byte at a time would hold the connection and
		// its goroutine for ever: the header timeout ends with the headers,
		// and the server reads what a handler left of a body before it
		// answers. Deadlines are per request (the server sets the next
		// request's), and a websocket upgrade has no body.
		if r.ContentLength != 0 {
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.cfg.ReadBodyTimeout))
		}
		if s.hosts.secure {
			// Browsers keep to https for a year; they ignore it over http.
			w.Header().Set("Strict-Transport-Security", hstsValue)
		}
		if r.URL.Path == "/healthz" {
			next.ServeHTTP(w, r)
			return
		}
		if !s.hosts.hostAllowed(r.Host) {
			writeError(w, http.StatusForbidden, "this coordinator does not answer to the host %q; if that is how volunteers reach it, its operator adds it with `crowdtrain serve --public-url http://%s`", r.Host, r.Host)
			return
		}
		origin := r.Header.Get("Origin")
		if origin != "" && !s.hosts.originAllowed(r, origin) {
			writeError(w, http.StatusForbidden, "web pages at %q may not use this coordinator (only its own pages and its --public-url names may); if that is how volunteers reach it, its operator adds it with `crowdtrain serve --public-url %s`", origin, origin)
			return
		}
		if origin != "" && s.hosts.pageAllowed(origin) && strings.HasPrefix(r.URL.Path, "/api/v1/") {
			// A relay's root's page: its tabs' workers read snapshots
			// and shards here, across origins.
			h := w.Header()
			h.Set("Access-Control-Allow-Origin", origin)
			h.Add("Vary", "Origin")
			if r.Method == http.MethodOptions {
				h.Set("Access-Control-Allow-Methods", "GET, HEAD")
				h.Set("Access-Control-Allow-Headers", "X-Crowdtrain-Worker, If-None-Match, Range")
				h.Set("Access-Control-Max-Age", "600")
				w.WriteHeader(http.StatusNoContent)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// guardMetrics puts /metrics behind MetricsToken when one is set. Failed
// tokens count toward the address's failures like the admin token's.
func (s *Server) guardMetrics(h http.Handler) http.Handler {
	if s.cfg.MetricsToken == "" {
		return h
	}
	want := sha256.Sum256([]byte(s.cfg.MetricsToken))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h0 := r.Header.Get("Authorization")
		if h0 == "" { // asking without a token is no guess
			writeAuthRefusal(w, authDenied, 0)
			return
		}
		token, isBearer := strings.CutPrefix(h0, "Bearer ")
		if res, wait := s.auth.checkToken(token, want, isBearer, s.clientKey(r), time.Now()); res != authOK {
			writeAuthRefusal(w, res, wait)
			return
		}
		h.ServeHTTP(w, r)
	})
}
