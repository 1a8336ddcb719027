package engine

import (
	"hash/maphash"
	"slices"
	"unsafe"
)

// A replay resends an update that was already accepted, under a lease of
// its own: free credit, and the update counted twice. Each job remembers
// the hashes of its last ReplayWindowSize accepted updates and refuses a
// result whose update is bit-identical to one of them ("duplicate"; the
// lease is queued again).
//
// A window suffices: an update older than the window was computed from a
// model at least that many accepted results behind. Replayed now, it is
// a stale update like any forged one, which the robust rule bounds; and
// its credit is what spot checks take back (a replay does not match the
// task it claims to answer). The window catches the replays that are
// cheap and recent, in 32 KiB per job.
//
// An all-zero update is never a duplicate: honest workers send it again
// and again when the model has nothing more to learn from their data (a
// saturated or dead network), and queueing their tasks again would stall
// the epoch for good. Replayed, it changes no parameter; the credit it
// claims is the spot checks' to weigh.
const ReplayWindowSize = 4096

// replaySeed keys the hashes: a worker cannot make an honest update's hash
// collide with one it sends without knowing it.
var replaySeed = maphash.MakeSeed()

// UpdateHash hashes an update's bytes, never to 0; an all-zero (or
// empty) update hashes to 0, which is never looked up. The connection's
// goroutine computes it, off the job's loop.
func UpdateHash(u []float32) uint64 {
	if !slices.ContainsFunc(u, func(v float32) bool { return v != 0 }) {
		return 0
	}
	return hashNonZero(u)
}

// UpdateHashNorm is UpdateHash of u, whose L2 norm is norm: a norm of 0
// says it is all zeros without another pass over it.
func UpdateHashNorm(u []float32, norm float64) uint64 {
	if norm == 0 || len(u) == 0 {
		return 0
	}
	return hashNonZero(u)
}

// hashNonZero hashes the bytes of u, not all zeros, never to 0.
func hashNonZero(u []float32) uint64 {
	return maphash.Bytes(replaySeed, unsafe.Slice((*byte)(unsafe.Pointer(&u[0])), 4*len(u))) | 1
}

// ReplayWindow is a ring of the last accepted updates' hashes and a
// count of each (above). The zero value is empty and ready.
type ReplayWindow struct {
	ring  []uint64
	next  int
	count map[uint64]int
}

// Seen reports whether an update of hash h was accepted within the
// window.
func (w *ReplayWindow) Seen(h uint64) bool { return w.count[h] > 0 }

// Add notes an accepted update's hash h (not 0).
func (w *ReplayWindow) Add(h uint64) {
	if w.count == nil {
		w.ring, w.count = make([]uint64, 0, ReplayWindowSize), map[uint64]int{}
	}
	if len(w.ring) < ReplayWindowSize {
		w.ring = append(w.ring, h)
	} else {
		old := w.ring[w.next]
		if w.count[old]--; w.count[old] <= 0 {
			delete(w.count, old)
		}
		w.ring[w.next] = h
		w.next = (w.next + 1) % ReplayWindowSize
	}
	w.count[h]++
}

// ReplayChecked says whether a result for l is checked against the
// window: a spot check's copy is meant to be identical to its primary's
// result, and is compared, not applied; a backup's result stands in for
// its primary's.
func (l *Lease) ReplayChecked() bool { return !l.IsCopy() || l.Backup }
