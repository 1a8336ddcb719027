package coordinator

import (
	"fmt"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/crowdtrain/crowdtrain/protocol"
)

// What goes over the wire, counted per worker and per job: the bytes each
// way, each worker's own estimate of its link, its H and the share of its
// time it spends communicating (docs/API.md).

// WorkerHeader names the worker a bulk GET (a snapshot, a delta, a shard)
// is for: its bytes count for that worker when it is connected from the
// request's client address.
const WorkerHeader = "X-Crowdtrain-Worker"

// Bounds a worker's link estimate is clamped to: anything outside is not
// a link (zero, negative, enormous), and is logged once per worker.
const (
	minLinkBps   = 1e3
	maxLinkBps   = 1e11
	maxLinkRttMs = 60000
)

// LinkView is a worker's estimate of its link, as it reported it (clamped):
// down_bps and up_bps in bits per second, rtt_ms in milliseconds. All zero:
// no estimate yet.
type LinkView struct {
	DownBps float64 `json:"down_bps"`
	UpBps   float64 `json:"up_bps"`
	RttMs   float64 `json:"rtt_ms"`
}

// workerWire is one connection's counters.
type workerWire struct {
	bytesIn    atomic.Int64 // every websocket frame read from it
	bytesOut   atomic.Int64 // frames queued for it, and bulk bytes served to it
	localSteps atomic.Int64 // H of its last lease

	mu       sync.Mutex // guards the rest
	link     LinkView
	commFrac float64 // smoothed comm_ms/(comm_ms+compute_ms)
	commSeen bool    // commFrac holds a result's
	clamped  bool    // a clamp has been logged for this worker
	util     utilisation
}

// utilisation is the share of a worker's wall time spent computing: the
// compute_ms its results report over the time between their arrivals,
// both smoothed alike. Where it is low the worker waits (for a lease, a
// snapshot, the coordinator), which is the grid's overhead, not its
// speed.
type utilisation struct {
	last             time.Time // the previous result's arrival
	compute, elapsed float64   // smoothed milliseconds
}

// utilDecay is the weight the older results keep at each new one.
const utilDecay = 0.9

// observe adds a result of computeMs that arrived at now.
func (u *utilisation) observe(now time.Time, computeMs float64) {
	if !u.last.IsZero() {
		dt := float64(now.Sub(u.last)) / float64(time.Millisecond)
		if dt > 0 {
			u.compute = utilDecay*u.compute + (1-utilDecay)*computeMs
			u.elapsed = utilDecay*u.elapsed + (1-utilDecay)*dt
		}
	}
	u.last = now
}

// share is the utilisation in [0, 1], and false before two results.
func (u *utilisation) share() (float64, bool) {
	if u.elapsed <= 0 {
		return 0, false
	}
	return min(1, u.compute/u.elapsed), true
}

// jobWire is one job's counters; HTTP handlers and connections add to them
// without going through the job's loop.
type jobWire struct {
	bytesIn       atomic.Int64 // result frames received
	bytesOut      atomic.Int64 // snapshot and delta bodies served
	shardBytesOut atomic.Int64 // shard bodies served
	// fp32Bytes is what the results and snapshots counted in
	// actualBytes would have taken as fp32 (4 bytes a parameter each);
	// resultFP32 and resultActual are the results' part of each, so the
	// compression of updates and of snapshots show apart: an fp32 job's
	// deltas and fp16 snapshots must not read as compressed updates.
	fp32Bytes, actualBytes   atomic.Int64
	resultFP32, resultActual atomic.Int64
	// An RL job's rollout result frames (in bytesIn too, not in the
	// compression: they are completions, not updates), since this
	// coordinator started the job.
	rolloutBytes, rolloutResults atomic.Int64
}

// served is what serveImmutable serves, for the counters.
type served int

const (
	servedSnapshot served = iota // a full snapshot, any codec
	servedDelta                  // a delta between two snapshots
	servedShard                  // a data shard
)

// result counts a result frame of n bytes for the job.
func (jw *jobWire) result(n int, numParams int) {
	jw.bytesIn.Add(int64(n))
	jw.fp32Bytes.Add(4 * int64(numParams))
	jw.actualBytes.Add(int64(n))
	jw.resultFP32.Add(4 * int64(numParams))
	jw.resultActual.Add(int64(n))
}

// rollout counts a rollout result frame of n bytes for the job.
func (jw *jobWire) rollout(n int) {
	jw.bytesIn.Add(int64(n))
	jw.rolloutBytes.Add(int64(n))
	jw.rolloutResults.Add(1)
}

// snapshot counts a snapshot or delta body of n bytes served for the job.
func (jw *jobWire) snapshot(n int, numParams int) {
	jw.bytesOut.Add(int64(n))
	jw.fp32Bytes.Add(4 * int64(numParams))
	jw.actualBytes.Add(int64(n))
}

// wireView fills v's wire fields.
func (j *Job) wireView(v *JobView) {
	jw := &j.wire
	v.BytesIn, v.BytesOut, v.ShardBytesOut = jw.bytesIn.Load(), jw.bytesOut.Load(), jw.shardBytesOut.Load()
	if v.ExamplesSeen > 0 {
		v.BytesPerExample = float64(v.BytesIn+v.BytesOut) / float64(v.ExamplesSeen)
	}
	fp32, actual := jw.fp32Bytes.Load(), jw.actualBytes.Load()
	resFP32, resActual := jw.resultFP32.Load(), jw.resultActual.Load()
	v.Compression = ratio(fp32, actual)
	v.UpdateCompression = ratio(resFP32, resActual)
	v.SnapshotCompression = ratio(fp32-resFP32, actual-resActual)
}

// ratio is fp32/actual, or 0 when nothing was counted.
func ratio(fp32, actual int64) float64 {
	if actual <= 0 || fp32 <= 0 {
		return 0
	}
	return float64(fp32) / float64(actual)
}

// countServed counts n body bytes of kind served for j to the request's
// worker, if its header names one connected from the request's address.
func (s *Server) countServed(r *http.Request, j *Job, kind served, n int) {
	if j != nil {
		switch kind {
		case servedShard:
			j.wire.shardBytesOut.Add(int64(n))
		default:
			j.wire.snapshot(n, j.model.NumParams)
		}
	}
	id := r.Header.Get(WorkerHeader)
	if id == "" {
		return
	}
	s.mu.Lock()
	wc := s.workers[id]
	s.mu.Unlock()
	if wc != nil && wc.clientKey == s.clientKey(r) {
		wc.wire.bytesOut.Add(int64(n))
	}
}

// observeResult takes what a result says of its worker: its backend when
// it changed (a kernel chosen after the hello), its link estimate,
// clamped (and the clamp logged once for the worker), and its share of
// time communicating.
func (s *Server) observeResult(wc *workerConn, res *protocol.Result) {
	if name := res.Backend; name != "" {
		if prev := wc.backendName(); name != prev {
			wc.backend.Store(&name)
			if !wc.backendSeen.Swap(true) {
				s.cfg.Logf("worker %s: backend now %q, was %q (the first change is logged, once per connection)", wc.id, name, prev)
			}
		}
	}
	w := &wc.wire
	w.mu.Lock()
	defer w.mu.Unlock()
	if l := res.Link; l != nil {
		got := LinkView{DownBps: l.DownBps, UpBps: l.UpBps, RttMs: l.RttMs}
		c := LinkView{
			DownBps: clampFloat(got.DownBps, minLinkBps, maxLinkBps),
			UpBps:   clampFloat(got.UpBps, minLinkBps, maxLinkBps),
			RttMs:   clampFloat(got.RttMs, 0, maxLinkRttMs),
		}
		if c != got && !w.clamped {
			w.clamped = true
			s.cfg.Logger.Info(fmt.Sprintf("worker %s: link estimate clamped (logged once per worker): received down_bps %g, up_bps %g, rtt_ms %g; using %g, %g, %g (bps within [%g, %g], rtt_ms within [0, %d])",
				wc.id, got.DownBps, got.UpBps, got.RttMs, c.DownBps, c.UpBps, c.RttMs, float64(minLinkBps), float64(maxLinkBps), maxLinkRttMs), logWorker, wc.id)
		}
		w.link = c
	}
	comm, compute := res.CommMs, res.ComputeMs
	if compute >= 0 && !math.IsInf(compute, 0) {
		w.util.observe(time.Now(), compute)
	}
	if comm >= 0 && compute >= 0 && comm+compute > 0 && !math.IsInf(comm+compute, 0) {
		f := comm / (comm + compute)
		if !w.commSeen {
			w.commFrac, w.commSeen = f, true
		} else {
			w.commFrac = 0.5*w.commFrac + 0.5*f
		}
	}
}

// clampFloat is v within [lo, hi]; NaN becomes lo.
func clampFloat(v, lo, hi float64) float64 {
	if !(v >= lo) {
		return lo
	}
	return min(v, hi)
}

// view fills v's wire fields.
func (w *workerWire) view(v *WorkerView) {
	v.BytesIn, v.BytesOut, v.LocalSteps = w.bytesIn.Load(), w.bytesOut.Load(), int(w.localSteps.Load())
	w.mu.Lock()
	v.Link = w.link
	v.CommFraction = w.commFrac
	v.Utilisation, _ = w.util.share()
	w.mu.Unlock()
}

// wireProgress is a job's wire counters in a checkpoint.
type wireProgress struct {
	BytesIn       int64 `json:"bytes_in"`
	BytesOut      int64 `json:"bytes_out"`
	ShardBytesOut int64 `json:"shard_bytes_out"`
	FP32Bytes     int64 `json:"fp32_bytes"`
	ActualBytes   int64 `json:"actual_bytes"`
	// The results' part of the two above; absent from older checkpoints.
	ResultFP32Bytes   int64 `json:"result_fp32_bytes,omitempty"`
	ResultActualBytes int64 `json:"result_actual_bytes,omitempty"`
}

func (jw *jobWire) progress() *wireProgress {
	return &wireProgress{
		BytesIn: jw.bytesIn.Load(), BytesOut: jw.bytesOut.Load(), ShardBytesOut: jw.shardBytesOut.Load(),
		FP32Bytes: jw.fp32Bytes.Load(), ActualBytes: jw.actualBytes.Load(),
		ResultFP32Bytes: jw.resultFP32.Load(), ResultActualBytes: jw.resultActual.Load(),
	}
}

// restore sets the counters from a checkpoint's (nil: an older checkpoint,
// which kept none: they stay as they are).
func (jw *jobWire) restore(p *wireProgress) {
	if p == nil {
		return
	}
	jw.bytesIn.Store(p.BytesIn)
	jw.bytesOut.Store(p.BytesOut)
	jw.shardBytesOut.Store(p.ShardBytesOut)
	jw.fp32Bytes.Store(p.FP32Bytes)
	jw.actualBytes.Store(p.ActualBytes)
	jw.resultFP32.Store(p.ResultFP32Bytes)
	jw.resultActual.Store(p.ResultActualBytes)
}
