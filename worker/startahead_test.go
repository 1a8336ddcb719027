//go:build !js

package worker

import (
	"context"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/protocol"
)

// gatedBackend computes like refBackend once gate is closed, and blocks
// every gradient until then.
type gatedBackend struct {
	refBackend
	gate chan struct{}
}

func (b *gatedBackend) Gradient(params, x []float32, labels []int32, grad []float32) (float64, int, error) {
	<-b.gate
	return b.refBackend.Gradient(params, x, labels, grad)
}

// With StartAhead, while one "latest" lease computes, the worker starts
// the next one and downloads its snapshot, so the backend does not wait
// for a round trip between tasks; each result names the base its start
// was given.
func TestNextLatestLeaseStartsWhileOneComputes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tc := newTestCoordinator(t)
	b := &gatedBackend{gate: make(chan struct{})}
	s := tc.acceptWith(ctx, Config{Backend: b, StartAhead: true})

	l1, l2 := testLease(1, protocol.SnapshotLatest, 0), testLease(2, protocol.SnapshotLatest, 0)
	s.send(l1)
	s.send(l2)
	if st, ok := s.recv().(*protocol.Start); !ok || st.LeaseID != 1 {
		t.Fatalf("got %+v, want start for lease 1", st)
	}
	p7 := tc.publish(7)
	deadline := time.Now().Add(time.Minute).UnixMilli()
	s.send(&protocol.Started{LeaseID: 1, BaseVersion: 7, SnapshotURL: "/snap/7", DeadlineUnixMs: deadline})
	// Lease 1 is computing now, held at the gate: only starting ahead
	// sends this.
	if st, ok := s.recv().(*protocol.Start); !ok || st.LeaseID != 2 {
		t.Fatalf("got %+v while lease 1 computes, want start for lease 2", st)
	}
	p8 := tc.publish(8)
	s.send(&protocol.Started{LeaseID: 2, BaseVersion: 8, SnapshotURL: "/snap/8", DeadlineUnixMs: deadline})
	for wait := time.Now().Add(10 * time.Second); tc.fetched("/snap/8") == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(wait) {
			t.Fatal("snapshot 8 of the started lease 2 was not downloaded while lease 1 computes")
		}
	}
	close(b.gate)
	tc.expectResult(s, l1, p7, 7)
	tc.expectResult(s, l2, p8, 8)
}

// By default a "latest" lease starts only after the previous result is
// sent, so its base holds that result.
func TestLatestLeaseStartsAfterThePreviousResultByDefault(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tc := newTestCoordinator(t)
	s := tc.accept(ctx)

	l1, l2 := testLease(1, protocol.SnapshotLatest, 0), testLease(2, protocol.SnapshotLatest, 0)
	s.send(l1)
	s.send(l2)
	if st, ok := s.recv().(*protocol.Start); !ok || st.LeaseID != 1 {
		t.Fatalf("got %+v, want start for lease 1", st)
	}
	p7 := tc.publish(7)
	deadline := time.Now().Add(time.Minute).UnixMilli()
	s.send(&protocol.Started{LeaseID: 1, BaseVersion: 7, SnapshotURL: "/snap/7", DeadlineUnixMs: deadline})
	tc.expectResult(s, l1, p7, 7) // the result, not start 2, comes next
	if st, ok := s.recv().(*protocol.Start); !ok || st.LeaseID != 2 {
		t.Fatalf("got %+v after lease 1's result, want start for lease 2", st)
	}
	p8 := tc.publish(8)
	s.send(&protocol.Started{LeaseID: 2, BaseVersion: 8, SnapshotURL: "/snap/8", DeadlineUnixMs: deadline})
	tc.expectResult(s, l2, p8, 8)
}
