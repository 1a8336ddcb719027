//go:build cgo

package main

import (
	"flag"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
)

// accessFlags are serve's flags for who may reach what over HTTP
// (docs/SECURITY.md, "HTTP access").
type accessFlags struct {
	publicURLs        stringList
	trustedProxies    stringList
	metricsToken      string
	authFailBurst     int
	authFailEvery     time.Duration
	anonBulkRate      int64
	anonBulkBurst     int64
	minReadRate       int64
	minReadGrace      time.Duration
	metricsPageMax    int
	idleTimeout       time.Duration
	readHeaderTimeout time.Duration
	readBodyTimeout   time.Duration
	maxHTTPConns      int
}

func (a *accessFlags) register(fs *flag.FlagSet) {
	fs.Var(&a.publicURLs, "public-url", "`URL` (scheme, host and port) volunteers and a proxy in front reach the coordinator by; other Host and Origin headers are refused; repeatable (loopback names and a non-wildcard --addr are always allowed)")
	fs.Var(&a.trustedProxies, "trusted-proxy", "`ADDRESS` or CIDR of a proxy whose X-Forwarded-For names the client; repeatable")
	fs.StringVar(&a.metricsToken, "metrics-token", "", "`TOKEN` that /metrics requires as \"Authorization: Bearer TOKEN\" (default: /metrics is public)")
	fs.IntVar(&a.authFailBurst, "auth-fail-burst", 5, "failed token checks allowed per client address before it must wait")
	fs.DurationVar(&a.authFailEvery, "auth-fail-every", 10*time.Second, "one more failed token check is allowed per client address every `DURATION`")
	fs.Int64Var(&a.anonBulkRate, "anon-bulk-rate", 256<<10, "`BYTES` per second of snapshots, shards and page files for a client address holding no lease")
	fs.Int64Var(&a.anonBulkBurst, "anon-bulk-burst", 16<<20, "`BYTES` a client address holding no lease may download at once (enough for the contribute page and its wasm)")
	fs.Int64Var(&a.minReadRate, "min-read-rate", 64<<10, "`BYTES` per second below which a client reading a download is cut, after --min-read-grace")
	fs.DurationVar(&a.minReadGrace, "min-read-grace", 10*time.Second, "time a download may take before --min-read-rate applies")
	fs.IntVar(&a.metricsPageMax, "metrics-page-max", 5000, "most rows of a job's metrics history in one API response")
	fs.DurationVar(&a.idleTimeout, "idle-timeout", 60*time.Second, "an idle keep-alive HTTP connection is closed after `DURATION`")
	fs.DurationVar(&a.readHeaderTimeout, "read-header-timeout", 10*time.Second, "a client must send a request's headers within `DURATION`")
	fs.IntVar(&a.maxHTTPConns, "max-http-conns-per-address", coordinator.DefaultMaxHTTPConnsPerAddress, "HTTP connections one client address (IPv6: its /64) may hold open at once; a --trusted-proxy's are not counted")
	fs.DurationVar(&a.readBodyTimeout, "read-body-timeout", 10*time.Second, "a client must send a request's body within `DURATION` of its headers")
}

// apply checks the flags and sets them in cfg. listen is --addr: its host,
// when not a wildcard, is one of the names the coordinator answers to, by
// scheme (https with --tls-cert).
func (a *accessFlags) apply(cfg *coordinator.Config, listen, scheme string) error {
	if a.authFailBurst < 1 || a.authFailEvery <= 0 || a.anonBulkRate < 1 || a.anonBulkBurst < 1 ||
		a.minReadRate < 1 || a.minReadGrace <= 0 || a.metricsPageMax < 2 || a.idleTimeout <= 0 || a.readHeaderTimeout <= 0 || a.readBodyTimeout <= 0 || a.maxHTTPConns < 1 {
		return usagef("--auth-fail-burst, --anon-bulk-rate, --anon-bulk-burst, --min-read-rate and --max-http-conns-per-address must be >= 1, --metrics-page-max >= 2, and the durations positive")
	}
	if a.metricsToken != "" && len(a.metricsToken) < 16 {
		return usagef("--metrics-token: the metrics token must be at least 16 characters")
	}
	urls := append([]string(nil), a.publicURLs...)
	if host, port, err := net.SplitHostPort(listen); err == nil && !isWildcard(host) {
		urls = append(urls, scheme+"://"+net.JoinHostPort(host, port))
	}
	cfg.PublicURLs, cfg.TrustedProxies = urls, a.trustedProxies
	cfg.MetricsToken = a.metricsToken
	cfg.AuthFailBurst, cfg.AuthFailEvery = a.authFailBurst, a.authFailEvery
	cfg.AnonBulkRate, cfg.AnonBulkBurst = a.anonBulkRate, a.anonBulkBurst
	cfg.MinReadRate, cfg.MinReadGrace = a.minReadRate, a.minReadGrace
	cfg.MetricsPageMax = a.metricsPageMax
	cfg.ReadBodyTimeout = a.readBodyTimeout
	cfg.MaxHTTPConnsPerAddress = a.maxHTTPConns
	return nil
}

// advice is what serve says at start about reaching it from elsewhere, or
// "" when there is nothing to say.
func (a *accessFlags) advice(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil || !isWildcard(host) || len(a.publicURLs) > 0 {
		return ""
	}
	return fmt.Sprintf("listening on every interface, but answering only to loopback names: to let other machines in, name how they reach this one, e.g. --public-url http://HOSTNAME:%s (repeatable; add --trusted-proxy for a proxy in front)", port)
}

// loopbackAddr is where this process reaches its own listener: a wildcard
// address is not a name the coordinator answers to, 127.0.0.1 is.
func loopbackAddr(a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil || !isWildcard(host) {
		return a.String()
	}
	return net.JoinHostPort("127.0.0.1", port)
}

func isWildcard(host string) bool {
	if host == "" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsUnspecified()
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ", ") }

func (l *stringList) values() []string { return *l }

func (l *stringList) Set(s string) error {
	*l = append(*l, s)
	return nil
}
