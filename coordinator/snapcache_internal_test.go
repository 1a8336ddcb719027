package coordinator

import (
	"slices"
	"testing"
)

// heldBytes counts what c holds from its entries, apart from its own
// running total.
func heldBytes(c *snapCache) (total int64, versions []int64) {
	p := c.lock()
	defer p.mu.Unlock()
	for v, s := range c.versions {
		total += s.cost
		versions = append(versions, v)
	}
	for _, d := range c.deltas {
		total += int64(len(d.body))
	}
	slices.Sort(versions)
	return total, versions
}

// countedBytes is the cache's own running total, checked against its
// pool's (the only cache in it).
func countedBytes(c *snapCache) int64 {
	p := c.lock()
	defer p.mu.Unlock()
	if p.bytes != c.bytes {
		panic("a pool of one cache counts other bytes than the cache")
	}
	return c.bytes
}

// Over many versions and deltas the bytes held never pass the bound, the
// versions kept are always the newest ones, and the current one is among
// them.
func TestSnapshotCacheBoundHoldsOverManyVersions(t *testing.T) {
	const body, delta, limit = 3000, 700, 10_000
	var c snapCache
	c.setLimit(limit)
	for v := int64(0); v < 200; v++ {
		c.publish(&snapshot{version: v, body: make([]byte, body)}, body)
		if v > 0 {
			if _, err := c.delta(deltaKey{"f32", v - 1, v}, func() ([]byte, error) { return make([]byte, delta), nil }); err != nil {
				t.Fatal(err)
			}
		}
		total, kept := heldBytes(&c)
		if total > limit {
			t.Fatalf("after version %d: %d bytes held, over the bound of %d", v, total, limit)
		}
		if got := countedBytes(&c); got != total {
			t.Fatalf("after version %d: the cache counts %d bytes, its entries add up to %d", v, got, total)
		}
		if len(kept) == 0 || kept[len(kept)-1] != v {
			t.Fatalf("after version %d: kept %v, without the current version", v, kept)
		}
		for i := range kept {
			if kept[i] != v-int64(len(kept)-1-i) {
				t.Fatalf("after version %d: kept %v, not the newest versions", v, kept)
			}
		}
	}
	_, kept := heldBytes(&c)
	if len(kept) < 2 {
		t.Errorf("kept %v: room for at least two versions under the bound", kept)
	}
	if c.evictions == 0 {
		t.Error("no evictions counted")
	}
}

// Eviction goes by age, snapshots and deltas alike: the oldest entry first.
func TestSnapshotCacheEvictsOldestFirst(t *testing.T) {
	var c snapCache
	c.setLimit(1000)
	pub := func(v int64, n int) { c.publish(&snapshot{version: v, body: make([]byte, n)}, int64(n)) }
	mkDelta := func(from, to int64, n int) {
		if _, err := c.delta(deltaKey{"f32", from, to}, func() ([]byte, error) { return make([]byte, n), nil }); err != nil {
			t.Fatal(err)
		}
	}
	pub(1, 300)
	pub(2, 300)
	mkDelta(1, 2, 100)
	pub(3, 300) // 1000 bytes: all fit
	if _, kept := heldBytes(&c); !slices.Equal(kept, []int64{1, 2, 3}) {
		t.Fatalf("kept %v, want 1 2 3", kept)
	}
	pub(4, 100) // 1100: version 1 goes, the oldest
	if _, kept := heldBytes(&c); !slices.Equal(kept, []int64{2, 3, 4}) || !c.hasDelta(deltaKey{"f32", 1, 2}) {
		t.Fatalf("kept %v (delta 1→2 kept: %v), want 2 3 4 and the delta", kept, c.hasDelta(deltaKey{"f32", 1, 2}))
	}
	pub(5, 400) // 1200: version 2 goes (900), then nothing more
	if _, kept := heldBytes(&c); !slices.Equal(kept, []int64{3, 4, 5}) || !c.hasDelta(deltaKey{"f32", 1, 2}) {
		t.Fatalf("kept %v, want 3 4 5 and the delta 1→2", kept)
	}
	pub(6, 200) // 1100: the delta 1→2 is older than version 3: it goes first
	if _, kept := heldBytes(&c); !slices.Equal(kept, []int64{3, 4, 5, 6}) || c.hasDelta(deltaKey{"f32", 1, 2}) {
		t.Fatalf("kept %v (delta 1→2 kept: %v), want 3 4 5 6 without the delta", kept, c.hasDelta(deltaKey{"f32", 1, 2}))
	}
	if c.evictions != 3 {
		t.Errorf("%d evictions counted, want 3", c.evictions)
	}
}

// The current version stays even when it alone is over the bound; a delta
// over the bound is served but not kept.
func TestSnapshotCacheKeepsTheCurrentVersion(t *testing.T) {
	var c snapCache
	c.setLimit(100)
	for v := int64(0); v < 5; v++ {
		c.publish(&snapshot{version: v, body: make([]byte, 400)}, 400)
		if s := c.snapshot(v); s == nil {
			t.Fatalf("the current version %d was evicted", v)
		}
		if v > 0 && c.snapshot(v-1) != nil {
			t.Fatalf("version %d kept past the bound", v-1)
		}
	}
	body, err := c.delta(deltaKey{"f32", 3, 4}, func() ([]byte, error) { return make([]byte, 200), nil })
	if err != nil || len(body) != 200 {
		t.Fatalf("delta: %d bytes, %v", len(body), err)
	}
	if c.hasDelta(deltaKey{"f32", 3, 4}) {
		t.Error("a delta larger than the bound was kept")
	}
	if total, kept := heldBytes(&c); total != 400 || !slices.Equal(kept, []int64{4}) {
		t.Errorf("held %d bytes, versions %v; want the current version's 400 alone", total, kept)
	}
}

// A version published again (a run's versions after a restore) replaces
// the one kept, and is counted once.
func TestSnapshotCacheRepublishCountsOnce(t *testing.T) {
	var c snapCache
	c.setLimit(1 << 20)
	for i := range 3 {
		c.publish(&snapshot{version: 7, body: make([]byte, 100+i)}, int64(100+i))
	}
	if total, kept := heldBytes(&c); total != 102 || countedBytes(&c) != 102 || len(kept) != 1 {
		t.Errorf("held %d bytes (counted %d) in %v, want 102 in one version", total, countedBytes(&c), kept)
	}
	if s := c.snapshot(7); s == nil || len(s.body) != 102 {
		t.Errorf("version 7 is not the last published: %v", s)
	}
}

// Jobs share the process's bound: the oldest entry goes whichever job it
// is of, each job's current version stays, and the jobs' bytes add up to
// the pool's.
func TestSnapshotCachePoolIsSharedByJobs(t *testing.T) {
	pool := &snapPool{limit: 1000}
	a, b := &snapCache{pool: pool}, &snapCache{pool: pool}
	pub := func(c *snapCache, v int64, n int) { c.publish(&snapshot{version: v, body: make([]byte, n)}, int64(n)) }
	pub(a, 1, 300)
	pub(b, 1, 300)
	pub(a, 2, 300) // 900
	pub(b, 2, 300) // 1200: a's version 1 goes, the oldest
	if _, kept := heldBytes(a); !slices.Equal(kept, []int64{2}) {
		t.Fatalf("job a keeps %v, want 2 (its version 1 was the pool's oldest)", kept)
	}
	if _, kept := heldBytes(b); !slices.Equal(kept, []int64{1, 2}) {
		t.Fatalf("job b keeps %v, want 1 2", kept)
	}
	pub(b, 3, 900) // 1800: b's 1 and 2 go; a's current and b's current stay, over the bound
	_, ka := heldBytes(a)
	_, kb := heldBytes(b)
	if !slices.Equal(ka, []int64{2}) || !slices.Equal(kb, []int64{3}) {
		t.Fatalf("kept a %v, b %v; want each job's current version alone", ka, kb)
	}
	ta, _ := heldBytes(a)
	tb, _ := heldBytes(b)
	pool.mu.Lock()
	defer pool.mu.Unlock()
	if pool.bytes != ta+tb || a.bytes != ta || b.bytes != tb || pool.bytes != 1200 {
		t.Errorf("pool counts %d bytes, jobs %d and %d, their entries %d and %d; want 1200 in all", pool.bytes, a.bytes, b.bytes, ta, tb)
	}
	if a.evictions != 1 || b.evictions != 2 {
		t.Errorf("evictions a %d, b %d; want 1 and 2", a.evictions, b.evictions)
	}
}
