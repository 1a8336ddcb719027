package coordinator_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/worker"
)

const ingestClients = 8

// BenchmarkIngest measures how many mnist-mlp-sized results per second the
// coordinator accepts from 8 concurrent websocket clients (decode,
// validate, apply with Adam, publish snapshots, ack), next to the rate at
// which the same websocket stack moves the same message size with no
// coordinator behind it. The ratio is the coordinator's overhead.
func BenchmarkIngest(b *testing.B) {
	b.Run("coordinator", func(b *testing.B) { benchCoordinatorIngest(b, jobspec.SnapshotLatest) })
	b.Run("coordinator-granted", func(b *testing.B) { benchCoordinatorIngest(b, jobspec.SnapshotGranted) })
	b.Run("raw-websocket", benchRawWebsocket)
}

// benchCoordinatorIngest runs the ingest benchmark under a snapshot
// policy; under latest each lease costs a start/started exchange too.
func benchCoordinatorIngest(b *testing.B, snapshot string) {
	g := newTestGrid(b, jobSpec(b, "mnist-mlp", func(s *jobspec.Spec) {
		s.Snapshot = snapshot
		s.TargetAccuracy = 1
		s.EvalEvery = 1 << 30
		s.MaxEpochs = 1 << 20
		s.MaxStaleness = 1 << 20 // measure throughput, not rejections
	}))
	clients := make([]*rawClient, ingestClients)
	for i := range clients {
		clients[i] = g.joinRaw()
	}
	n := clients[0].welcome.Job.NumParams
	update := make(protocol.Floats, n)
	for i := range update {
		update[i] = 1e-3
	}
	b.SetBytes(int64(4 * n))
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	rejected := 0
	for i, rc := range clients {
		count := share(b.N, ingestClients, i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each result its own update: the same one again would be
			// refused as a replay. Each frame is encoded into the
			// client's one buffer, as a worker does (worker.go's
			// sendBuf); the raw side sends one frame built beforehand.
			update := slices.Clone(update)
			var buf []byte
			for k := range count {
				l, ok := rc.leaseWaiting()
				if !ok {
					return
				}
				rc.start(&l) // under latest: the start/started exchange
				update[0] = 1e-3 + float32(k*ingestClients+i)*1e-9
				frame, err := protocol.AppendEncode(buf, &protocol.Result{LeaseID: l.ID, JobID: l.JobID, BaseVersion: l.BaseVersion,
					Codec: protocol.CodecF32, Update: update, Examples: l.Count, LossSum: 1})
				if err == nil {
					buf = frame
					err = rc.sendBytes(frame)
				}
				var m protocol.Message
				for err == nil {
					if m, err = rc.readErr(); err == nil {
						if _, ok := m.(*protocol.Ack); ok {
							break
						}
					}
				}
				if err != nil {
					b.Error(err)
					return
				}
				if !m.(*protocol.Ack).Accepted {
					mu.Lock()
					rejected++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if rejected > 0 {
		b.Fatalf("%d results rejected", rejected)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "updates/s")
}

// share is client i's part of total messages split over n clients.
func share(total, n, i int) int {
	if i < total%n {
		return total/n + 1
	}
	return total / n
}

// leaseWaiting asks for one lease, waiting out idle answers (the end of an
// epoch, while the last leases are still out). Safe in a goroutine: it
// reports errors instead of stopping the test.
func (rc *rawClient) leaseWaiting() (protocol.Lease, bool) {
	for {
		b, _ := protocol.Encode(&protocol.Want{N: 1})
		if err := rc.sendBytes(b); err != nil {
			rc.t.Error(err)
			return protocol.Lease{}, false
		}
		m, err := rc.readErr()
		if err != nil {
			rc.t.Error(err)
			return protocol.Lease{}, false
		}
		switch m := m.(type) {
		case *protocol.Lease:
			return *m, true
		case *protocol.Idle:
			time.Sleep(time.Millisecond)
		}
	}
}

func benchRawWebsocket(b *testing.B) {
	spec := jobSpec(b, "mnist-mlp", nil)
	frame, err := protocol.Encode(&protocol.Result{LeaseID: 1, JobID: "j", Codec: protocol.CodecF32,
		Update: make(protocol.Floats, modelParams(b, spec)), Examples: 64})
	if err != nil {
		b.Fatal(err)
	}
	ack := []byte("ack")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(int64(len(frame)) + 1024)
		for {
			if _, _, err := c.Read(r.Context()); err != nil {
				return
			}
			if err := c.Write(r.Context(), websocket.MessageBinary, ack); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	url := "ws" + strings.TrimPrefix(srv.URL, "http")
	conns := make([]*websocket.Conn, ingestClients)
	for i := range conns {
		c, _, err := websocket.Dial(context.Background(), url, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer c.CloseNow()
		conns[i] = c
	}
	b.SetBytes(int64(len(frame)))
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for i, c := range conns {
		count := share(b.N, ingestClients, i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for range count {
				if err := c.Write(ctx, websocket.MessageBinary, frame); err != nil {
					b.Error(err)
					return
				}
				if _, _, err := c.Read(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "messages/s")
}

// BenchmarkTimeTo97 is the wall time for two local native workers to train
// mnist-mlp to 97% test accuracy, with the default snapshot policy
// (latest), with latest and workers that start the next lease while one
// computes (worker.Config.StartAhead), with latest and fp16 on the wire
// both ways (update_codec and snapshot_codec), and with snapshot: granted
// (the policy before latest became the default). Run it with
// -benchtime 1x.
func BenchmarkTimeTo97(b *testing.B) {
	for _, c := range []struct {
		name, snapshot string
		ahead          bool
		codec          string // update and snapshot codec ("": the preset's)
	}{
		{jobspec.SnapshotLatest, jobspec.SnapshotLatest, false, ""},
		{"latest-ahead", jobspec.SnapshotLatest, true, ""},
		{"latest-fp16", jobspec.SnapshotLatest, false, jobspec.CodecFP16},
		{jobspec.SnapshotGranted, jobspec.SnapshotGranted, false, ""},
	} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				g := newTestGrid(b, jobSpec(b, "mnist-mlp", func(s *jobspec.Spec) {
					s.Snapshot = c.snapshot
					if c.codec != "" {
						s.UpdateCodec, s.SnapshotCodec = c.codec, c.codec
					}
				}))
				start := time.Now()
				for range 2 {
					g.addWorkerWith(1, nil, func(cfg *worker.Config) { cfg.StartAhead = c.ahead })
				}
				// The workers' utilisation while they train (a finished
				// job has no workers computing for it): the last reading,
				// and the mean of the readings every 100 ms, steadier.
				var util, utilSum float64
				utilN := 0
				v := g.waitFor("the job to finish", 10*time.Minute, func(v coordinator.JobView) bool {
					if v.WorkerUtilisation > 0 {
						util = v.WorkerUtilisation
						utilSum += util
						utilN++
					}
					return v.State != coordinator.StateRunning && v.State != coordinator.StateFinishing
				})
				elapsed := time.Since(start)
				if v.State != coordinator.StateDone || v.Eval == nil || v.Eval.Accuracy < 0.97 {
					b.Fatalf("job ended %s: %s", v.State, v.Reason)
				}
				b.ReportMetric(elapsed.Seconds(), "s-to-97%")
				b.ReportMetric(float64(v.ExamplesSeen), "examples")
				b.ReportMetric(v.MeanStaleness, "mean-staleness")
				b.ReportMetric(util, "utilisation")
				b.ReportMetric(utilSum/float64(max(1, utilN)), "utilisation-mean")
				// How the workers fetched their snapshots: the share that came
				// as deltas (worker.DeltasAuto measures which way is cheaper).
				deltas, fulls := 0, 0
				for _, w := range g.workers {
					d, f := w.SnapshotDownloads()
					deltas, fulls = deltas+d, fulls+f
				}
				b.ReportMetric(float64(deltas)/float64(max(1, deltas+fulls)), "delta-share")
				g.close()
			}
		})
	}
}
