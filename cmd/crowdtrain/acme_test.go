//go:build cgo

package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/letsencrypt/challtestsrv"

	"github.com/crowdtrain/crowdtrain/internal/testenv"
)

// serve --acme-domain obtains its certificate from a real ACME server:
// Let's Encrypt's Pebble (built from the module cache, a tool in go.mod),
// which checks the tls-alpn-01 challenge against serve's own port, finding
// it through a test DNS server that answers 127.0.0.1 for every name.
func TestServeACMEWithPebble(t *testing.T) {
	testenv.Long(t, "builds and runs Pebble, an ACME server")
	dir := t.TempDir()
	pebble := filepath.Join(dir, "pebble")
	if out, err := exec.Command("go", "build", "-o", pebble, "github.com/letsencrypt/pebble/v2/cmd/pebble").CombinedOutput(); err != nil {
		t.Fatalf("building Pebble: %v\n%s", err, out)
	}
	modDir, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/letsencrypt/pebble/v2").Output()
	if err != nil {
		t.Fatalf("go list pebble: %v", err)
	}
	certs := filepath.Join(strings.TrimSpace(string(modDir)), "test", "certs")
	minica := filepath.Join(certs, "pebble.minica.pem") // signs Pebble's own HTTPS certificate

	dnsAddr := freeAddr(t)
	dns, err := challtestsrv.New(challtestsrv.Config{DNSAddrs: []string{dnsAddr}, Log: log.New(io.Discard, "", 0)})
	if err != nil {
		t.Fatal(err)
	}
	dns.SetDefaultDNSIPv4("127.0.0.1")
	dns.SetDefaultDNSIPv6("")
	go dns.Run()
	defer dns.Shutdown()

	serveAddr, acmeAddr, mgmtAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	_, servePort, _ := net.SplitHostPort(serveAddr)
	cfg := map[string]any{"pebble": map[string]any{
		"listenAddress": acmeAddr, "managementListenAddress": mgmtAddr,
		"certificate": filepath.Join(certs, "localhost", "cert.pem"), "privateKey": filepath.Join(certs, "localhost", "key.pem"),
		"httpPort": 5002, "tlsPort": atoi(servePort), "ocspResponderURL": "", "externalAccountBindingRequired": false,
	}}
	cfgFile := filepath.Join(dir, "pebble.json")
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(cfgFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(pebble, "-config", cfgFile, "-dnsserver", dnsAddr)
	cmd.Env = append(os.Environ(), "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0")
	pp := startCmd(t, cmd)
	pp.waitLine("Listening on", 30*time.Second)

	const domain = "grid.crowdtrain.test"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &lockedBuffer{}
	done := make(chan int, 1)
	db := filepath.Join(dir, "ct.db")
	go func() {
		done <- run(ctx, []string{"serve", "--addr", serveAddr, "--job", "mnist-mlp", "--db", db,
			"--acme-domain", domain, "--acme-directory", "https://" + acmeAddr + "/dir", "--acme-ca-file", minica}, io.Discard, logs)
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("serve did not stop")
		}
	}()

	// Pebble's root, which signs what it issues, from its management API.
	caPEM, err := os.ReadFile(minica)
	if err != nil {
		t.Fatal(err)
	}
	mini := x509.NewCertPool()
	mini.AppendCertsFromPEM(caPEM)
	mgmt := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: mini}}}
	// Pebble logs "Listening on" for its ACME listener; the management
	// listener may come up a moment later.
	var resp *http.Response
	for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
		if resp, err = mgmt.Get("https://" + mgmtAddr + "/roots/0"); err == nil {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("Pebble's management API did not answer within 30s: %v\npebble log:\n%s", err, pp.logText())
		}
	}
	rootPEM, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(rootPEM) {
		t.Fatalf("Pebble's /roots/0: %s", rootPEM)
	}

	// The first handshake naming the domain has serve obtain the
	// certificate; the client verifies it against Pebble's root.
	deadline := time.Now().Add(90 * time.Second)
	var leaf *x509.Certificate
	for leaf == nil {
		d := &net.Dialer{Timeout: 60 * time.Second}
		c, err := tls.DialWithDialer(d, "tcp", serveAddr, &tls.Config{ServerName: domain, RootCAs: roots})
		if err == nil {
			leaf = c.ConnectionState().PeerCertificates[0]
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no certificate for %s from serve --acme-domain within 90s: %v\nserve log:\n%s\npebble log:\n%s", domain, err, logs.String(), pp.logText())
		}
		time.Sleep(500 * time.Millisecond)
	}
	if !slices.Contains(leaf.DNSNames, domain) {
		t.Fatalf("served certificate is for %v, want %s", leaf.DNSNames, domain)
	}
	if entries, err := os.ReadDir(db + ".acme"); err != nil || len(entries) == 0 {
		t.Errorf("the ACME cache beside the database (%s.acme): %v, %d entries; want the account key and certificate", db, err, len(entries))
	}
	// The API answers by the domain's name over https (the name is one
	// it answers to without a --public-url), with HSTS.
	api := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, serveAddr)
		},
	}}
	resp, err = api.Get("https://" + net.JoinHostPort(domain, servePort) + "/api/v1/jobs")
	if err != nil {
		t.Fatalf("GET /api/v1/jobs at https://%s: %v", domain, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "mnist-mlp") || resp.Header.Get("Strict-Transport-Security") == "" {
		t.Fatalf("GET /api/v1/jobs at https://%s: %s %s (HSTS %q)", domain, resp.Status, body, resp.Header.Get("Strict-Transport-Security"))
	}
	t.Logf("serve --acme-domain %s: certificate from Pebble, serial %v, valid until %s", domain, leaf.SerialNumber, leaf.NotAfter)
}
