//go:build js

package worker

import (
	"context"

	"github.com/coder/websocket"
)

// dial opens the worker's websocket through the browser's WebSocket, which
// sends each message whole; there is nothing to batch.
func dial(ctx context.Context, url string) (*websocket.Conn, batcher, error) {
	conn, _, err := websocket.Dial(ctx, url, nil)
	return conn, nil, err
}
