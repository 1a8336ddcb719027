package coordinator_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// heapAndStack is the memory live objects and goroutine stacks hold, after
// collecting garbage (twice: finalizers and sync.Pools settle).
func heapAndStack() int64 {
	heap, stack := heapStack()
	return heap + stack
}

func heapStack() (heap, stack int64) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc), int64(ms.StackInuse)
}

// memPerConn measures the memory n worker connections hold in this
// process (the coordinator's side only: the clients live in a child
// process, see TestConnHolderProcess), per connection. fullFrame makes
// each client send one full-size result first and wait for its ack.
func memPerConn(b *testing.B, url string, n int, fullFrame bool) float64 {
	b.Helper()
	heap0, stack0 := heapStack()
	cmd := exec.Command(os.Args[0], "-test.run=^TestConnHolderProcess$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %v", connHolderEnv, url, n, fullFrame))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close() // the holder exits when its stdin closes
	sc := bufio.NewScanner(out)
	ready := false
	for !ready && sc.Scan() {
		ready = sc.Text() == "READY"
	}
	if !ready {
		b.Fatalf("the connection holder stopped before holding %d connections: %v", n, sc.Err())
	}
	time.Sleep(200 * time.Millisecond) // let every goroutine reach its wait
	heap1, stack1 := heapStack()
	per := float64(heap1+stack1-heap0-stack0) / float64(n)
	b.ReportMetric(float64(stack1-stack0)/float64(n), "stack-B/conn")
	if p := os.Getenv("CONNMEM_PROFILE"); p != "" {
		f, _ := os.Create(p + b.Name()[strings.LastIndex(b.Name(), "/")+1:])
		pprof.WriteHeapProfile(f)
		f.Close()
		f, _ = os.Create(p + b.Name()[strings.LastIndex(b.Name(), "/")+1:] + ".goroutines")
		pprof.Lookup("goroutine").WriteTo(f, 1)
		f.Close()
	}
	return per
}

const connHolderEnv = "CROWDTRAIN_CONN_HOLDER"

// TestConnHolderProcess is not a test: BenchmarkConnMemory runs the test
// binary again with $CROWDTRAIN_CONN_HOLDER set ("URL N FULLFRAME") to hold
// N worker connections in another process until its stdin closes.
func TestConnHolderProcess(t *testing.T) {
	arg := os.Getenv(connHolderEnv)
	if arg == "" {
		t.Skip("helper process for BenchmarkConnMemory")
	}
	var url string
	var n int
	var fullFrame bool
	if _, err := fmt.Sscanf(arg, "%s %d %t", &url, &n, &fullFrame); err != nil {
		t.Fatal(err)
	}
	for range n {
		c, _, err := websocket.Dial(context.Background(), url, nil)
		if err != nil {
			t.Fatal(err)
		}
		c.SetReadLimit(1 << 20)
		rc := &rawClient{t: t, conn: c}
		rc.send(&protocol.Hello{Protocol: protocol.Version, Kind: protocol.KindNative, Backend: "raw", Threads: 1})
		w, ok := rc.read().(*protocol.Welcome)
		if !ok {
			t.Fatal("expected a welcome")
		}
		if fullFrame {
			rc.send(&protocol.Result{LeaseID: 1 << 40, JobID: w.Job.ID, Codec: protocol.CodecF32,
				Update: make(protocol.Floats, w.Job.NumParams), Examples: 1})
			rc.ack(1 << 40)
		}
	}
	fmt.Println("READY")
	_, _ = io.Copy(io.Discard, os.Stdin)
}

const memConns = 300

// BenchmarkConnMemory reports what a connected worker costs the
// coordinator: idle after its welcome, and after it has sent one
// full-size (mnist-mlp) result. Run with -benchtime 1x.
func BenchmarkConnMemory(b *testing.B) {
	if os.Getenv("CONNMEM_PROFILE") != "" {
		runtime.MemProfileRate = 1
	}
	for _, c := range []struct {
		name      string
		fullFrame bool
	}{{"idle-after-hello", false}, {"after-full-frame", true}} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				g := newTestGridWith(b, jobSpec(b, "mnist-mlp", nil), func(cfg *coordinator.Config) {
					cfg.Logf = func(string, ...any) {}
					cfg.MaxConnsPerAddress = memConns // all from 127.0.0.1
				})
				per := memPerConn(b, g.wsURL(), memConns, c.fullFrame)
				b.ReportMetric(per, "B/conn")
				b.ReportMetric(per*memConns/(1<<20), "MiB-total")
				g.close()
			}
		})
	}
	b.Run("raw-websocket-idle", func(b *testing.B) {
		for range b.N {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				c, err := websocket.Accept(w, r, nil)
				if err != nil {
					return
				}
				defer c.CloseNow()
				for {
					_, m, err := c.Read(context.Background())
					if err != nil {
						return
					}
					// Answer a hello like the coordinator, so that the
					// holder gets its welcome.
					if hm, err := protocol.Decode(m, 1<<20); err == nil && hm.MessageType() == protocol.TypeHello {
						b, _ := protocol.Encode(&protocol.Welcome{WorkerID: "w", Job: protocol.JobInfo{ID: "j", NumParams: 1},
							Limits: protocol.Limits{MaxMessageBytes: 1 << 20, LeaseTimeoutMs: 1, MaxLeases: 1}})
						_ = c.Write(context.Background(), websocket.MessageBinary, b)
					}
				}
			}))
			per := memPerConn(b, "ws"+strings.TrimPrefix(srv.URL, "http"), memConns, false)
			b.ReportMetric(per, "B/conn")
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
