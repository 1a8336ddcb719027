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
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/crowdtrain/crowdtrain/internal/tlsfiles"
)

// tlsFlags are serve's and relay's flags for serving HTTPS and WSS
// themselves (docs/SECURITY.md, "TLS").
type tlsFlags struct {
	cert, key string
	every     time.Duration
	certs     *tlsfiles.Reloader // loaded by load
}

func (f *tlsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.cert, "tls-cert", "", "PEM certificate chain `FILE`: serve HTTPS and WSS on --addr (with --tls-key); reloaded when it changes, or on SIGHUP")
	fs.StringVar(&f.key, "tls-key", "", "PEM private key `FILE` of --tls-cert")
	fs.DurationVar(&f.every, "tls-reload-interval", 5*time.Second, "how often to look at --tls-cert and --tls-key for a renewed pair")
}

// load checks the flags and loads the pair: a missing, unreadable,
// mismatched or expired one is a usage error naming the flag and file.
func (f *tlsFlags) load(logger *log.Logger) error {
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

func (f *tlsFlags) on() bool { return f.certs != nil }

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
