package worker

import (
	"testing"
	"time"
)

// The way to a new snapshot follows what each has cost: deltas while
// they are cheaper per byte of body (a slow link), full bodies while those
// are (loopback, where making and inflating a delta costs more than the
// bytes it saves), and every probeEvery-th fetch the other way, so that a
// link that changes is noticed.
func TestFetchCostsChooseTheCheaperWay(t *testing.T) {
	var c fetchCosts
	const body = 400_000
	c.record(false, 2*time.Millisecond, body) // the first body comes whole
	if !c.preferDelta(DeltasAuto) {
		t.Fatal("no delta measured yet: the next fetch must try one")
	}
	c.record(true, 12*time.Millisecond, body) // a delta made and inflated on loopback
	var deltas int
	for range 2 * probeEvery {
		if c.preferDelta(DeltasAuto) {
			deltas++
		}
	}
	if deltas != 2 {
		t.Errorf("full bodies 6x cheaper: %d of %d fetches were deltas, want only the 2 probes", deltas, 2*probeEvery)
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
	deltas = 0
	for range 2 * probeEvery {
		if c.preferDelta(DeltasAuto) {
			deltas++
		}
	}
	if deltas != 2*probeEvery-2 {
		t.Errorf("deltas cheaper: %d of %d fetches were deltas, want all but the 2 probes", deltas, 2*probeEvery)
	}
	c.record(true, time.Second, 0) // an empty body measures nothing
	if c.delta == 0 || c.delta > 0.001 {
		t.Errorf("delta cost %g s/byte after an empty body", c.delta)
	}
}
