package tlsfiles

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Reloader holds the certificate a TLS server presents, loaded from a
// certificate and key file, and swaps in a new pair when the files change.
type Reloader struct {
	certFile, keyFile string
	logf              func(format string, args ...any)
	now               func() time.Time

	cert atomic.Pointer[tls.Certificate]

	mu              sync.Mutex // one load at a time
	certMod, keyMod time.Time  // the files' mtimes at the last attempt
	warnedExpired   bool
}

// New loads the pair. A file that is missing or unreadable, a key that
// does not match, or a certificate outside its validity period is an
// error naming the file. logf receives reloads and their failures.
func New(certFile, keyFile string, logf func(format string, args ...any)) (*Reloader, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	r := &Reloader{certFile: certFile, keyFile: keyFile, logf: logf, now: time.Now}
	cm, km, err := r.stat()
	if err != nil {
		return nil, err
	}
	c, err := r.load()
	if err != nil {
		return nil, err
	}
	r.cert.Store(c)
	r.certMod, r.keyMod = cm, km
	return r, nil
}

// GetCertificate is for tls.Config.GetCertificate: the pair loaded last.
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.cert.Load(), nil
}

// Leaf is the certificate being served.
func (r *Reloader) Leaf() *x509.Certificate { return r.cert.Load().Leaf }

// TLSConfig is a server configuration presenting r's certificate. It
// offers HTTP/1.1 only: websockets need it, and the coordinator's limits
// (connections per address, read deadlines) count connections, which
// HTTP/2 would multiplex.
func (r *Reloader) TLSConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.GetCertificate, NextProtos: []string{"http/1.1"}}
}

// Reload loads the pair again, whether or not the files changed (SIGHUP).
// On an error the pair being served stays, and the error says why.
func (r *Reloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	cm, km, err := r.stat()
	if err == nil {
		r.certMod, r.keyMod = cm, km
	}
	return r.swap()
}

// Check reloads the pair if either file's modification time changed since
// the last attempt; changed reports whether it tried. A pair that failed
// is tried again only when a file changes again (a renewal that writes
// the certificate and then the key takes two polls).
func (r *Reloader) Check() (changed bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cm, km, err := r.stat()
	if err != nil {
		return false, err
	}
	if cm.Equal(r.certMod) && km.Equal(r.keyMod) {
		r.warnExpired()
		return false, nil
	}
	r.certMod, r.keyMod = cm, km
	return true, r.swap()
}

// Watch calls Check every interval until ctx ends, logging what happens.
func (r *Reloader) Watch(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	last := "" // a file gone for a while is said once, not every poll
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_, err := r.Check()
			if err == nil {
				last = ""
			} else if err.Error() != last {
				last = err.Error()
				r.logf("tls: %v", err)
			}
		}
	}
}

func (r *Reloader) swap() error {
	c, err := r.load()
	if err != nil {
		return fmt.Errorf("%v; still serving the certificate for %s valid until %s", err,
			names(r.cert.Load().Leaf), r.cert.Load().Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	r.cert.Store(c)
	r.warnedExpired = false
	r.logf("tls: serving the certificate for %s from %s, valid until %s", names(c.Leaf), r.certFile, c.Leaf.NotAfter.UTC().Format(time.RFC3339))
	return nil
}

// warnExpired logs, once, that the certificate being served has expired
// and no replacement came.
func (r *Reloader) warnExpired() {
	leaf := r.cert.Load().Leaf
	if r.warnedExpired || !r.now().After(leaf.NotAfter) {
		return
	}
	r.warnedExpired = true
	r.logf("tls: the certificate being served (for %s) expired at %s: clients refuse it until %s and %s hold a renewed one",
		names(leaf), leaf.NotAfter.UTC().Format(time.RFC3339), r.certFile, r.keyFile)
}

func (r *Reloader) stat() (certMod, keyMod time.Time, err error) {
	ci, err := os.Stat(r.certFile)
	if err != nil {
		return certMod, keyMod, fmt.Errorf("--tls-cert %s: %w", r.certFile, unwrapPath(err))
	}
	ki, err := os.Stat(r.keyFile)
	if err != nil {
		return certMod, keyMod, fmt.Errorf("--tls-key %s: %w", r.keyFile, unwrapPath(err))
	}
	return ci.ModTime(), ki.ModTime(), nil
}

func (r *Reloader) load() (*tls.Certificate, error) {
	certPEM, err := os.ReadFile(r.certFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert %s: %w", r.certFile, unwrapPath(err))
	}
	keyPEM, err := os.ReadFile(r.keyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-key %s: %w", r.keyFile, unwrapPath(err))
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert %s with --tls-key %s: %v (want a PEM certificate chain and the PEM private key that goes with it)", r.certFile, r.keyFile, err)
	}
	if c.Leaf == nil {
		if c.Leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return nil, fmt.Errorf("--tls-cert %s: %v", r.certFile, err)
		}
	}
	now := r.now()
	if now.After(c.Leaf.NotAfter) {
		return nil, fmt.Errorf("--tls-cert %s: the certificate for %s expired at %s", r.certFile, names(c.Leaf), c.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	if now.Before(c.Leaf.NotBefore) {
		return nil, fmt.Errorf("--tls-cert %s: the certificate for %s is not valid before %s (is this machine's clock right?)", r.certFile, names(c.Leaf), c.Leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	return &c, nil
}

// names lists the names a certificate is for.
func names(c *x509.Certificate) string {
	var n []string
	n = append(n, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		n = append(n, ip.String())
	}
	if len(n) == 0 {
		return fmt.Sprintf("%q", c.Subject.CommonName)
	}
	return fmt.Sprint(n)
}

// unwrapPath drops the *PathError's own copy of the path: the message
// names the file once, after its flag.
func unwrapPath(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	return err
}

// ClientConfig is a client TLS configuration that trusts the system's CAs
// and the PEM certificates in caFile (a private CA, or a self-signed
// server certificate). flag names the option in errors.
func ClientConfig(flag, caFile string) (*tls.Config, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", flag, caFile, unwrapPath(err))
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s %s: no PEM certificate in it (want the CA's certificate, -----BEGIN CERTIFICATE-----)", flag, caFile)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}, nil
}
