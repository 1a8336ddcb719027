package worker

import (
	"math"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/protocol"
)

// The estimate comes from what the worker measured: downloads of 16 KiB
// or more, result frames of 16 KiB or more over the ack's recv_ms, and the
// least round trip of the last 16 results. No result carries a link until
// all three are measured; every result carries comm_ms.
func TestLinkEstimateFromMeasurements(t *testing.T) {
	var e linkEstimate
	var res protocol.Result
	var out protocol.Link
	e.fill(&res, 12, &out)
	if res.Link != nil || res.CommMs != 12 {
		t.Fatalf("before any measurement: link %v, comm_ms %v; want none, 12", res.Link, res.CommMs)
	}
	e.downloaded(1000, time.Millisecond) // tiny: says nothing
	if e.downBps != 0 {
		t.Fatalf("a 1000-byte body set down_bps %v", e.downBps)
	}
	e.downloaded(1<<20, time.Second) // 1 MiB in 1 s: 8388608 bit/s
	if want := float64(8 << 20); e.downBps != want {
		t.Fatalf("down_bps %v, want %v", e.downBps, want)
	}

	t0 := time.Unix(1000, 0)
	// A 1 MB result that took the coordinator 800 ms to receive, acked
	// 900 ms after it started going out: up 10 Mbit/s, round trip 100 ms.
	e.sending(7, 1_000_000, t0)
	e.sending(8, 100, t0) // tiny: no throughput sample
	e.acked(7, 800, t0.Add(900*time.Millisecond))
	e.acked(8, 0.1, t0.Add(40*time.Millisecond))
	e.acked(99, 5, t0) // never sent: ignored
	if e.upBps != 1e7 {
		t.Fatalf("up_bps %v, want 1e7", e.upBps)
	}
	e.fill(&res, 30, &out)
	if res.Link == nil {
		t.Fatal("no link once everything is measured")
	}
	if l := *res.Link; math.Abs(l.RttMs-39.9) > 1e-9 || l.UpBps != 1e7 || l.DownBps != float64(8<<20) {
		t.Fatalf("link %+v, want rtt 39.9 ms (the least), up 1e7, down %v", l, float64(8<<20))
	}
	if res.CommMs != 30+0.1 {
		t.Fatalf("comm_ms %v, want the snapshot's 30 + the last upload's 0.1", res.CommMs)
	}
	// The minimum is over the last 16: an old low round trip ages out.
	for i := range rttWindow {
		e.sending(uint64(100+i), 10, t0)
		e.acked(uint64(100+i), 0, t0.Add(70*time.Millisecond))
	}
	e.fill(&res, 0, &out)
	if res.Link.RttMs != 70 {
		t.Fatalf("rtt_ms %v after 16 results of 70 ms, want 70", res.Link.RttMs)
	}
	// Smoothed, not replaced.
	e.sending(200, 1_000_000, t0)
	e.acked(200, 400, t0.Add(500*time.Millisecond))
	if e.upBps <= 1e7 || e.upBps >= 2e7 {
		t.Fatalf("up_bps %v after a 20 Mbit/s sample on 10: want between", e.upBps)
	}
}

// The browser's garbage collector is slow: measuring and reporting cost
// no allocation.
func TestLinkEstimateAllocatesNothing(t *testing.T) {
	var e linkEstimate
	var res protocol.Result
	var out protocol.Link
	e.downloaded(1<<20, time.Second)
	t0 := time.Now()
	n := uint64(0)
	allocs := testing.AllocsPerRun(100, func() {
		n++
		e.downloaded(1<<20, time.Second)
		e.sending(n, 1<<20, t0)
		e.acked(n, 100, t0.Add(150*time.Millisecond))
		e.fill(&res, 5, &out)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per result", allocs)
	}
	if res.Link != &out {
		t.Fatal("the result does not point at the session's link")
	}
}
