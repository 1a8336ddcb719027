package worker

import (
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// A coordinator given by its http(s) URL is asked which relays stand in
// front of it (GET /api/v1/relays) each time the worker connects: the
// worker joins the relay with the fewest workers, and the coordinator
// itself when it lists none or none can be reached.

// isRootURL reports whether a --coordinator entry names a root to ask
// for its relays rather than a websocket to dial.
func isRootURL(addr string) bool {
	return strings.HasPrefix(addr, "http://") || strings.HasPrefix(addr, "https://")
}

// relayList is GET /api/v1/relays as a worker reads it.
type relayList struct {
	Relays []struct {
		Name    string `json:"name"`
		URL     string `json:"url"`
		Workers int    `json:"workers"`
	} `json:"relays"`
}

// pickRelay returns the websocket URL to dial for root: its least busy
// relay other than avoid, or its own /ws.
func (w *Worker) pickRelay(ctx context.Context, root, avoid string) string {
	own := "ws" + strings.TrimPrefix(strings.TrimRight(root, "/"), "http") + "/ws"
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(root, "/")+"/api/v1/relays", nil)
	if err != nil {
		return own
	}
	client := w.http
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		w.cfg.Logf("asking %s for its relays: %v; connecting to it directly", root, err)
		return own
	}
	defer resp.Body.Close()
	var list relayList
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&list) != nil {
		return own
	}
	best, bestN := "", 0
	for _, r := range list.Relays {
		u, err := url.Parse(r.URL)
		if err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" || r.URL == avoid {
			continue
		}
		// Fewest workers first; ties broken at random, so that a crowd
		// arriving at once spreads.
		if best == "" || r.Workers < bestN || r.Workers == bestN && rand.IntN(2) == 0 {
			best, bestN = r.URL, r.Workers
		}
	}
	if best == "" {
		return own
	}
	w.cfg.Logf("%s lists %d relays: joining %s (%d workers)", root, len(list.Relays), best, bestN)
	return best
}

// dialTarget is the websocket URL for addr: addr itself, or for a root's
// http(s) URL one of its relays (avoiding last, which could not be
// reached).
func (w *Worker) dialTarget(ctx context.Context, addr, last string) string {
	if !isRootURL(addr) {
		return addr
	}
	return w.pickRelay(ctx, addr, last)
}
