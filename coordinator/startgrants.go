package coordinator

import (
	"sync"
	"time"
)

// startGrants lets the snapshot handlers see, without a round trip
// through the job's loop, that a worker holds a lease on a version: the
// loop notes each lease it starts (a "latest" lease's base is fixed then)
// and drops it when its result arrives or its worker leaves. The worker
// downloads that snapshot right after started; asking the loop instead
// made the download wait behind the results it was applying. A grant not
// dropped otherwise (the lease expired or was given back) lapses at the
// lease's deadline. Anything not found here is asked of the loop as
// before (Server.leaseHeldFrom).
type startGrants struct {
	mu     sync.Mutex
	leases map[uint64]startGrant // by lease id
	// pruneAt is the size at which note drops the lapsed grants.
	pruneAt int
}

type startGrant struct {
	worker  string
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
	if g.leases == nil {
		g.leases = map[uint64]startGrant{}
	}
	g.leases[id] = startGrant{worker: worker, version: version, until: until}
	if len(g.leases) >= max(minPrune, g.pruneAt) {
		now := time.Now()
		for id, s := range g.leases {
			if now.After(s.until) {
				delete(g.leases, id)
			}
		}
		g.pruneAt = 2 * len(g.leases)
	}
}

// drop forgets lease id (its result arrived).
func (g *startGrants) drop(id uint64) {
	g.mu.Lock()
	delete(g.leases, id)
	g.mu.Unlock()
}

// forget drops every grant of worker (it left).
func (g *startGrants) forget(worker string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for id, s := range g.leases {
		if s.worker == worker {
			delete(g.leases, id)
		}
	}
}

// holds reports whether one of workers holds a started lease on version
// at now.
func (g *startGrants) holds(workers map[string]bool, version int64, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, s := range g.leases {
		if s.version == version && workers[s.worker] && !now.After(s.until) {
			return true
		}
	}
	return false
}
