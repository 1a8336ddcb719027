package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// hostStatus GETs /api/v1/jobs from addr naming host in the Host header.
func hostStatus(t *testing.T, addr, host string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/api/v1/jobs", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// serve answers to its --public-url names and loopback, refuses other
// Host headers, and closes idle keep-alive connections.
func TestServePublicURLsAndIdleTimeout(t *testing.T) {
	addr := freeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	srv := startProc(t, "serve", "--addr", addr, "--db", "", "--public-url", "http://grid.example:"+port,
		"--idle-timeout", "300ms")
	srv.waitLine("coordinator listening", 60*time.Second)
	for host, want := range map[string]int{
		"grid.example:" + port: http.StatusOK,
		"localhost:" + port:    http.StatusOK,
		addr:                   http.StatusOK,
		"evil.example:" + port: http.StatusForbidden,
	} {
		if got := hostStatus(t, addr, host); got != want {
			t.Errorf("Host %s: %d, want %d", host, got, want)
		}
	}

	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	if _, err := br.ReadByte(); err != io.EOF || time.Since(start) > 3*time.Second {
		t.Errorf("an idle keep-alive connection: %v after %v; want it closed after the 300ms idle timeout", err, time.Since(start))
	}
}

// On a wildcard address with no --public-url, serve says how to let other
// machines in, with the port it bound; its own workers and loopback
// clients still get in. The port is the system's choice (--addr
// 0.0.0.0:0): a port found free on 127.0.0.1 was taken on another
// address by the time serve bound every interface, in one CI run.
func TestServeOnAWildcardSaysHowToLetOthersIn(t *testing.T) {
	srv := startProc(t, "serve", "--addr", "0.0.0.0:0", "--db", "", "--local-workers", "1")
	listening := srv.waitLine("coordinator listening on", 60*time.Second)
	m := regexp.MustCompile(`listening on http://\S+:(\d+) \(API`).FindStringSubmatch(listening)
	if m == nil {
		t.Fatalf("no address with a port in %q", listening)
	}
	port := m[1]
	line := srv.waitLine("--public-url", 10*time.Second) // logged right after
	if !strings.Contains(line, "http://HOSTNAME:"+port) {
		t.Errorf("advice %q does not show the flag with this port", line)
	}
	if got := hostStatus(t, "127.0.0.1:"+port, "127.0.0.1:"+port); got != http.StatusOK {
		t.Errorf("loopback on a wildcard address: %d", got)
	}
	srv.waitLine("joined (job", 30*time.Second) // the local worker
	if got := hostStatus(t, "127.0.0.1:"+port, "0.0.0.0:"+port); got != http.StatusForbidden {
		t.Errorf("Host 0.0.0.0: %d, want 403 (it is not a name of this coordinator)", got)
	}
}
