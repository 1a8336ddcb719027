//go:build cgo

package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/testcert"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
)

// tlsServe is a coordinator run in this process with --tls-cert and
// --tls-key, signed by a test CA whose certificate is in caFile.
type tlsServe struct {
	addr, dir, workConfig     string
	certFile, keyFile, caFile string
	ca                        *testcert.CA
	first                     testcert.Pair
	logs                      *lockedBuffer
	stop                      func() int
	httpc                     *http.Client
}

func startTLSServe(t *testing.T, extra ...string) *tlsServe {
	t.Helper()
	s := &tlsServe{addr: freeAddr(t), dir: t.TempDir(), logs: &lockedBuffer{}}
	s.certFile, s.keyFile, s.caFile = filepath.Join(s.dir, "cert.pem"), filepath.Join(s.dir, "key.pem"), filepath.Join(s.dir, "ca.pem")
	s.ca = testcert.NewCA(t, "crowdtrain test CA")
	if err := os.WriteFile(s.caFile, s.ca.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	// The workers read this config, not the user's.
	s.workConfig = filepath.Join(s.dir, "work.yaml")
	if err := os.WriteFile(s.workConfig, []byte("threads: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.first = s.ca.Valid(t, "127.0.0.1")
	s.first.Write(t, s.certFile, s.keyFile)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	args := append([]string{"serve", "--addr", s.addr, "--job", "mnist-mlp", "--db", filepath.Join(s.dir, "ct.db"),
		"--tls-cert", s.certFile, "--tls-key", s.keyFile, "--tls-reload-interval", "100ms", "--progress", "500ms"}, extra...)
	go func() { done <- run(ctx, args, io.Discard, s.logs) }()
	stopped := false
	s.stop = func() int {
		if stopped {
			return 0
		}
		stopped = true
		cancel()
		select {
		case code := <-done:
			return code
		case <-time.After(30 * time.Second):
			t.Errorf("serve did not stop within 30s")
			return -1
		}
	}
	t.Cleanup(func() { s.stop() })
	// Up when a TLS handshake trusting the CA succeeds.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := s.served(); err == nil {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve with TLS did not come up; log:\n%s", s.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *tlsServe) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(s.ca.Cert)
	return p
}

// served is the certificate a new connection is shown.
func (s *tlsServe) served() (*x509.Certificate, error) {
	c, err := tls.Dial("tcp", s.addr, &tls.Config{RootCAs: s.pool()})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0], nil
}

// client is one client for the test, whose connections are reused: the
// coordinator limits how many one address holds.
func (s *tlsServe) client() *http.Client {
	if s.httpc == nil {
		s.httpc = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.pool()}}}
	}
	return s.httpc
}

func (s *tlsServe) job(t *testing.T) coordinator.JobView {
	t.Helper()
	resp, err := s.client().Get("https://" + s.addr + "/api/v1/jobs")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var jobs []coordinator.JobView
	if err := json.NewDecoder(resp.Body).Decode(&jobs); err != nil || len(jobs) != 1 {
		t.Fatalf("GET /api/v1/jobs over https: %v, %d jobs", err, len(jobs))
	}
	return jobs[0]
}

// waitServed waits for new connections to see the certificate with serial.
func (s *tlsServe) waitServed(t *testing.T, serial *big.Int, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := s.served()
		if err == nil && c.SerialNumber.Cmp(serial) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: new connections still not shown certificate %v after 10s (last: %v, %v); log:\n%s", what, serial, c.SerialNumber, err, s.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A coordinator serving TLS: plain ws:// to its port fails at once with an
// error saying to use wss://; a renewed pair written over the files is
// served to new connections without a restart; an expired or broken
// replacement is logged and not served; the API answers over https with
// HSTS.
func TestServeTLSReloadsAndRefusesPlainWS(t *testing.T) {
	s := startTLSServe(t)
	resp, err := s.client().Get("https://" + s.addr + "/api/v1/jobs")
	if err != nil {
		t.Fatalf("GET over https trusting the CA: %v", err)
	}
	resp.Body.Close()
	if h := resp.Header.Get("Strict-Transport-Security"); !strings.HasPrefix(h, "max-age=") {
		t.Errorf("a coordinator serving TLS answered without HSTS (Strict-Transport-Security %q)", h)
	}
	// Without the CA the certificate is not trusted.
	if _, err := http.Get("https://" + s.addr + "/api/v1/jobs"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("GET over https without the CA: %v; want a certificate error", err)
	}

	// (b) ws:// to the TLS port: an error, quickly, that says wss.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	start := time.Now()
	code, _, stderr := runCmd(t, ctx, "work", "--coordinator", "ws://"+s.addr+"/ws", "--key-file", "", "--config", s.workConfig)
	_ = code
	if !strings.Contains(stderr, "wss://") {
		t.Errorf("work --coordinator ws:// against a TLS port (stopped after %v): log does not say to use wss://:\n%s", time.Since(start).Round(time.Millisecond), stderr)
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer dcancel()
	if _, _, err := websocket.Dial(dctx, "ws://"+s.addr+"/ws", nil); err == nil || dctx.Err() != nil {
		t.Errorf("plain websocket dial to the TLS port: %v (context %v); want a prompt error", err, dctx.Err())
	}

	// (c) A renewal written over the files is served to new connections.
	second := s.ca.Valid(t, "127.0.0.1")
	second.Write(t, s.certFile, s.keyFile)
	s.waitServed(t, second.Cert.SerialNumber, "after a renewal")

	// (d) Replacements that must not be served: the second stays.
	expired := s.ca.Issue(t, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Minute), "127.0.0.1")
	expired.Write(t, s.certFile, s.keyFile)
	waitLog(t, s.logs, "expired", 10*time.Second)
	testcert.WriteFile(t, s.certFile, []byte("-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----\n"))
	waitLog(t, s.logs, "want a PEM certificate chain", 10*time.Second)
	time.Sleep(300 * time.Millisecond) // three polls
	if c, err := s.served(); err != nil || c.SerialNumber.Cmp(second.Cert.SerialNumber) != 0 {
		t.Fatalf("after an expired and a broken replacement: served %v, %v; want the second certificate still", c, err)
	}
	if code := s.stop(); code != 0 {
		t.Fatalf("serve exited %d; log:\n%s", code, s.logs.String())
	}
}

// waitLog waits for text in a log.
func waitLog(t *testing.T, logs *lockedBuffer, text string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(logs.String(), text) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the log within %v:\n%s", text, timeout, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A certificate serve cannot use at start is bad input: exit 2, naming the
// flag and the file, before the database is made.
func TestServeTLSBadCertificateExits2(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca := testcert.NewCA(t, "crowdtrain test CA")
	expiredDir := t.TempDir()
	ecert, ekey := filepath.Join(expiredDir, "cert.pem"), filepath.Join(expiredDir, "key.pem")
	ca.Issue(t, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour), "127.0.0.1").Write(t, ecert, ekey)
	db := filepath.Join(dir, "ct.db")
	for _, c := range []struct {
		args  []string
		words []string
	}{
		{[]string{"--tls-cert", cert, "--tls-key", key}, []string{"--tls-cert " + cert}},
		{[]string{"--tls-cert", ecert, "--tls-key", key}, []string{"--tls-key " + key}},
		{[]string{"--tls-cert", ecert}, []string{"--tls-cert and --tls-key go together"}},
		{[]string{"--tls-cert", ecert, "--tls-key", ekey}, []string{"--tls-cert " + ecert, "expired"}},
		{[]string{"--acme-domain", "grid.example.org", "--tls-cert", ecert, "--tls-key", ekey}, []string{"one or the other"}},
		{[]string{"--acme-domain", "10.0.0.1"}, []string{"--acme-domain \"10.0.0.1\"", "DNS name"}},
		{[]string{"--acme-email", "ops@example.org"}, []string{"go with --acme-domain"}},
		{[]string{"--acme-domain", "grid.example.org", "--acme-ca-file", cert}, []string{"--acme-ca-file " + cert}},
	} {
		code, _, stderr := runCmd(t, context.Background(), append([]string{"serve", "--addr", "127.0.0.1:0", "--db", db}, c.args...)...)
		if code != 2 {
			t.Errorf("serve %v: exit %d, want 2 (stderr %q)", c.args, code, stderr)
		}
		for _, w := range c.words {
			if !strings.Contains(stderr, w) {
				t.Errorf("serve %v: stderr %q should say %q", c.args, stderr, w)
			}
		}
		if _, err := os.Stat(db); err == nil {
			t.Fatalf("serve %v made the database before refusing the certificate", c.args)
		}
	}
	code, _, stderr := runCmd(t, context.Background(), "work", "--coordinator", "wss://127.0.0.1:1/ws", "--ca-file", cert, "--key-file", "")
	if code != 2 || !strings.Contains(stderr, "--ca-file "+cert) {
		t.Errorf("work --ca-file MISSING: exit %d, stderr %q; want 2 naming --ca-file and the file", code, stderr)
	}
}

// (a) A native worker trains over wss:// with --ca-file: its results are
// accepted, and training carries on across a certificate renewal.
func TestWorkerTrainsOverWSSWithCAFile(t *testing.T) {
	testenv.Long(t, "trains mnist-mlp with a worker over TLS")
	s := startTLSServe(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wlogs := &lockedBuffer{}
	wdone := make(chan int, 1)
	go func() {
		wdone <- run(ctx, []string{"work", "--coordinator", "wss://" + s.addr + "/ws", "--ca-file", s.caFile,
			"--key-file", "", "--config", s.workConfig}, io.Discard, wlogs)
	}()
	waitVersion := func(min int64, what string) coordinator.JobView {
		deadline := time.Now().Add(90 * time.Second)
		for {
			v := s.job(t)
			if v.Version >= min && v.Workers == 1 {
				return v
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: job at version %d with %d workers after 90s; worker log:\n%s\nserve log:\n%s", what, v.Version, v.Workers, wlogs.String(), s.logs.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	v := waitVersion(20, "worker over wss://")
	if v.UpdatesApplied < 20 {
		t.Errorf("version %d but %d updates applied", v.Version, v.UpdatesApplied)
	}
	second := s.ca.Valid(t, "127.0.0.1")
	second.Write(t, s.certFile, s.keyFile)
	s.waitServed(t, second.Cert.SerialNumber, "renewal while a worker trains")
	waitVersion(v.Version+20, "training after the renewal")
	// On to the preset's target accuracy (a minute or so on one thread).
	deadline := time.Now().Add(4 * time.Minute)
	for v = s.job(t); v.State != coordinator.StateDone; v = s.job(t) {
		if time.Now().After(deadline) || v.State == coordinator.StateFailed || v.State == coordinator.StateStopped {
			t.Fatalf("job did not reach its target over wss:// within 4 minutes: state %s (%s), version %d, eval %+v", v.State, v.Reason, v.Version, v.Eval)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(v.Reason, "reached target accuracy") {
		t.Errorf("job done over wss:// for another reason: %s", v.Reason)
	}
	t.Logf("over wss:// with --ca-file: %s", v.Reason)
	cancel()
	<-wdone
	if strings.Contains(wlogs.String(), "certificate signed by unknown authority") {
		t.Errorf("the worker did not trust --ca-file:\n%s", wlogs.String())
	}
}

// A root and a relay each serving TLS with certificates of a private CA:
// the relay fetches the root's snapshots over https trusting --ca-file,
// a worker joins the relay over wss:// with --ca-file, and the root
// applies the relay's aggregates. The admin clients (relay-credential)
// trust the CA through SSL_CERT_FILE.
func TestRelayOverTLS(t *testing.T) {
	testenv.Long(t, "trains MNIST through a relay, every hop over TLS")
	dir := t.TempDir()
	ca := testcert.NewCA(t, "crowdtrain test CA")
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	rootCert, rootKey := filepath.Join(dir, "root.pem"), filepath.Join(dir, "root.key")
	relayCert, relayKey := filepath.Join(dir, "relay.pem"), filepath.Join(dir, "relay.key")
	ca.Valid(t, "127.0.0.1").Write(t, rootCert, rootKey)
	ca.Valid(t, "127.0.0.1").Write(t, relayCert, relayKey)
	spec := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(spec, []byte(relaySpec), 0o600); err != nil {
		t.Fatal(err)
	}
	rootAddr, natsAddr, relayAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	root := startProc(t, "serve", "--addr", rootAddr, "--db", filepath.Join(dir, "root.db"), "--job", spec,
		"--nats-listen", natsAddr, "--admin-token", modesAdminToken, "--tls-cert", rootCert, "--tls-key", rootKey)
	root.waitLine("coordinator listening on https://", time.Minute)

	creds := filepath.Join(dir, "ra.creds")
	issueCmd := exec.Command(crowdtrainBinary(t), "relay-credential", "ra", "--out", creds, "--url", "wss://"+relayAddr+"/ws",
		"--coordinator", "https://"+rootAddr, "--token", modesAdminToken)
	issueCmd.Env = append(os.Environ(), "SSL_CERT_FILE="+caFile)
	issue := startCmd(t, issueCmd)
	if err := issue.waitExit(time.Minute); err != nil {
		t.Fatalf("relay-credential over https: %v\n%s", err, issue.logText())
	}
	relay := startProc(t, "relay", "--upstream", "nats://"+natsAddr, "--creds", creds, "--addr", relayAddr,
		"--tls-cert", relayCert, "--tls-key", relayKey, "--ca-file", caFile)
	relay.waitLine("listening on", time.Minute)
	w := startProc(t, "work", "--coordinator", "wss://"+relayAddr+"/ws", "--ca-file", caFile, "--key-file", "")

	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var body struct {
			Relays []coordinator.RelayView `json:"relays"`
		}
		if resp, err := client.Get("https://" + rootAddr + "/api/v1/relays"); err == nil {
			json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
		}
		if len(body.Relays) == 1 && body.Relays[0].Workers == 1 && body.Relays[0].AggregatesApplied >= 3 {
			t.Logf("relay over TLS: %d aggregates applied at the root", body.Relays[0].AggregatesApplied)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no aggregates through the TLS relay within 2 minutes: %+v\nroot:\n%s\nrelay:\n%s\nworker:\n%s",
				body.Relays, tail(root.logText(), 30), tail(relay.logText(), 30), tail(w.logText(), 30))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
