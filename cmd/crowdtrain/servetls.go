//go:build cgo

package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/crypto/acme"
	"golang.org/x/crypto/acme/autocert"

	"github.com/crowdtrain/crowdtrain/internal/tlsfiles"
)

// tlsFlags are serve's and relay's flags for serving HTTPS and WSS
// themselves (docs/SECURITY.md, "TLS").
type tlsFlags struct {
	cert, key string
	every     time.Duration
	certs     *tlsfiles.Reloader // loaded by load
	// ACME (serve only): certificates obtained and renewed by autocert.
	acmeDomains           stringList
	acmeEmail, acmeCache  string
	acmeDirectory, acmeCA string
	acme                  *autocert.Manager // made by load
}

// registerACME adds serve's ACME flags.
func (f *tlsFlags) registerACME(fs *flag.FlagSet) {
	fs.Var(&f.acmeDomains, "acme-domain", "`NAME` to obtain and renew a certificate for with ACME (Let's Encrypt by default), served on --addr, which the CA must reach on port 443 for the tls-alpn-01 challenge; repeatable; instead of --tls-cert")
	fs.StringVar(&f.acmeEmail, "acme-email", "", "contact `ADDRESS` given to the ACME CA (expiry warnings)")
	fs.StringVar(&f.acmeCache, "acme-cache", "", "`DIR` keeping the ACME account key and certificates (default: beside --db, DB.acme)")
	fs.StringVar(&f.acmeDirectory, "acme-directory", autocert.DefaultACMEDirectory, "ACME directory `URL` (Let's Encrypt's staging one, or a private CA's)")
	fs.StringVar(&f.acmeCA, "acme-ca-file", "", "PEM `FILE` of a CA to trust for --acme-directory's own TLS, beside the system's (a private ACME server)")
}

func (f *tlsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.cert, "tls-cert", "", "PEM certificate chain `FILE`: serve HTTPS and WSS on --addr (with --tls-key); reloaded when it changes, or on SIGHUP")
	fs.StringVar(&f.key, "tls-key", "", "PEM private key `FILE` of --tls-cert")
	fs.DurationVar(&f.every, "tls-reload-interval", 5*time.Second, "how often to look at --tls-cert and --tls-key for a renewed pair")
}

// load checks the flags and loads the pair: a missing, unreadable,
// mismatched or expired one is a usage error naming the flag and file.
func (f *tlsFlags) load(logger *log.Logger) error {
	if len(f.acmeDomains) > 0 {
		return f.loadACME()
	}
	if f.acmeEmail != "" || f.acmeCache != "" || f.acmeCA != "" {
		return usagef("--acme-email, --acme-cache and --acme-ca-file go with --acme-domain")
	}
	if f.cert == "" && f.key == "" {
		return nil
	}
	if f.cert == "" || f.key == "" {
		return usagef("--tls-cert and --tls-key go together: the certificate and its private key")
	}
	if f.every <= 0 {
		return usagef("--tls-reload-interval %v: want a positive duration, such as 5s", f.every)
	}
	r, err := tlsfiles.New(f.cert, f.key, logger.Printf)
	if err != nil {
		return usagef("%v", err)
	}
	f.certs = r
	return nil
}

// loadACME checks the ACME flags and makes the manager; the first
// certificate is obtained when the first client asks for a name.
func (f *tlsFlags) loadACME() error {
	if f.cert != "" || f.key != "" {
		return usagef("--acme-domain obtains the certificate; --tls-cert and --tls-key give one: use one or the other")
	}
	if f.acmeCache == "" {
		return usagef("--acme-domain keeps its account key and certificates beside --db: give a --db, or an --acme-cache DIR")
	}
	for _, d := range f.acmeDomains {
		if d == "" || strings.ContainsAny(d, ":/ ") || net.ParseIP(d) != nil {
			return usagef("--acme-domain %q: want a DNS name such as grid.example.org (no scheme, port or IP address)", d)
		}
	}
	client := &acme.Client{DirectoryURL: f.acmeDirectory}
	if f.acmeCA != "" {
		cfg, err := tlsfiles.ClientConfig("--acme-ca-file", f.acmeCA)
		if err != nil {
			return usagef("%v", err)
		}
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = cfg
		client.HTTPClient = &http.Client{Transport: t, Timeout: time.Minute}
	}
	f.acme = &autocert.Manager{
		Prompt: autocert.AcceptTOS, Cache: autocert.DirCache(f.acmeCache), Email: f.acmeEmail,
		HostPolicy: autocert.HostWhitelist(f.acmeDomains...), Client: client,
	}
	return nil
}

func (f *tlsFlags) on() bool { return f.certs != nil || f.acme != nil }

// scheme is the HTTP scheme served: https with a certificate.
func (f *tlsFlags) scheme() string {
	if f.on() {
		return "https"
	}
	return "http"
}

// wsScheme is the websocket scheme served: wss with a certificate.
func (f *tlsFlags) wsScheme() string {
	if f.on() {
		return "wss"
	}
	return "ws"
}

// wrap serves TLS on ln when a certificate was given, and watches the
// files (and SIGHUP) until ctx ends.
func (f *tlsFlags) wrap(ctx context.Context, ln net.Listener, logger *log.Logger) net.Listener {
	if !f.on() {
		return ln
	}
	if f.acme != nil {
		cfg := f.acme.TLSConfig()
		// HTTP/1.1 only, as below; acme-tls/1 answers the CA's challenge.
		cfg.NextProtos = []string{"http/1.1", acme.ALPNProto}
		cfg.MinVersion = tls.VersionTLS12
		logger.Printf("tls: serving HTTPS and WSS for %v with certificates from %s (obtained at the first connection, renewed before they expire; kept in %s)",
			[]string(f.acmeDomains), f.acmeDirectory, f.acmeCache)
		return tls.NewListener(ln, cfg)
	}
	go f.certs.Watch(ctx, f.every)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if err := f.certs.Reload(); err != nil {
					logger.Printf("tls: SIGHUP: %v", err)
				}
			}
		}
	}()
	leaf := f.certs.Leaf()
	logger.Printf("tls: serving HTTPS and WSS with the certificate for %v from %s (valid until %s); it is reloaded when the files change or on SIGHUP",
		certNames(leaf), f.cert, leaf.NotAfter.UTC().Format(time.RFC3339))
	return tls.NewListener(ln, f.certs.TLSConfig())
}

// loopbackClient is the TLS configuration of this process's own workers,
// which reach it by a loopback address its certificate need not name:
// they accept the certificate it is serving, and no other.
func (f *tlsFlags) loopbackClient() *tls.Config {
	if !f.on() {
		return nil
	}
	if f.acme != nil {
		// The name picks the certificate; the port is this process's own
		// listener, so there is nothing to verify it against but itself.
		return &tls.Config{ServerName: f.acmeDomains[0], InsecureSkipVerify: true}
	}
	return &tls.Config{
		InsecureSkipVerify: true, // checked below against what this process serves
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 || !bytes.Equal(cs.PeerCertificates[0].Raw, f.certs.Leaf().Raw) {
				return errors.New("the loopback listener presented a certificate this coordinator is not serving")
			}
			return nil
		},
	}
}

// certNames lists the names a certificate is for.
func certNames(c *x509.Certificate) []string {
	n := append([]string(nil), c.DNSNames...)
	for _, ip := range c.IPAddresses {
		n = append(n, ip.String())
	}
	return n
}
