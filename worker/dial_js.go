//go:build js

package worker

import (
	"context"
	"crypto/tls"

	"github.com/coder/websocket"
)

// dial opens the worker's websocket through the browser's WebSocket, which
// sends each message whole; there is nothing to batch. The browser decides
// whom to trust: tlsConfig is not used.
func dial(ctx context.Context, url string, _ *tls.Config) (*websocket.Conn, batcher, error) {
	conn, _, err := websocket.Dial(ctx, url, nil)
	return conn, nil, err
}
