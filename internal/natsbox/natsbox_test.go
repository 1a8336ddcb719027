package natsbox

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/internal/testcert"
	"github.com/nats-io/nats.go"
)

// With --nats-tls-cert the server takes TLS only: a relay trusting the
// certificate connects with its credential, one that does not trust it
// and a plain connection do not; the root connects in process.
func TestTLSServer(t *testing.T) {
	dir := t.TempDir()
	cert, key := testcert.SelfSigned(t, dir)
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
