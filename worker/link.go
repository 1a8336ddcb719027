package worker

import (
	"strings"
	"sync"
	"time"

	"github.com/crowdtrain/crowdtrain/protocol"
)

// The worker's estimate of its link to the coordinator, from what it
// measures itself and never from what it is told about others: download
// throughput from its snapshot (and delta) GETs, upload throughput from
// each result frame's size over the time the coordinator took to receive
// it (the ack's recv_ms), and the round trip as the least of the last
// results' (ack arrival - send start - recv_ms). Each result carries the
// estimate, once there is one, and comm_ms: the lease's snapshot download
// time plus the previous result's upload. Nothing here allocates once the
// session runs: the browser worker's garbage collector is slow.

// minLinkSample is the least body or frame size that says anything about
// throughput: below it, latency and headers dominate.
const minLinkSample = 16 << 10

// rttWindow is how many results the round trip is the minimum over.
const rttWindow = 16

// maxInFlight is how many sent results the estimate remembers until their
// acks; more are simply not measured.
const maxInFlight = 8

// linkSmoothing is the weight of a new throughput sample.
const linkSmoothing = 0.3

// WorkerHeader names the worker on its bulk GETs, so the coordinator
// counts their bytes for it.
const WorkerHeader = "X-Crowdtrain-Worker"

type sentResult struct {
	lease uint64
	start time.Time
	bytes int
}

// linkEstimate is one session's measurements. Its methods may be called
// from the fetcher, the computing goroutine and the reader at once.
type linkEstimate struct {
	mu       sync.Mutex
	downBps  float64 // smoothed, 0 before the first sample
	upBps    float64
	rtts     [rttWindow]float64 // ms, a ring
	nRtt     int
	lastRecv float64 // ms: the previous acked result's upload
	inFlight [maxInFlight]sentResult
	next     int // the inFlight slot the next send takes
}

func smooth(old, v float64) float64 {
	if old == 0 {
		return v
	}
	return (1-linkSmoothing)*old + linkSmoothing*v
}

// isSnapshotURL reports whether a GET of u fetches a snapshot or a delta
// (not a shard): those count for the download estimate and comm_ms.
func isSnapshotURL(u string) bool { return strings.Contains(u, "/snapshots/") }

// downloaded records a snapshot or delta GET of n bytes that took d.
func (e *linkEstimate) downloaded(n int, d time.Duration) {
	if n < minLinkSample || d <= 0 {
		return
	}
	e.mu.Lock()
	e.downBps = smooth(e.downBps, float64(n)*8/d.Seconds())
	e.mu.Unlock()
}

// sending records that the result of lease, a frame of n bytes, starts
// going out at start.
func (e *linkEstimate) sending(lease uint64, n int, start time.Time) {
	e.mu.Lock()
	e.inFlight[e.next] = sentResult{lease: lease, start: start, bytes: n}
	e.next = (e.next + 1) % maxInFlight
	e.mu.Unlock()
}

// acked records the ack of lease's result, arrived at at, which says the
// coordinator took recvMs to receive its frame.
func (e *linkEstimate) acked(lease uint64, recvMs float64, at time.Time) {
	if !(recvMs >= 0) {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := range e.inFlight {
		sr := &e.inFlight[i]
		if sr.lease != lease || sr.start.IsZero() {
			continue
		}
		e.lastRecv = recvMs
		if sr.bytes >= minLinkSample && recvMs > 0 {
			e.upBps = smooth(e.upBps, float64(sr.bytes)*8/(recvMs/1000))
		}
		if rtt := float64(at.Sub(sr.start).Microseconds())/1000 - recvMs; rtt >= 0 {
			e.rtts[e.nRtt%rttWindow] = rtt
			e.nRtt++
		}
		*sr = sentResult{}
		return
	}
}

// fill sets res's comm_ms (snapMs, the lease's snapshot download, plus the
// previous result's upload) and, once every part of the estimate is
// measured, its link, written into out (no allocation).
func (e *linkEstimate) fill(res *protocol.Result, snapMs float64, out *protocol.Link) {
	e.mu.Lock()
	defer e.mu.Unlock()
	res.CommMs = snapMs + e.lastRecv
	res.Link = nil
	if e.downBps == 0 || e.upBps == 0 || e.nRtt == 0 {
		return
	}
	rtt := e.rtts[0]
	for _, v := range e.rtts[1:min(e.nRtt, rttWindow)] {
		rtt = min(rtt, v)
	}
	*out = protocol.Link{DownBps: e.downBps, UpBps: e.upBps, RttMs: rtt}
	res.Link = out
}

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
