package coordinator

import (
	"sync"
	"time"
)

// startGrants lets the snapshot handlers see, without a round trip
// through the job's loop, that a worker holds a lease on a version: the
// loop notes each lease it starts (a "latest" lease's base is fixed then)
// and drops it when its result arrives, its worker gives it back or
// leaves. The worker downloads that snapshot right after started; asking
// the loop instead made the download wait behind the results it was
// applying. A grant not dropped otherwise (the lease expired, or a relay
// settled it) lapses at the lease's deadline. Anything not found here is
// asked of the loop as before (Server.leaseHeldFrom).
type startGrants struct {
	mu       sync.Mutex
	byWorker map[string]map[uint64]startGrant // worker → lease id → grant
	n        int                              // grants held
	// pruneAt is the count at which note drops the lapsed grants.
	pruneAt int
}

type startGrant struct {
	version int64
	until   time.Time
}

// minPrune is the fewest grants at which note looks for lapsed ones.
const minPrune = 64

// note records that worker's lease id computes from version until its
// deadline.
func (g *startGrants) note(id uint64, worker string, version int64, until time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.byWorker == nil {
		g.byWorker = map[string]map[uint64]startGrant{}
	}
	leases := g.byWorker[worker]
	if leases == nil {
		leases = map[uint64]startGrant{}
		g.byWorker[worker] = leases
	}
	if _, ok := leases[id]; !ok {
		g.n++
	}
	leases[id] = startGrant{version: version, until: until}
	if g.n >= max(minPrune, g.pruneAt) {
		g.prune(time.Now())
		g.pruneAt = 2 * g.n
	}
}

// prune drops the grants lapsed at now. The caller holds mu.
func (g *startGrants) prune(now time.Time) {
	for w, leases := range g.byWorker {
		for id, s := range leases {
			if now.After(s.until) {
				delete(leases, id)
				g.n--
			}
		}
		if len(leases) == 0 {
			delete(g.byWorker, w)
		}
	}
}

// drop forgets worker's lease id (its result arrived, or it was given
// back).
func (g *startGrants) drop(worker string, id uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if leases := g.byWorker[worker]; leases != nil {
		if _, ok := leases[id]; ok {
			delete(leases, id)
			g.n--
		}
		if len(leases) == 0 {
			delete(g.byWorker, worker)
		}
	}
}

// forget drops every grant of worker (it left).
func (g *startGrants) forget(worker string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n -= len(g.byWorker[worker])
	delete(g.byWorker, worker)
}

// holds reports whether one of workers holds a started lease on version
// at now.
func (g *startGrants) holds(workers map[string]bool, version int64, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for w := range workers {
		for _, s := range g.byWorker[w] {
			if s.version == version && !now.After(s.until) {
				return true
			}
		}
	}
	return false
}
