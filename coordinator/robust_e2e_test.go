package coordinator_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/worker"
)

// slowStartBackend waits delay before its first gradient.
type slowStartBackend struct {
	worker.Backend
	delay   time.Duration
	started atomic.Bool
}

func (b *slowStartBackend) Gradient(params, x []float32, labels []int32, grad []float32) (float64, int, error) {
	if !b.started.Swap(true) {
		time.Sleep(b.delay)
	}
	return b.Backend.Gradient(params, x, labels, grad)
}

// hostileEarly plays the "early" attacker until ctx ends: from the first
// moment, every lease it takes is answered at once with a huge update
// (norm about 3e22, far above any honest one) in one fixed direction. It
// counts what it sent and how it was acked.
type hostileEarly struct {
	sent, accepted, clipped, rejected atomic.Int64
	firstReject                       atomic.Value
}

func (h *hostileEarly) run(ctx context.Context, rc *rawClient, n int, pace time.Duration, pre []protocol.Lease) {
	huge := make(protocol.Floats, n)
	for i := range huge {
		huge[i] = -1e20
	}
	for ctx.Err() == nil {
		var l *protocol.Lease
		var b []byte
		var err error
		if len(pre) > 0 {
			l, pre = &pre[0], pre[1:]
		} else if b, err = protocol.Encode(&protocol.Want{N: 1}); err != nil || rc.sendBytes(b) != nil {
			return
		}
		for l == nil {
			m, err := rc.readErr()
			if err != nil {
				return
			}
			switch m := m.(type) {
			case *protocol.Lease:
				l = m
			case *protocol.Idle:
				time.Sleep(20 * time.Millisecond)
				if b, err := protocol.Encode(&protocol.Want{N: 1}); err != nil || rc.sendBytes(b) != nil {
					return
				}
			}
		}
		if l.Snapshot == protocol.SnapshotLatest {
			b, _ := protocol.Encode(&protocol.Start{LeaseID: l.ID})
			if rc.sendBytes(b) != nil {
				return
			}
			for started := false; !started; {
				m, err := rc.readErr()
				if err != nil {
					return
				}
				if s, ok := m.(*protocol.Started); ok && s.LeaseID == l.ID {
					l.BaseVersion, started = s.BaseVersion, true
				}
			}
		}
		// Each update its own (the same one again would be refused as a
		// replay, never reaching the clip).
		huge[0] = -1e20 - float32(h.sent.Load())*1e14
		b, err = protocol.Encode(&protocol.Result{LeaseID: l.ID, JobID: l.JobID, BaseVersion: l.BaseVersion, Codec: protocol.CodecF32,
			Update: huge, Examples: l.Count, LossSum: 1, ComputeMs: 1})
		if err != nil || rc.sendBytes(b) != nil {
			return
		}
		h.sent.Add(1)
		// Paced like a worker that computes: an instant answer to every
		// lease would take most of each epoch's data, which is the hostage
		// attack's business, not this one's.
		time.Sleep(pace)
		for {
			m, err := rc.readErr()
			if err != nil {
				return
			}
			if a, ok := m.(*protocol.Ack); ok && a.LeaseID == l.ID {
				switch {
				case a.Accepted && a.Reason == protocol.ReasonClipped:
					h.clipped.Add(1)
					h.accepted.Add(1)
				case a.Accepted:
					h.accepted.Add(1)
				default:
					h.rejected.Add(1)
					h.firstReject.CompareAndSwap(nil, a.Reason+": "+a.Detail)
				}
				break
			}
		}
	}
}

// Async mnist-mlp with two honest workers and one client sending huge
// updates from the first moment (before the norm gate has anything to
// compare with) reaches 97%: the coordinator's validation refuses them
// (the lone first ones included) and the robust clip bounds any it lets
// through. Without either the model was destroyed (accuracy 0.12).
func TestAsyncEarlyHugeAttackerIsClipped(t *testing.T) {
	testenv.Long(t, "trains MNIST end to end")
	g := newTestGrid(t, modeSpec(t, "eval_every: 250\n"))
	// The attacker takes leases first, and answers them the moment the
	// honest workers hold theirs: its huge updates are the very first
	// results.
	rc := g.joinRaw()
	pre := rc.leases(2)
	// The honest workers are slow to start (as a download would make
	// them), so the attacker's results come first.
	slowStart := func(b worker.Backend) worker.Backend { return &slowStartBackend{Backend: b, delay: time.Second} }
	g.addWorker(1, slowStart)
	g.addWorker(1, slowStart)
	g.waitFor("the honest workers' leases", time.Minute, func(v coordinator.JobView) bool { return v.LeasesHeld >= 4 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := &hostileEarly{}
	done := make(chan struct{})
	go func() { defer close(done); h.run(ctx, rc, rc.welcome.Job.NumParams, 10*time.Millisecond, pre) }()
	v := g.waitDone(5 * time.Minute)
	cancel()
	rc.conn.Close(websocket.StatusNormalClosure, "")
	<-done
	t.Logf("attacker's first rejection: %v", h.firstReject.Load())
	t.Logf("early attacker: sent %d, accepted %d (%d clipped), rejected %d; job: accuracy %+v, version %d, applied %d, clipped %d, rejections %v",
		h.sent.Load(), h.accepted.Load(), h.clipped.Load(), h.rejected.Load(), v.Eval, v.Version, v.UpdatesApplied, v.Clipped, v.Rejections)
	if h.sent.Load() < 10 {
		t.Fatalf("the attacker sent only %d updates: the attack did not run", h.sent.Load())
	}
	if v.State != coordinator.StateDone || v.Eval == nil || v.Eval.Accuracy < 0.97 {
		t.Fatalf("job ended %s (%s) with eval %+v, want done at >= 0.97 despite the attacker", v.State, v.Reason, v.Eval)
	}
	// Each huge update is either refused by the coordinator's validation
	// (quarantined) or applied clipped: none is applied as sent.
	if h.accepted.Load() != h.clipped.Load() {
		t.Errorf("%d of the attacker's updates were accepted, only %d of them clipped", h.accepted.Load(), h.clipped.Load())
	}
	if v.Rejections["quarantined"]+v.Clipped == 0 {
		t.Errorf("the job quarantined and clipped nothing (rejections %v, clipped %d)", v.Rejections, v.Clipped)
	}
}
