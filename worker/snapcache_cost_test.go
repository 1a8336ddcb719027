package worker

import (
	"testing"
	"time"
)

// The way to a new snapshot follows what each has cost: deltas while
// they are cheaper per byte of body (a slow link), full bodies while those
// are (loopback, where making and inflating a delta costs more than the
// bytes it saves), and now and then the other way, so that a link that
// changes is noticed: every probeEvery fetches while the two cost about
// the same, less often the dearer the other way is.
func TestFetchCostsChooseTheCheaperWay(t *testing.T) {
	var c fetchCosts
	const body = 400_000
	c.record(false, 2*time.Millisecond, body) // the first body comes whole
	if !c.preferDelta(DeltasAuto) {
		t.Fatal("no delta measured yet: the next fetch must try one")
	}
	c.record(true, 12*time.Millisecond, body) // a delta made and inflated on loopback
	var deltas int
	for range 2 * 6 * probeEvery {
		if c.preferDelta(DeltasAuto) {
			deltas++
		}
	}
	if deltas != 2 {
		t.Errorf("full bodies 6x cheaper: %d of %d fetches were deltas, want only the 2 probes (one in %d)", deltas, 2*6*probeEvery, 6*probeEvery)
	}
	for range 3 {
		if !c.preferDelta(DeltasAlways) {
			t.Fatal("DeltasAlways must always ask for a delta")
		}
	}

	// The link slows down: full bodies now take 60 ms, deltas 40 ms.
	for range 10 {
		c.record(false, 60*time.Millisecond, body)
	}
	c.record(true, 40*time.Millisecond, body)
	c.record(true, 40*time.Millisecond, body)
	c.record(true, 40*time.Millisecond, body)
	c.record(true, 40*time.Millisecond, body)
	if got := c.probeInterval(); got < probeEvery || got > 2*probeEvery {
		t.Fatalf("full bodies about 1.5x dearer: a probe every %d fetches, want %d to %d", got, probeEvery, 2*probeEvery)
	}
	c.sinceProbe = 0
	n := 2 * c.probeInterval()
	deltas = 0
	for range n {
		if c.preferDelta(DeltasAuto) {
			deltas++
		}
	}
	if deltas != n-2 {
		t.Errorf("deltas cheaper: %d of %d fetches were deltas, want all but the 2 probes", deltas, n)
	}
	c.record(true, time.Second, 0) // an empty body measures nothing
	if c.delta == 0 || c.delta > 0.001 {
		t.Errorf("delta cost %g s/byte after an empty body", c.delta)
	}

	// A way a thousand times dearer is still tried, every maxProbeEvery.
	c = fetchCosts{delta: 1000, full: 1}
	deltas = 0
	for range 2 * maxProbeEvery {
		if c.preferDelta(DeltasAuto) {
			deltas++
		}
	}
	if deltas != 2 {
		t.Errorf("deltas 1000x dearer: %d of %d fetches were deltas, want the 2 probes", deltas, 2*maxProbeEvery)
	}
}
