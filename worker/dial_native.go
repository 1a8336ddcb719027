//go:build !js

package worker

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"

	"github.com/coder/websocket"
)

// dial opens the worker's websocket over a connection that coalesces
// writes. coder/websocket masks a client's frames through a 4 KiB buffer,
// one write per 4 KiB: a 940 KB update would cost 230 syscalls. The
// session holds the connection's writes for the length of each message and
// sends them in one.
func dial(ctx context.Context, url string, tlsConfig *tls.Config) (*websocket.Conn, batcher, error) {
	var bc *batchConn
	dialer := &net.Dialer{}
	client := &http.Client{Transport: &http.Transport{
		Proxy:           http.ProxyFromEnvironment,
		TLSClientConfig: tlsConfig,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			bc = &batchConn{Conn: c}
			return bc, nil
		},
	}}
	conn, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: client})
	if err != nil {
		return nil, nil, refusal(err, resp)
	}
	return conn, bc, nil
}

// refusal adds the coordinator's own words to a refused handshake: a
// coordinator that refuses an upgrade (a Host it does not answer to, too
// many connections from this address) says why in a JSON body, which the
// library's "expected 101" error leaves out.
func refusal(err error, resp *http.Response) error {
	if resp == nil || resp.Body == nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024)) // the library keeps only the first 1024 bytes
	if bytes.Contains(body, []byte("HTTP request to an HTTPS server")) {
		// Go's answer to plain HTTP on a TLS port (serve --tls-cert).
		return fmt.Errorf("the coordinator serves TLS on this port: connect with a wss:// URL (%w)", err)
	}
	var msg struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &msg) != nil || msg.Error == "" {
		return err
	}
	return fmt.Errorf("the coordinator refused the connection (%s): %q", resp.Status, msg.Error)
}

// batchConn passes writes through, except between hold and release, when
// it collects them and release writes them at once.
type batchConn struct {
	net.Conn
	mu      sync.Mutex
	holding bool
	buf     []byte
}

func (c *batchConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holding {
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *batchConn) hold() {
	c.mu.Lock()
	c.holding = true
	c.mu.Unlock()
}

func (c *batchConn) release() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holding = false
	if len(c.buf) == 0 {
		return nil
	}
	_, err := c.Conn.Write(c.buf)
	c.buf = c.buf[:0]
	return err
}
