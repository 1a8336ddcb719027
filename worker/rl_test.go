//go:build !js

package worker

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/crowdtrain/crowdtrain/compute"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// A native worker announces RL in its hello, and computes an RL job's
// rollout lease (no shard fetched, completions as compute samples them
// from the named version) and learn lease (the GRPO gradient, in f32
// whatever the job's codec).
func TestNativeWorkerComputesRLLeases(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tc := newTestCoordinator(t)
	spec := nn.Transformer(nn.TransformerConfig{Context: 12, Width: 8, Blocks: 1, Heads: 2, Vocab: 16})
	m, err := nn.NewModel(spec)
	if err != nil {
		t.Fatal(err)
	}
	tc.model = m
	p := tc.publish(4)

	w, err := New(Config{Coordinator: "ws" + strings.TrimPrefix(tc.srv.URL, "http") + "/ws", Backend: &refBackend{}, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	go w.Run(ctx)
	var c *websocket.Conn
	select {
	case c = <-tc.conns:
	case <-time.After(10 * time.Second):
		t.Fatal("the worker did not connect")
	}
	s := &coordSide{t: t, conn: c}
	h, ok := s.recv().(*protocol.Hello)
	if !ok || h.Caps == nil || !h.Caps.RL {
		t.Fatalf("hello %+v; want caps.rl from a native worker", h)
	}
	s.send(&protocol.Welcome{WorkerID: "w1", Job: protocol.JobInfo{ID: "j", Name: "rl", Model: spec, NumParams: m.NumParams, UpdateCodec: protocol.CodecF16},
		Limits: protocol.Limits{MaxMessageBytes: 1 << 20, LeaseTimeoutMs: 60000, MaxLeases: 8}})
	if _, ok := s.recv().(*protocol.Want); !ok {
		t.Fatal("no want after welcome")
	}
	deadline := time.Now().Add(time.Minute).UnixMilli()
	roll := &protocol.Lease{ID: 1, JobID: "j", BaseVersion: 4, SnapshotURL: "/snap/4", Snapshot: protocol.SnapshotGranted, DeadlineUnixMs: deadline,
		Rollout: &protocol.RolloutTask{Prompt: []int32{10, 3, 5}, GroupSize: 4, MaxNewTokens: 5, Temperature: 1, Seed: 9, Stop: []int32{10}}}
	s.send(roll)
	res, ok := s.recv().(*protocol.Result)
	if !ok || res.LeaseID != 1 {
		t.Fatalf("got %+v, want the rollout lease's result", res)
	}
	want, err := compute.RLLease(m, *roll, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res.Rollouts, want.Rollouts) || res.BaseVersion != 4 || len(res.Update)+len(res.Packed) != 0 {
		t.Errorf("rollouts %+v (base %d, %d update values); want %+v from version 4 and no update", res.Rollouts, res.BaseVersion, len(res.Update)+len(res.Packed), want.Rollouts)
	}
	if tc.fetched("/shard") != 0 {
		t.Error("a rollout lease fetched a shard")
	}
	s.send(&protocol.Ack{LeaseID: 1, Accepted: true, Version: 4})
	if _, ok := s.recv().(*protocol.Want); !ok {
		t.Fatal("no want after the rollout's ack")
	}

	lg := protocol.LearnGroup{Prompt: roll.Rollout.Prompt}
	for i, r := range res.Rollouts {
		lg.Completions = append(lg.Completions, protocol.LearnCompletion{Tokens: r.Tokens, LogProbs: r.LogProbs, Advantage: float64(i%2*2 - 1)})
	}
	learn := &protocol.Lease{ID: 2, JobID: "j", BaseVersion: 4, SnapshotURL: "/snap/4", Snapshot: protocol.SnapshotGranted, DeadlineUnixMs: deadline,
		Learn: &protocol.LearnTask{Groups: []protocol.LearnGroup{lg}, Clip: 0.2, Temperature: 1}}
	s.send(learn)
	res, ok = s.recv().(*protocol.Result)
	if !ok || res.LeaseID != 2 {
		t.Fatalf("got %+v, want the learn lease's result", res)
	}
	want, err = compute.RLLease(m, *learn, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Codec != protocol.CodecF32 || !reflect.DeepEqual(res.Update, want.Update) || res.Examples != 4 {
		t.Errorf("learn result: codec %s, %d examples, update equal to compute's: %v; want f32, 4, true", res.Codec, res.Examples, reflect.DeepEqual(res.Update, want.Update))
	}
	s.send(&protocol.Ack{LeaseID: 2, Accepted: true, Version: 5})
	if _, ok := s.recv().(*protocol.Want); !ok {
		t.Fatal("no want after the learn lease's ack")
	}

	// With a KL penalty: the reference policy comes from the URL the
	// lease names, once for both leases, and the gradient has the KL term.
	ref := tc.publish(0)
	for id := uint64(3); id <= 4; id++ {
		kl := &protocol.Lease{ID: id, JobID: "j", BaseVersion: 4, SnapshotURL: "/snap/4", Snapshot: protocol.SnapshotGranted, DeadlineUnixMs: deadline,
			Learn: &protocol.LearnTask{Groups: []protocol.LearnGroup{lg}, Clip: 0.2, Temperature: 1, KLCoef: 0.5, ReferenceURL: "/snap/0"}}
		s.send(kl)
		res, ok = s.recv().(*protocol.Result)
		if !ok || res.LeaseID != id {
			t.Fatalf("got %+v, want the KL learn lease's result", res)
		}
		withKL, err := compute.RLLease(m, *kl, p, ref)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(res.Update, withKL.Update) || reflect.DeepEqual(res.Update, want.Update) {
			t.Errorf("KL learn result: update equal to compute's with the reference %v, to the one without KL %v; want true, false",
				reflect.DeepEqual(res.Update, withKL.Update), reflect.DeepEqual(res.Update, want.Update))
		}
		s.send(&protocol.Ack{LeaseID: id, Accepted: true, Version: 5})
		if _, ok := s.recv().(*protocol.Want); !ok {
			t.Fatal("no want after the KL learn lease's ack")
		}
	}
	if n := tc.fetched("/snap/0"); n != 1 {
		t.Errorf("the reference policy was fetched %d times for two leases; want once", n)
	}
}
