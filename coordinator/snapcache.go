package coordinator

import (
	"container/list"
	"sync"
)

// The snapshot cache (docs/DEPLOY.md, "Memory"): a job's published
// snapshots (their f32 and, in an f16 job, f16 bodies) and the deltas made
// between them, held within one byte bound per job. What it holds serves
// the full snapshot URLs, the f16 URLs and the deltas' bases; whatever
// passes the bound goes oldest first, except the current version, which
// always stays (alone, it may exceed the bound). A worker that asks for a
// version that went is served the current one instead (rebase.go).

// DefaultSnapshotCacheBytes is a job's snapshot cache unless
// Config.SnapshotCacheBytes says: room for gpt-small (12.3M parameters,
// 49 MB as f32) to keep its current version and four older ones (three in
// an f16 job, whose versions cost 74 MB each), enough for the leases of a
// few versions' staleness and the deltas workers ask for. A model the size
// of mnist-mlp (0.4 MB) keeps hundreds of versions and never evicts.
const DefaultSnapshotCacheBytes = 256 << 20

// snapCache is one job's snapshots and deltas. Its own mutex guards it: the
// job's loop publishes into it and HTTP handlers read it.
type snapCache struct {
	mu sync.Mutex
	// limit is the bound in bytes (0: DefaultSnapshotCacheBytes).
	limit     int64
	bytes     int64
	evictions int64 // snapshots and deltas dropped for the bound
	// current is the newest published version, never evicted; -1 before
	// the first.
	current  int64
	versions map[int64]*snapshot
	deltas   map[deltaKey]*deltaEntry
	// age orders what is kept, oldest first: *snapshot and *deltaEntry
	// (a delta enters once made).
	age  list.List
	made int // deltas encoded (tests)
	// freeMade counts, per client address and target version, the new
	// deltas made for it free of its download budget (freeDeltas).
	freeMade map[freeDeltaKey]int
}

// SnapshotCacheView is what the API and /metrics say of a job's snapshot
// cache: the bytes it holds of its bound, the snapshots and deltas it has
// evicted for the bound, the versions and deltas it holds, and the
// requests for an evicted version served the current one (rebase.go) and
// the results computed from such a version that named it.
type SnapshotCacheView struct {
	Bytes          int64 `json:"bytes"`
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
	c.mu.Lock()
	defer c.mu.Unlock()
	return SnapshotCacheView{Bytes: c.bytes, Limit: c.limitBytes(), Evictions: c.evictions, Versions: len(c.versions),
		Deltas: len(c.deltas), Rebased: rebased, RebasedResults: rebasedResults}
}

func (c *snapCache) limitBytes() int64 {
	if c.limit > 0 {
		return c.limit
	}
	return DefaultSnapshotCacheBytes
}

// setLimit changes the bound and evicts down to it.
func (c *snapCache) setLimit(n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.limit = n
	c.evict()
}

// publish adds s, which costs cost bytes, as the current version.
func (c *snapCache) publish(s *snapshot, cost int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.versions == nil {
		c.versions = map[int64]*snapshot{}
	}
	if old := c.versions[s.version]; old != nil {
		c.drop(old.elem)
	}
	s.cost = cost
	c.versions[s.version] = s
	c.current = s.version
	s.elem = c.age.PushBack(s)
	c.bytes += cost
	c.evict()
}

// snapshot is the kept snapshot of version, or nil.
func (c *snapCache) snapshot(version int64) *snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.versions[version]
}

// newest is the current version's snapshot (nil before the first).
func (c *snapCache) newest() *snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.versions[c.current]
}

// evict drops the oldest entries until the bound holds or only the
// current version is left. The caller holds mu.
func (c *snapCache) evict() {
	limit := c.limitBytes()
	for e := c.age.Front(); e != nil && c.bytes > limit; {
		next := e.Next()
		if s, ok := e.Value.(*snapshot); !ok || s.version != c.current {
			c.drop(e)
			c.evictions++
		}
		e = next
	}
}

// drop removes one entry. The caller holds mu.
func (c *snapCache) drop(e *list.Element) {
	switch v := c.age.Remove(e).(type) {
	case *snapshot:
		c.bytes -= v.cost
		delete(c.versions, v.version)
	case *deltaEntry:
		c.bytes -= int64(len(v.body))
		delete(c.deltas, v.key)
	}
}

// takeFree counts a new delta to version to made free for client, and
// reports whether it was still within freeDeltas.
func (c *snapCache) takeFree(client string, to int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.freeMade == nil || len(c.freeMade) > maxFreeDeltaKeys {
		c.freeMade = map[freeDeltaKey]int{}
	}
	k := freeDeltaKey{client, to}
	c.freeMade[k]++
	return c.freeMade[k] <= freeDeltas
}

// hasDelta reports whether the delta k is made or being made.
func (c *snapCache) hasDelta(k deltaKey) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deltas[k] != nil
}

// delta is the delta k, made by build once: concurrent requests for it
// wait for the first. It is kept within the bound, as the newest entry.
func (c *snapCache) delta(k deltaKey, build func() ([]byte, error)) ([]byte, error) {
	c.mu.Lock()
	if c.deltas == nil {
		c.deltas = map[deltaKey]*deltaEntry{}
	}
	if e := c.deltas[k]; e != nil {
		c.mu.Unlock()
		<-e.done
		return e.body, e.err
	}
	e := &deltaEntry{key: k, done: make(chan struct{})}
	c.deltas[k] = e
	c.made++
	c.mu.Unlock()

	e.body, e.err = build()
	close(e.done)

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.deltas[k] != e {
		return e.body, e.err // dropped meanwhile (a republished version)
	}
	if e.err != nil || int64(len(e.body)) > c.limitBytes() {
		delete(c.deltas, k) // not kept: the next request tries again
		return e.body, e.err
	}
	e.elem = c.age.PushBack(e)
	c.bytes += int64(len(e.body))
	c.evict()
	return e.body, nil
}
