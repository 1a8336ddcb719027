package coordinator

import (
	"container/list"
	"sync"
)

// The snapshot cache (docs/DEPLOY.md, "Memory for large models"): each
// job's published snapshots (their f32 and, in an f16 job, f16 bodies) and
// the deltas made between them, held within one byte bound for the whole
// process (snapPool), which every job of a Server shares: the operator sizes
// one number against the machine's memory, and a sweep of many trials
// shares it rather than multiplying it. What a job's cache holds serves its
// full snapshot URLs, its f16 URLs and its deltas' bases; whatever passes
// the bound goes oldest first, whichever job it is of, except each job's
// current version, which always stays (so the bound may be exceeded by the
// jobs' current versions alone). A worker that asks for a version that went
// is served the current one instead (rebase.go).

// DefaultSnapshotCacheBytes is the process's snapshot cache unless
// Config.SnapshotCacheBytes says: room for gpt-small (12.3M parameters, 49
// MB as f32) to keep its current version and nine older ones (six in an
// f16 job, whose versions cost 74 MB each), enough for the leases of a few
// versions' staleness and the deltas workers ask for, with room to share.
// A model the size of mnist-mlp (0.9 MB a version) keeps hundreds.
const DefaultSnapshotCacheBytes = 512 << 20

// snapPool is the bound the snapshot caches of one Server share, and the
// mutex that guards them all: its operations are map and list updates
// (deltas are made outside it), so one lock costs nothing worth a finer
// one, and eviction can take any job's oldest entry without lock order.
type snapPool struct {
	mu sync.Mutex
	// limit is the bound in bytes (0: DefaultSnapshotCacheBytes).
	limit int64
	bytes int64
	// age orders what every job's cache keeps, oldest first: *snapshot
	// and *deltaEntry (a delta enters once made).
	age list.List
}

func (p *snapPool) limitBytes() int64 {
	if p.limit > 0 {
		return p.limit
	}
	return DefaultSnapshotCacheBytes
}

// evict drops the oldest entries until the bound holds or only the jobs'
// current versions are left. The caller holds mu.
func (p *snapPool) evict() {
	limit := p.limitBytes()
	for e := p.age.Front(); e != nil && p.bytes > limit; {
		next := e.Next()
		if s, ok := e.Value.(*snapshot); !ok || s.version != s.owner.current {
			p.drop(e, true)
		}
		e = next
	}
}

// drop removes one entry from the pool and its job's cache. The caller
// holds mu.
func (p *snapPool) drop(e *list.Element, evicted bool) {
	var c *snapCache
	var n int64
	switch v := p.age.Remove(e).(type) {
	case *snapshot:
		c, n = v.owner, v.cost
		delete(c.versions, v.version)
	case *deltaEntry:
		c, n = v.owner, int64(len(v.body))
		delete(c.deltas, v.key)
	}
	p.bytes -= n
	c.bytes -= n
	if evicted {
		c.evictions++
	}
}

// snapCache is one job's snapshots and deltas, in its Server's pool (or,
// for a job no Server started, a pool of its own).
type snapCache struct {
	pool      *snapPool
	bytes     int64 // this job's share of the pool
	evictions int64 // this job's snapshots and deltas dropped for the bound
	// current is the newest published version, never evicted.
	current  int64
	versions map[int64]*snapshot
	deltas   map[deltaKey]*deltaEntry
	made     int // deltas encoded (tests)
	// freeMade counts, per client address and target version, the new
	// deltas made for it free of its download budget (freeDeltas).
	freeMade map[freeDeltaKey]int
}

// lock locks the cache's pool, making a pool of its own first if it has
// none, and returns it.
func (c *snapCache) lock() *snapPool {
	if c.pool == nil {
		c.pool = &snapPool{}
	}
	c.pool.mu.Lock()
	return c.pool
}

// SnapshotCacheView is what the API and /metrics say of a job's snapshot
// cache: the bytes it holds, the process's bound they share with the other
// jobs' (PoolBytes: all jobs' together), the snapshots and deltas of this
// job evicted for the bound, the versions and deltas it holds, the
// requests for an evicted version served the current one (rebase.go), and
// the results computed from such a version that named it.
type SnapshotCacheView struct {
	Bytes          int64 `json:"bytes"`
	PoolBytes      int64 `json:"pool_bytes"`
	Limit          int64 `json:"limit"`
	Evictions      int64 `json:"evictions"`
	Versions       int   `json:"versions"`
	Deltas         int   `json:"deltas"`
	Rebased        int64 `json:"rebased"`
	RebasedResults int64 `json:"rebased_results"`
}

// snapshotCacheView reads the cache; the rebase counts are the loop's.
func (j *Job) snapshotCacheView(rebased, rebasedResults int64) SnapshotCacheView {
	c := &j.snaps
	p := c.lock()
	defer p.mu.Unlock()
	return SnapshotCacheView{Bytes: c.bytes, PoolBytes: p.bytes, Limit: p.limitBytes(), Evictions: c.evictions,
		Versions: len(c.versions), Deltas: len(c.deltas), Rebased: rebased, RebasedResults: rebasedResults}
}

// setLimit changes the pool's bound and evicts down to it.
func (c *snapCache) setLimit(n int64) {
	p := c.lock()
	defer p.mu.Unlock()
	p.limit = n
	p.evict()
}

// publish adds s, which costs cost bytes, as the current version.
func (c *snapCache) publish(s *snapshot, cost int64) {
	p := c.lock()
	defer p.mu.Unlock()
	if c.versions == nil {
		c.versions = map[int64]*snapshot{}
	}
	if old := c.versions[s.version]; old != nil {
		p.drop(old.elem, false)
	}
	s.owner, s.cost = c, cost
	c.versions[s.version] = s
	c.current = s.version
	s.elem = p.age.PushBack(s)
	c.bytes += cost
	p.bytes += cost
	p.evict()
}

// snapshot is the kept snapshot of version, or nil.
func (c *snapCache) snapshot(version int64) *snapshot {
	p := c.lock()
	defer p.mu.Unlock()
	return c.versions[version]
}

// newest is the current version's snapshot (nil before the first).
func (c *snapCache) newest() *snapshot {
	p := c.lock()
	defer p.mu.Unlock()
	return c.versions[c.current]
}

// takeFree counts a new delta to version to made free for client, and
// reports whether it was still within freeDeltas.
func (c *snapCache) takeFree(client string, to int64) bool {
	p := c.lock()
	defer p.mu.Unlock()
	if c.freeMade == nil || len(c.freeMade) > maxFreeDeltaKeys {
		c.freeMade = map[freeDeltaKey]int{}
	}
	k := freeDeltaKey{client, to}
	c.freeMade[k]++
	return c.freeMade[k] <= freeDeltas
}

// hasDelta reports whether the delta k is made or being made.
func (c *snapCache) hasDelta(k deltaKey) bool {
	p := c.lock()
	defer p.mu.Unlock()
	return c.deltas[k] != nil
}

// delta is the delta k, made by build once: concurrent requests for it
// wait for the first. It is kept within the bound, as the newest entry.
func (c *snapCache) delta(k deltaKey, build func() ([]byte, error)) ([]byte, error) {
	p := c.lock()
	if c.deltas == nil {
		c.deltas = map[deltaKey]*deltaEntry{}
	}
	if e := c.deltas[k]; e != nil {
		p.mu.Unlock()
		<-e.done
		return e.body, e.err
	}
	e := &deltaEntry{key: k, owner: c, done: make(chan struct{})}
	c.deltas[k] = e
	c.made++
	p.mu.Unlock()

	e.body, e.err = build()
	close(e.done)

	p.mu.Lock()
	defer p.mu.Unlock()
	if e.err != nil || int64(len(e.body)) > p.limitBytes() {
		delete(c.deltas, k) // not kept: the next request tries again
		return e.body, e.err
	}
	e.elem = p.age.PushBack(e)
	c.bytes += int64(len(e.body))
	p.bytes += int64(len(e.body))
	p.evict()
	return e.body, nil
}
