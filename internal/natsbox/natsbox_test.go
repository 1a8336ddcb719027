package natsbox

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// selfSigned writes a certificate for 127.0.0.1 and its key.
func selfSigned(t *testing.T, dir string) (cert, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "crowdtrain root"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(k)
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return cert, key
}

// With --nats-tls-cert the server takes TLS only: a relay trusting the
// certificate connects with its credential, one that does not trust it
// and a plain connection do not; the root connects in process.
func TestTLSServer(t *testing.T) {
	dir := t.TempDir()
	cert, key := selfSigned(t, dir)
	box, err := Start(Options{Listen: "127.0.0.1:0", Dir: filepath.Join(dir, "nats"), TLSCert: cert, TLSKey: key})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	if !strings.HasPrefix(box.URL, "tls://") {
		t.Fatalf("URL %s", box.URL)
	}
	text, err := box.IssueRelay("r1", "wss://r1.example/ws")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "r1.creds")
	os.WriteFile(path, text, 0o600)
	c, err := ReadRelayCredential(path, "")
	if err != nil || c.Name != "r1" || c.URL != "wss://r1.example/ws" {
		t.Fatalf("credential: %+v %v", c, err)
	}
	nc, err := nats.Connect(box.URL, append(c.Options, nats.RootCAs(cert))...)
	if err != nil {
		t.Fatalf("a relay trusting the certificate: %v", err)
	}
	if !nc.TLSRequired() {
		t.Error("the relay's connection is not TLS")
	}
	nc.Close()
	if nc, err := nats.Connect(box.URL, c.Options...); err == nil {
		nc.Close()
		t.Fatal("a relay that does not trust the certificate connected")
	}
	// A plain client is told TLS is required before anything else.
	conn, err := net.Dial("tcp", strings.TrimPrefix(box.URL, "tls://"))
	if err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	info := make([]byte, 4096)
	n, _ := conn.Read(info)
	conn.Close()
	if !strings.Contains(string(info[:n]), `"tls_required":true`) {
		t.Fatalf("the server's greeting to a plain client: %q", info[:n])
	}
	root, err := nats.Connect(box.InProcessURL(), nats.UserInfo(box.Root.User, box.Root.Password), box.InProcess())
	if err != nil {
		t.Fatalf("the root, in process: %v", err)
	}
	root.Close()
	if _, err := ReadRelayCredential(path, "r2"); err == nil || !strings.Contains(err.Error(), "r1's credential") {
		t.Fatalf("reading r1's credential as r2: %v", err)
	}
}
