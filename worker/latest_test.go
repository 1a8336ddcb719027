//go:build !js

package worker

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// testCoordinator is a scripted coordinator on loopback: it answers hello
// with a welcome for smallModel's spec and hands the websocket to the test,
// which plays the coordinator's side message by message. It serves one
// shard at /shard and the snapshot of version v at /snap/v, counting
// downloads.
type testCoordinator struct {
	t     *testing.T
	srv   *httptest.Server
	model *nn.Model
	shard *dataset.Set
	conns chan *websocket.Conn

	mu        sync.Mutex
	snapshots map[string][]float32 // version → parameters
	downloads map[string]int       // path → GETs
}

var smallSpec = nn.ModelSpec{Input: []int{1, 4, 4}, Layers: []nn.LayerSpec{
	{Type: "dense", Units: 8}, {Type: "relu"}, {Type: "dense", Units: 3}}}

func newTestCoordinator(t *testing.T) *testCoordinator {
	m, err := nn.NewModel(smallSpec)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	sd := &dataset.Set{N: 16, Elem: dataset.Pixels, Kind: dataset.ClassLabels, Shape: []int{1, 4, 4}, Classes: 3,
		U8: make([]byte, 16*16), Labels: make([]int32, 16)}
	for i := range sd.U8 {
		sd.U8[i] = byte(rng.IntN(256))
	}
	for i := range sd.Labels {
		sd.Labels[i] = int32(rng.IntN(3))
	}
	body, err := dataset.EncodeSet(sd)
	if err != nil {
		t.Fatal(err)
	}
	tc := &testCoordinator{t: t, model: m, shard: sd, conns: make(chan *websocket.Conn, 1),
		snapshots: map[string][]float32{}, downloads: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /shard", func(w http.ResponseWriter, r *http.Request) {
		tc.count(r.URL.Path)
		w.Write(body)
	})
	mux.HandleFunc("GET /snap/{v}", func(w http.ResponseWriter, r *http.Request) {
		tc.count(r.URL.Path)
		tc.mu.Lock()
		p, ok := tc.snapshots[r.PathValue("v")]
		tc.mu.Unlock()
		if !ok {
			http.Error(w, "no such snapshot", http.StatusNotFound)
			return
		}
		w.Write(protocol.EncodeFloats(p))
	})
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		c.SetReadLimit(1 << 20)
		tc.conns <- c
		<-r.Context().Done()
	})
	tc.srv = httptest.NewServer(mux)
	t.Cleanup(tc.srv.Close)
	return tc
}

func (tc *testCoordinator) count(path string) {
	tc.mu.Lock()
	tc.downloads[path]++
	tc.mu.Unlock()
}

func (tc *testCoordinator) fetched(path string) int {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return tc.downloads[path]
}

// publish makes version v's snapshot (parameters from seed v) available.
func (tc *testCoordinator) publish(v int64) []float32 {
	p := make([]float32, tc.model.NumParams)
	tc.model.Init(p, v)
	tc.mu.Lock()
	tc.snapshots[fmt.Sprint(v)] = p
	tc.mu.Unlock()
	return p
}

// session is one worker connection seen from the coordinator.
type coordSide struct {
	t    *testing.T
	conn *websocket.Conn
}

// accept starts a worker against tc and takes its connection through
// hello and welcome.
func (tc *testCoordinator) accept(ctx context.Context) *coordSide {
	return tc.acceptWith(ctx, Config{Backend: &refBackend{}})
}

// acceptWith is accept with the worker configured by cfg (its
// coordinator and log set here).
func (tc *testCoordinator) acceptWith(ctx context.Context, cfg Config) *coordSide {
	cfg.Coordinator, cfg.Logf = "ws"+strings.TrimPrefix(tc.srv.URL, "http")+"/ws", tc.t.Logf
	w, err := New(cfg)
	if err != nil {
		tc.t.Fatal(err)
	}
	go w.Run(ctx)
	var c *websocket.Conn
	select {
	case c = <-tc.conns:
	case <-time.After(10 * time.Second):
		tc.t.Fatal("the worker did not connect")
	}
	s := &coordSide{t: tc.t, conn: c}
	if h, ok := s.recv().(*protocol.Hello); !ok || h.Protocol != protocol.Version {
		tc.t.Fatalf("first message %+v, want hello with protocol %d", h, protocol.Version)
	}
	s.send(&protocol.Welcome{WorkerID: "w1", Job: protocol.JobInfo{ID: "j", Name: "test", Model: smallSpec, NumParams: tc.model.NumParams},
		Limits: protocol.Limits{MaxMessageBytes: 1 << 20, LeaseTimeoutMs: 60000, MaxLeases: 8}})
	if _, ok := s.recv().(*protocol.Want); !ok {
		tc.t.Fatal("the worker did not ask for leases after welcome")
	}
	return s
}

func (s *coordSide) send(m protocol.Message) {
	s.t.Helper()
	b, err := protocol.Encode(m)
	if err != nil {
		s.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.conn.Write(ctx, websocket.MessageBinary, b); err != nil {
		s.t.Fatal(err)
	}
}

func (s *coordSide) recv() protocol.Message {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, b, err := s.conn.Read(ctx)
	if err != nil {
		s.t.Fatalf("reading from the worker: %v", err)
	}
	m, err := protocol.Decode(b, 1<<20)
	if err != nil {
		s.t.Fatal(err)
	}
	return m
}

// lease is a 2-step SGD lease over examples 4..11 of the test shard.
func testLease(id uint64, snapshot string, base int64) *protocol.Lease {
	l := &protocol.Lease{ID: id, JobID: "j", ShardURL: "/shard", Start: 4, Count: 8, BatchSize: 4, LocalSteps: 2,
		Inner: protocol.InnerOptimizer{Type: protocol.InnerSGD, LR: 0.1}, UpdateKind: protocol.UpdateGradient, Snapshot: snapshot,
		DeadlineUnixMs: time.Now().Add(time.Minute).UnixMilli()}
	if snapshot == protocol.SnapshotGranted {
		l.BaseVersion, l.SnapshotURL = base, fmt.Sprintf("/snap/%d", base)
	}
	return l
}

// expectResult reads a result for lease l and checks that it is computed
// from params and names base as its base version.
func (tc *testCoordinator) expectResult(s *coordSide, l *protocol.Lease, params []float32, base int64) {
	tc.t.Helper()
	res, ok := s.recv().(*protocol.Result)
	if !ok || res.LeaseID != l.ID {
		tc.t.Fatalf("got %+v, want the result of lease %d", res, l.ID)
	}
	if res.BaseVersion != base {
		tc.t.Errorf("lease %d: result claims base version %d, want %d", l.ID, res.BaseVersion, base)
	}
	x := make([]float32, l.Count*tc.model.InputSize)
	labels := make([]int32, l.Count)
	tc.shard.Fill(x, labels, l.Start, l.Count)
	want, err := ComputeLease(&refBackend{}, tc.model, *l, params, x, labels)
	if err != nil {
		tc.t.Fatal(err)
	}
	for i := range want.Update {
		if res.Update[i] != want.Update[i] {
			tc.t.Fatalf("lease %d: update[%d] = %v, want %v (computed from the snapshot at version %d)", l.ID, i, res.Update[i], want.Update[i], base)
		}
	}
	s.send(&protocol.Ack{LeaseID: l.ID, Accepted: true, Version: base + 1})
	if _, ok := s.recv().(*protocol.Want); !ok {
		tc.t.Fatal("no want after a result")
	}
}

// A lease with snapshot "latest" computes on the snapshot the coordinator
// names in started, which did not exist when the lease was granted: the
// worker prefetches only the shard, sends start when it begins, and its
// result carries started's base version. A second lease started on the
// same version reuses the snapshot it holds.
func TestLatestLeaseComputesOnTheStartedSnapshot(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tc := newTestCoordinator(t)
	s := tc.accept(ctx)

	l1 := testLease(1, protocol.SnapshotLatest, 0)
	s.send(l1)
	st, ok := s.recv().(*protocol.Start)
	if !ok || st.LeaseID != 1 {
		t.Fatalf("got %+v, want start for lease 1", st)
	}
	if tc.fetched("/shard") != 1 {
		t.Errorf("the shard was fetched %d times before start, want once", tc.fetched("/shard"))
	}
	p7 := tc.publish(7) // newer than anything at grant time
	s.send(&protocol.Started{LeaseID: 1, BaseVersion: 7, SnapshotURL: "/snap/7", DeadlineUnixMs: time.Now().Add(time.Minute).UnixMilli()})
	tc.expectResult(s, l1, p7, 7)

	l2 := testLease(2, protocol.SnapshotLatest, 0)
	s.send(l2)
	if st, ok := s.recv().(*protocol.Start); !ok || st.LeaseID != 2 {
		t.Fatalf("got %+v, want start for lease 2", st)
	}
	s.send(&protocol.Started{LeaseID: 2, BaseVersion: 7, SnapshotURL: "/snap/7", DeadlineUnixMs: time.Now().Add(time.Minute).UnixMilli()})
	tc.expectResult(s, l2, p7, 7)
	if n := tc.fetched("/snap/7"); n != 1 {
		t.Errorf("snapshot 7 downloaded %d times for two leases started on it, want once", n)
	}

	// A granted lease works as before: no start, its own base.
	p3 := tc.publish(3)
	l3 := testLease(3, protocol.SnapshotGranted, 3)
	s.send(l3)
	tc.expectResult(s, l3, p3, 3)
}

// When the coordinator answers start with a rejection (the lease expired),
// the worker drops the lease, sends no result and asks for more work.
func TestRefusedStartDropsTheLease(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tc := newTestCoordinator(t)
	s := tc.accept(ctx)
	s.send(testLease(4, protocol.SnapshotLatest, 0))
	if st, ok := s.recv().(*protocol.Start); !ok || st.LeaseID != 4 {
		t.Fatalf("got %+v, want start for lease 4", st)
	}
	s.send(&protocol.Ack{LeaseID: 4, Accepted: false, Reason: protocol.ReasonUnknownLease, Detail: "expired"})
	if m, ok := s.recv().(*protocol.Want); !ok || m.N != 1 {
		t.Fatalf("got %+v after a refused start, want want{n: 1}", m)
	}
	if n := tc.fetched("/snap/0"); n != 0 {
		t.Errorf("a snapshot was fetched for a refused start")
	}
}
