//go:build !js

package worker

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/crowdtrain/crowdtrain/protocol"
)

// acceptCodec is testCoordinator.accept with a welcome that names codec
// as the worker's update codec; it returns the hello too.
func (tc *testCoordinator) acceptCodec(ctx context.Context, codec string, frac float64) (*coordSide, *protocol.Hello) {
	w, err := New(Config{Coordinator: "ws" + strings.TrimPrefix(tc.srv.URL, "http") + "/ws", Backend: &refBackend{}, Logf: tc.t.Logf})
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
	h, ok := s.recv().(*protocol.Hello)
	if !ok {
		tc.t.Fatal("first message is not hello")
	}
	s.send(&protocol.Welcome{WorkerID: "w1", Job: protocol.JobInfo{ID: "j", Name: "test", Model: smallSpec, NumParams: tc.model.NumParams,
		UpdateCodec: codec, TopKFraction: frac, SparseFraction: frac, SparseChunk: testSparseChunk},
		Limits: protocol.Limits{MaxMessageBytes: 1 << 20, LeaseTimeoutMs: 60000, MaxLeases: 8}})
	if _, ok := s.recv().(*protocol.Want); !ok {
		tc.t.Fatal("the worker did not ask for leases after welcome")
	}
	return s, h
}

// resultOf sends l, reads its result, acks it and reads the want that
// follows. want is the f32 update the lease computes to.
func (tc *testCoordinator) resultOf(s *coordSide, l *protocol.Lease, params []float32) (res *protocol.Result, want []float32) {
	tc.t.Helper()
	s.send(l)
	res, ok := s.recv().(*protocol.Result)
	if !ok || res.LeaseID != l.ID {
		tc.t.Fatalf("got %+v, want the result of lease %d", res, l.ID)
	}
	res.Packed = bytes.Clone(res.Packed) // the decoder's storage is reused
	res.Update = slices.Clone(res.Update)
	x := make([]float32, l.Count*tc.model.InputSize)
	labels := make([]int32, l.Count)
	tc.shard.Fill(x, labels, l.Start, l.Count)
	w, err := ComputeLease(&refBackend{}, tc.model, *l, params, x, labels)
	if err != nil {
		tc.t.Fatal(err)
	}
	s.send(&protocol.Ack{LeaseID: l.ID, Accepted: true, Version: 4})
	if _, ok := s.recv().(*protocol.Want); !ok {
		tc.t.Fatal("no want after a result")
	}
	return res, w.Update
}

// testSparseChunk is the sparse chunk of the test welcomes: a few chunks
// of the small model.
const testSparseChunk = 64

// A worker sends its results in the codec its welcome names, with error
// feedback carried from one result to the next; a spot check's copy in
// an i8, topk or sparse job goes as f32 and leaves the residual alone
// (the next result is what it would have been without the copy); an f16
// copy goes as f16.
func TestWorkerSendsTheWelcomesCodec(t *testing.T) {
	for _, codec := range []string{protocol.CodecF16, protocol.CodecI8, protocol.CodecTopK, protocol.CodecSparse} {
		t.Run(codec, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			tc := newTestCoordinator(t)
			s, h := tc.acceptCodec(ctx, codec, 0.05)
			if !slices.Equal(h.Codecs, protocol.UpdateCodecs) {
				t.Fatalf("hello codecs %v, want %v", h.Codecs, protocol.UpdateCodecs)
			}
			p := tc.publish(3)
			ref := &protocol.UpdateEncoder{Codec: codec, TopKFraction: 0.05, SparseFraction: 0.05, SparseChunk: testSparseChunk}
			check := func(res *protocol.Result, want []float32, wantCodec string, feedback bool) {
				t.Helper()
				if res.Codec != wantCodec {
					t.Fatalf("lease %d: codec %q, want %q", res.LeaseID, res.Codec, wantCodec)
				}
				if wantCodec == protocol.CodecF32 {
					if len(res.Packed) != 0 || !slices.Equal(res.Update, want) {
						t.Fatalf("lease %d: an f32 result that is not the update (packed %d bytes)", res.LeaseID, len(res.Packed))
					}
					return
				}
				if len(res.Update) != 0 {
					t.Fatalf("lease %d: %s result with an f32 update too", res.LeaseID, wantCodec)
				}
				exp, err := ref.Encode(nil, want, feedback)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(res.Packed, exp) {
					t.Fatalf("lease %d: packed update differs from the reference encoder's (%d bytes, want %d)", res.LeaseID, len(res.Packed), len(exp))
				}
			}
			l1 := testLease(1, protocol.SnapshotGranted, 3)
			res, want := tc.resultOf(s, l1, p)
			check(res, want, codec, true)

			cp := testLease(2, protocol.SnapshotGranted, 3)
			cp.CopyOf, cp.Start = 1, 0
			res, want = tc.resultOf(s, cp, p)
			copyCodec := protocol.CodecF32
			if codec == protocol.CodecF16 {
				copyCodec = protocol.CodecF16
			}
			check(res, want, copyCodec, false)

			l3 := testLease(3, protocol.SnapshotGranted, 3)
			l3.Start = 8
			res, want = tc.resultOf(s, l3, p)
			check(res, want, codec, true)
		})
	}
}

// Once warm, packing a result allocates nothing (the browser's rule).
func TestEncoderPackAllocatesNothing(t *testing.T) {
	u := make(protocol.Floats, 5000)
	for i := range u {
		u[i] = float32(i%17) - 8
	}
	for _, codec := range protocol.UpdateCodecs {
		e, _ := newEncoder(protocol.JobInfo{UpdateCodec: codec, TopKFraction: 0.01, SparseFraction: 0.01, SparseChunk: 4096})
		var res protocol.Result
		pack := func() {
			res = protocol.Result{Codec: protocol.CodecF32, Update: u}
			if err := e.pack(&res, protocol.Lease{ID: 1}); err != nil {
				t.Fatal(err)
			}
		}
		pack()
		if codec != protocol.CodecF32 && (res.Codec != codec || len(res.Packed) == 0 || res.Update != nil) {
			t.Fatalf("%s: packed result %q with %d bytes", codec, res.Codec, len(res.Packed))
		}
		if a := testing.AllocsPerRun(10, pack); a != 0 {
			t.Errorf("%s: %v allocations per result once warm", codec, a)
		}
	}
}

// A welcome naming a codec the worker does not speak, a topk fraction out
// of range, or sparse parameters out of bounds, gets f32 and a warning.
func TestNewEncoderFallsBackToF32(t *testing.T) {
	for _, job := range []protocol.JobInfo{
		{UpdateCodec: "zip"},
		{UpdateCodec: protocol.CodecTopK, TopKFraction: 0},
		{UpdateCodec: protocol.CodecTopK, TopKFraction: 1.5},
		{UpdateCodec: protocol.CodecSparse, SparseFraction: 0.01},                       // no chunk
		{UpdateCodec: protocol.CodecSparse, SparseFraction: 0.5, SparseChunk: 4096},     // over a quarter
		{UpdateCodec: protocol.CodecSparse, SparseFraction: 0.01, SparseChunk: 1 << 20}, // offsets past 16 bits
	} {
		e, warn := newEncoder(job)
		if e.codec() != protocol.CodecF32 || warn == "" {
			t.Errorf("%+v: codec %q, warning %q; want f32 and a warning", job, e.codec(), warn)
		}
	}
	if e, warn := newEncoder(protocol.JobInfo{}); e.codec() != protocol.CodecF32 || warn != "" {
		t.Errorf("no codec: %q, warning %q", e.codec(), warn)
	}
	if e, warn := newEncoder(protocol.JobInfo{UpdateCodec: protocol.CodecTopK, TopKFraction: 0.01}); e.codec() != protocol.CodecTopK || warn != "" {
		t.Errorf("topk: %q, warning %q", e.codec(), warn)
	}
	if e, warn := newEncoder(protocol.JobInfo{UpdateCodec: protocol.CodecSparse, SparseFraction: 0.01, SparseChunk: 4096}); e.codec() != protocol.CodecSparse || warn != "" {
		t.Errorf("sparse: %q, warning %q", e.codec(), warn)
	}
}
