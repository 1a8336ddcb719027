package coordinator_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/crowdtrain/crowdtrain/protocol"
)

// heapAndStack is the memory live objects and goroutine stacks hold, after
// collecting garbage (twice: finalizers and sync.Pools settle).
func heapAndStack() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc + ms.StackInuse)
}

// memPerConn measures the memory n connections hold once open(i) has made
// each one, per connection. Both ends live in this process, so the figure
// includes the client side; the raw-websocket baseline says how much of it
// a bare coder/websocket pair costs.
func memPerConn(b *testing.B, n int, open func(i int)) float64 {
	b.Helper()
	before := heapAndStack()
	for i := range n {
		open(i)
	}
	time.Sleep(200 * time.Millisecond) // let every goroutine reach its wait
	return float64(heapAndStack()-before) / float64(n)
}

const memConns = 300

// BenchmarkConnMemory reports what a connected worker costs: idle after
// its welcome, and after it has sent one full-size (mnist-mlp) result.
// Run with -benchtime 1x.
func BenchmarkConnMemory(b *testing.B) {
	b.Run("idle-after-hello", func(b *testing.B) {
		for range b.N {
			g := newTestGrid(b, jobSpec(b, "mnist-mlp", nil))
			per := memPerConn(b, memConns, func(int) { g.joinRaw() })
			b.ReportMetric(per, "B/conn")
			g.close()
		}
	})
	b.Run("after-full-frame", func(b *testing.B) {
		for range b.N {
			g := newTestGrid(b, jobSpec(b, "mnist-mlp", nil))
			frame := fullSizeResult(b, g)
			per := memPerConn(b, memConns, func(int) {
				rc := g.joinRaw()
				if err := rc.sendBytes(frame); err != nil {
					b.Fatal(err)
				}
				rc.ack(1 << 40)
			})
			b.ReportMetric(per, "B/conn")
			b.ReportMetric(per*memConns/(1<<20), "MiB-total")
			g.close()
		}
	})
	b.Run("raw-websocket-idle", func(b *testing.B) {
		for range b.N {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				c, err := websocket.Accept(w, r, nil)
				if err != nil {
					return
				}
				defer c.CloseNow()
				for {
					if _, _, err := c.Read(context.Background()); err != nil {
						return
					}
				}
			}))
			url := "ws" + strings.TrimPrefix(srv.URL, "http")
			var conns []*websocket.Conn
			per := memPerConn(b, memConns, func(int) {
				c, _, err := websocket.Dial(context.Background(), url, nil)
				if err != nil {
					b.Fatal(err)
				}
				conns = append(conns, c)
			})
			b.ReportMetric(per, "B/conn")
			for _, c := range conns {
				c.CloseNow()
			}
			srv.Close()
		}
	})
}

// fullSizeResult is a result frame as large as g's job allows, for a lease
// nobody holds: it is read, decoded and rejected (unknown_lease).
func fullSizeResult(t testing.TB, g *testGrid) []byte {
	t.Helper()
	n := modelParams(t, g.job.Spec)
	frame, err := protocol.Encode(&protocol.Result{LeaseID: 1 << 40, JobID: g.job.ID, Codec: protocol.CodecF32,
		Update: make(protocol.Floats, n), Examples: 1})
	if err != nil {
		t.Fatal(err)
	}
	return frame
}
