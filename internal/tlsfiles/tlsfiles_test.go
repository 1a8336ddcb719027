package tlsfiles_test

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/internal/testcert"
	"github.com/crowdtrain/crowdtrain/internal/tlsfiles"
)

// served dials addr trusting ca and returns the certificate it presented.
func served(t *testing.T, addr string, ca *testcert.CA) *x509.Certificate {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatalf("dialing %s: %v", addr, err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0]
}

func TestReloadSwapsAndKeepsGoodPair(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca := testcert.NewCA(t, "test CA")
	first := ca.Valid(t, "127.0.0.1")
	first.Write(t, certFile, keyFile)
	var logs strings.Builder
	r, err := tlsfiles.New(certFile, keyFile, func(f string, a ...any) { logs.WriteString(f + "\n") })
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", r.TLSConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { c.(*tls.Conn).Handshake(); io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	addr := ln.Addr().String()
	if got := served(t, addr, ca); got.SerialNumber.Cmp(first.Cert.SerialNumber) != 0 {
		t.Fatalf("serving serial %v, want the first certificate's %v", got.SerialNumber, first.Cert.SerialNumber)
	}
	if changed, err := r.Check(); changed || err != nil {
		t.Fatalf("Check with unchanged files: changed %v, err %v; want no reload", changed, err)
	}

	// A renewal: new connections see the new certificate.
	second := ca.Valid(t, "127.0.0.1")
	second.Write(t, certFile, keyFile)
	if changed, err := r.Check(); !changed || err != nil {
		t.Fatalf("Check after a renewal: changed %v, err %v", changed, err)
	}
	if got := served(t, addr, ca); got.SerialNumber.Cmp(second.Cert.SerialNumber) != 0 {
		t.Fatalf("after the renewal serving serial %v, want the second certificate's %v", got.SerialNumber, second.Cert.SerialNumber)
	}

	// Replacements that must not be served: each leaves the second.
	expired := ca.Issue(t, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour), "127.0.0.1")
	other := ca.Valid(t, "127.0.0.1")
	for _, bad := range []struct {
		name      string
		cert, key []byte
		want      string
	}{
		{"expired", expired.CertPEM, expired.KeyPEM, "expired"},
		{"garbage", []byte("not a certificate"), second.KeyPEM, "PEM"},
		{"key of another certificate", second.CertPEM, other.KeyPEM, "private key does not match"},
	} {
		testcert.WriteFile(t, certFile, bad.cert)
		testcert.WriteFile(t, keyFile, bad.key)
		changed, err := r.Check()
		if !changed || err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "still serving") {
			t.Fatalf("%s replacement: changed %v, err %v; want an error saying %q and that the old one is still served", bad.name, changed, err, bad.want)
		}
		if got := served(t, addr, ca); got.SerialNumber.Cmp(second.Cert.SerialNumber) != 0 {
			t.Fatalf("%s replacement: serving serial %v, want the second certificate's %v still", bad.name, got.SerialNumber, second.Cert.SerialNumber)
		}
	}
	// A failed pair is not retried until a file changes again; SIGHUP's
	// Reload tries regardless.
	if changed, _ := r.Check(); changed {
		t.Fatal("Check retried a pair whose files did not change")
	}
	if err := r.Reload(); err == nil {
		t.Fatal("Reload of a mismatched pair succeeded")
	}
	second.Write(t, certFile, keyFile)
	if err := r.Reload(); err != nil {
		t.Fatalf("Reload of a good pair: %v", err)
	}
	if !strings.Contains(logs.String(), "serving the certificate") {
		t.Errorf("reloads were not logged: %q", logs.String())
	}
}

func TestNewRefusesMissingAndExpired(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if _, err := tlsfiles.New(certFile, keyFile, nil); err == nil || !strings.Contains(err.Error(), "--tls-cert "+certFile) {
		t.Fatalf("missing certificate: %v; want an error naming --tls-cert and the file", err)
	}
	ca := testcert.NewCA(t, "test CA")
	ca.Valid(t, "127.0.0.1").Write(t, certFile, keyFile)
	os.Remove(keyFile)
	if _, err := tlsfiles.New(certFile, keyFile, nil); err == nil || !strings.Contains(err.Error(), "--tls-key "+keyFile) {
		t.Fatalf("missing key: %v; want an error naming --tls-key and the file", err)
	}
	ca.Issue(t, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour), "127.0.0.1").Write(t, certFile, keyFile)
	if _, err := tlsfiles.New(certFile, keyFile, nil); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("expired certificate: %v; want an error saying it expired", err)
	}
}

func TestClientConfigTrustsCAFile(t *testing.T) {
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	if _, err := tlsfiles.ClientConfig("--ca-file", caFile); err == nil || !strings.Contains(err.Error(), "--ca-file "+caFile) {
		t.Fatalf("missing CA file: %v", err)
	}
	os.WriteFile(caFile, []byte("hello"), 0o600)
	if _, err := tlsfiles.ClientConfig("--ca-file", caFile); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("CA file without a certificate: %v", err)
	}
	ca := testcert.NewCA(t, "test CA")
	os.WriteFile(caFile, ca.PEM, 0o600)
	cfg, err := tlsfiles.ClientConfig("--ca-file", caFile)
	if err != nil {
		t.Fatal(err)
	}
	leaf := ca.Valid(t, "127.0.0.1").Cert
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: cfg.RootCAs}); err != nil {
		t.Fatalf("a certificate the CA signed does not verify against --ca-file's pool: %v", err)
	}
}
