package coordinator_test

import (
	"context"
	"io"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// runDeltaWorker is a worker written against the protocol alone, on the
// test's goroutine budget: it takes one lease at a time, runs the lease's
// inner optimizer (sgd or adamw, state fresh per lease) for its local
// steps on nn's CPU model, and returns the update kind the lease asks for.
// It exists so the coordinator's delta modes are trained end to end here
// whatever the shipped workers run; it stops when ctx ends or the job
// stops handing out work.
func runDeltaWorker(ctx context.Context, g *testGrid) {
	t := g.t
	c, _, err := websocket.Dial(ctx, g.wsURL(), nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	c.SetReadLimit(16 << 20)
	send := func(m protocol.Message) error {
		b, err := protocol.Encode(m)
		if err != nil {
			t.Error(err)
			return err
		}
		return c.Write(ctx, websocket.MessageBinary, b)
	}
	read := func() protocol.Message {
		_, b, err := c.Read(ctx)
		if err != nil {
			return nil
		}
		m, err := protocol.Decode(b, 16<<20)
		if err != nil {
			t.Errorf("delta worker: %v", err)
			return nil
		}
		return m
	}
	get := func(path string) []byte {
		resp, err := http.Get(g.http.URL + path)
		if err != nil {
			return nil
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil
		}
		b, _ := io.ReadAll(resp.Body)
		return b
	}
	if send(&protocol.Hello{Protocol: protocol.Version, Kind: protocol.KindNative, Backend: "delta-test", Threads: 1, Client: "delta test worker"}) != nil {
		return
	}
	w, ok := read().(*protocol.Welcome)
	if !ok {
		return
	}
	model, err := nn.NewModel(w.Job.Model)
	if err != nil {
		t.Error(err)
		return
	}
	n := model.NumParams
	ws := model.NewWorkspace(256)
	params, base, grad, m1, m2 := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
	for ctx.Err() == nil {
		if send(&protocol.Want{N: 1}) != nil {
			return
		}
		var l *protocol.Lease
		for l == nil {
			switch m := read().(type) {
			case nil:
				return
			case *protocol.Lease:
				l = m
			case *protocol.Idle:
				time.Sleep(20 * time.Millisecond)
				if send(&protocol.Want{N: 1}) != nil {
					return
				}
			}
		}
		if l.Snapshot == protocol.SnapshotLatest {
			send(&protocol.Start{LeaseID: l.ID})
			st, ok := read().(*protocol.Started)
			if !ok {
				return
			}
			l.BaseVersion, l.SnapshotURL = st.BaseVersion, st.SnapshotURL
		}
		snap, shardBody := get(l.SnapshotURL), get(l.ShardURL)
		shard, err := dataset.DecodeShard(shardBody, 1<<20)
		if snap == nil || err != nil || protocol.DecodeFloatsInto(base, snap) != nil {
			send(&protocol.Release{LeaseIDs: []uint64{l.ID}, Reason: "could not fetch the lease's data"})
			continue
		}
		copy(params, base)
		clear(m1)
		clear(m2)
		in := l.Inner
		x := make([]float32, l.BatchSize*shard.ExampleSize())
		y := make([]int32, l.BatchSize)
		var lossSum float64
		var correct int
		for step := 0; step < l.LocalSteps; step++ {
			lo := l.Start + step*l.BatchSize
			if lo >= l.Start+l.Count {
				break
			}
			k := min(l.BatchSize, l.Start+l.Count-lo)
			shard.Fill(x[:k*shard.ExampleSize()], y[:k], lo, k)
			ls, c := model.Gradient(ws, params, x[:k*shard.ExampleSize()], y[:k], grad)
			lossSum, correct = lossSum+ls, correct+c
			if in.Type == protocol.InnerAdamW {
				t1 := float64(step + 1)
				bc1, bc2 := float32(1-math.Pow(float64(in.Beta1), t1)), float32(1-math.Pow(float64(in.Beta2), t1))
				for i, gi := range grad {
					m1[i] = in.Beta1*m1[i] + (1-in.Beta1)*gi
					m2[i] = in.Beta2*m2[i] + (1-in.Beta2)*gi*gi
					params[i] -= in.LR*in.WeightDecay*params[i] +
						in.LR*(m1[i]/bc1)/(float32(math.Sqrt(float64(m2[i]/bc2)))+in.Epsilon)
				}
			} else {
				nn.SGDStep(params, grad, in.LR)
			}
		}
		update := make(protocol.Floats, n)
		for i := range update {
			update[i] = base[i] - params[i]
			if l.UpdateKind == protocol.UpdateGradient {
				update[i] /= in.LR
			}
		}
		if send(&protocol.Result{LeaseID: l.ID, JobID: l.JobID, BaseVersion: l.BaseVersion, Codec: protocol.CodecF32,
			Update: update, Examples: l.Count, LossSum: lossSum, Correct: correct}) != nil {
			return
		}
		for {
			m := read()
			if m == nil {
				return
			}
			if a, ok := m.(*protocol.Ack); ok && a.LeaseID == l.ID {
				break
			}
		}
	}
}

// The coordinator's DiLoCo rules, with their defaults (inner AdamW 4e-4,
// outer Nesterov 0.7/0.9; Delayed Nesterov for async_diloco) at H = 16
// and rounds (or delays) of 2, train mnist-mlp to 97% with two workers
// that follow the protocol: here the test's own delta workers
// (runDeltaWorker), so the rules are checked end to end whichever
// shipped workers run them yet.
func TestDiLoCoTrainsWithProtocolWorkers(t *testing.T) {
	testenv.Long(t, "trains MNIST end to end")
	for _, c := range []struct{ name, spec string }{
		{"diloco", "mode: diloco\nlocal_steps: 16\nround_size: 2\neval_every: 200\n"},
		// Latest snapshots: a delta 16 steps long computed from a base one
		// version old costs async DiLoCo dearly. It took 6 to 9 epochs here
		// (diloco: 3), so it gets room beyond the default 10.
		{"async_diloco", "mode: diloco\nasync_diloco: true\nlocal_steps: 16\nround_size: 2\nsnapshot: latest\neval_every: 200\nmax_epochs: 20\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := newTestGrid(t, modeSpec(t, c.spec))
			for range 2 {
				g.wg.Add(1)
				go func() { defer g.wg.Done(); runDeltaWorker(g.ctx, g) }()
			}
			v := g.waitDone(4 * time.Minute)
			if v.State != "done" || v.Eval == nil || v.Eval.Accuracy < 0.97 {
				t.Fatalf("job ended %s (%s) with eval %+v, want done at >= 0.97", v.State, v.Reason, v.Eval)
			}
			if v.Rejections["invalid"] != 0 {
				t.Errorf("rejections %v", v.Rejections)
			}
			t.Logf("%s H=%d: accuracy %.4f at version %d, %d examples, %d results, rejections %v",
				c.name, v.Spec.LocalSteps, v.Eval.Accuracy, v.Eval.Version, v.ExamplesSeen, v.UpdatesApplied, v.Rejections)
		})
	}
}
