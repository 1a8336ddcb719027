package testlink

import (
	"io"
	"net"
	"testing"
	"time"
)

// A link holds a download to its bandwidth and adds its round trip: 1 MB
// at 8 Mbit/s takes about a second, not the microseconds of loopback.
func TestLinkThrottlesAndDelays(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const size = 1 << 20
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var b [1]byte
		if _, err := io.ReadFull(c, b[:]); err != nil { // the client's first byte
			return
		}
		_, _ = c.Write(make([]byte, size))
	}()
	l := Start(t, ln.Addr().String(), Profile{DownBps: 8e6, UpBps: 1e6, RTT: 100 * time.Millisecond})
	c, err := net.Dial("tcp", l.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if _, err := c.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, size)); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	// 1,048,576 bytes at 1,000,000 bytes/s, plus 100 ms of round trip.
	if took < 900*time.Millisecond || took > 30*time.Second {
		t.Fatalf("1 MiB over an 8 Mbit/s link with 100 ms RTT took %v, want about 1.1 s", took)
	}
	t.Logf("1 MiB over %v: %v", Profile{DownBps: 8e6, UpBps: 1e6, RTT: 100 * time.Millisecond}, took)
}
