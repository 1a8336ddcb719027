package testlink

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Profile is one direction-aware link: what a volunteer's connection
// does to every byte between it and the coordinator.
type Profile struct {
	// DownBps and UpBps are the bandwidths, in bits per second, towards
	// the client (downloads) and towards the server (uploads); 0 is
	// unlimited.
	DownBps, UpBps float64
	// RTT is the round trip the link adds; each direction gets half.
	RTT time.Duration
	// Jitter is added to or taken from each direction's delay, at random
	// per chunk of data (order is kept).
	Jitter time.Duration
}

// Home is the link of the benchmarks: a home connection of 50 Mbit/s
// down, 10 Mbit/s up, 40 ms of round trip with 5 ms of jitter each way.
var Home = Profile{DownBps: 50e6, UpBps: 10e6, RTT: 40 * time.Millisecond, Jitter: 5 * time.Millisecond}

func (p Profile) String() string {
	return fmt.Sprintf("%.4g Mbit/s down, %.4g Mbit/s up, %v RTT ±%v", p.DownBps/1e6, p.UpBps/1e6, p.RTT, p.Jitter)
}

var (
	serverOnce sync.Once
	server     *toxiproxy.ApiServer
	proxies    atomic.Int64
)

// Link is one simulated link to an upstream address.
type Link struct {
	proxy *toxiproxy.Proxy
	// Addr is where clients connect (host:port on 127.0.0.1) instead of
	// the upstream.
	Addr string
}

// Start opens a link to upstream (host:port) with profile p; it closes
// when t ends.
func Start(t testing.TB, upstream string, p Profile) *Link {
	t.Helper()
	l, err := New(upstream, p)
	if err != nil {
		t.Fatalf("simulated link to %s: %v", upstream, err)
	}
	t.Cleanup(l.Close)
	return l
}

// New opens a link to upstream with profile p; Close ends it.
func New(upstream string, p Profile) (*Link, error) {
	serverOnce.Do(func() {
		server = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	})
	name := fmt.Sprintf("link%d", proxies.Add(1))
	proxy := toxiproxy.NewProxy(server, name, "127.0.0.1:0", upstream)
	if err := proxy.Start(); err != nil {
		return nil, fmt.Errorf("starting toxiproxy: %w", err)
	}
	l := &Link{proxy: proxy, Addr: proxy.Listen}
	if err := l.Set(p); err != nil {
		proxy.Stop()
		return nil, err
	}
	return l, nil
}

// Set replaces the link's profile; connections open now feel it at once.
func (l *Link) Set(p Profile) error {
	for _, name := range []string{"down_rate", "up_rate", "down_delay", "up_delay"} {
		if l.proxy.Toxics.GetToxic(name) != nil {
			if err := l.proxy.Toxics.RemoveToxic(context.Background(), name); err != nil {
				return fmt.Errorf("removing toxic %s: %w", name, err)
			}
		}
	}
	half := p.RTT / 2
	type toxic struct {
		Name       string         `json:"name"`
		Type       string         `json:"type"`
		Stream     string         `json:"stream"`
		Toxicity   float64        `json:"toxicity"`
		Attributes map[string]any `json:"attributes"`
	}
	var add []toxic
	// toxiproxy's rate is in KB/s of 1000 bytes.
	if p.DownBps > 0 {
		add = append(add, toxic{"down_rate", "bandwidth", "downstream", 1, map[string]any{"rate": max(1, int64(p.DownBps/8000))}})
	}
	if p.UpBps > 0 {
		add = append(add, toxic{"up_rate", "bandwidth", "upstream", 1, map[string]any{"rate": max(1, int64(p.UpBps/8000))}})
	}
	if half > 0 || p.Jitter > 0 {
		attrs := map[string]any{"latency": half.Milliseconds(), "jitter": p.Jitter.Milliseconds()}
		add = append(add, toxic{"down_delay", "latency", "downstream", 1, attrs}, toxic{"up_delay", "latency", "upstream", 1, attrs})
	}
	for _, tx := range add {
		b, err := json.Marshal(tx)
		if err != nil {
			return err
		}
		if _, err := l.proxy.Toxics.AddToxicJson(bytes.NewReader(b)); err != nil {
			return fmt.Errorf("adding toxic %s: %w", tx.Name, err)
		}
	}
	return nil
}

// Close stops the link and drops its connections.
func (l *Link) Close() { l.proxy.Stop() }
