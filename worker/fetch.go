package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/crowdtrain/crowdtrain/compute"
	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// fetcher downloads each lease's shard and snapshot into a task buffer.
type fetcher struct {
	s        *session
	ready    chan *task
	free     chan *task
	failures int

	// mu guards the snapshot and the body buffer: the computing goroutine
	// fetches the snapshot of a started lease while this one prefetches
	// the next lease's shard.
	mu       sync.Mutex
	lastSnap string
	snap     []float32
	snapID   SnapshotID
	// snapVersion is the version snap holds when the coordinator served
	// another than its URL names (rebased: the URL's was evicted), else
	// -1: the lease's own.
	snapVersion int64
	body        []byte
	// refURL and ref are the last reference policy fetched for a learn
	// lease with a KL penalty: a job's reference never changes, so it
	// comes down once. Tasks share ref read-only; another URL gets a new
	// slice.
	refURL string
	ref    []float32
	// snapNanos adds up the time spent on snapshot and delta GETs
	// (link.go): the difference across a fill is that lease's download.
	snapNanos atomic.Int64
}

// cachedShard is a decoded shard and the size of its encoding.
type cachedShard struct {
	set   *dataset.Set
	bytes int64
}

// DefaultShardCacheBytes is how many bytes of shards a worker keeps
// unless Config.ShardCacheBytes says: the whole of a data set like
// MNIST's (about 47 MB), so that over a home link the shards come down
// once, not once an epoch. At least one shard is always kept.
const DefaultShardCacheBytes = 256 << 20

func newFetcher(s *session, buffers int) *fetcher {
	f := &fetcher{s: s, ready: make(chan *task, 1), free: make(chan *task, buffers), snapVersion: -1}
	for range buffers {
		f.free <- &task{} // sized by the first lease it holds
	}
	return f
}

func (f *fetcher) run(ctx context.Context, leases <-chan protocol.Lease) error {
	for {
		var l protocol.Lease
		select {
		case <-ctx.Done():
			return ctx.Err()
		case l = <-leases:
		}
		if f.s.isRevoked(l.JobID) {
			f.s.held.Add(-1) // void at the coordinator; the revoke asked again
			continue
		}
		if f.s.w.isPaused() {
			if err := f.s.handBack(ctx, l); err != nil {
				return err
			}
			continue
		}
		var t *task
		select {
		case <-ctx.Done():
			return ctx.Err()
		case t = <-f.free:
		}
		if err := f.fill(ctx, t, l); err != nil {
			f.free <- t
			if ctx.Err() != nil {
				return ctx.Err()
			}
			f.s.held.Add(-1)
			f.s.w.cfg.Logf("lease %d: %v; giving it back", l.ID, err)
			if err := f.s.send(ctx, &protocol.Release{LeaseIDs: []uint64{l.ID}, Reason: truncate(err.Error(), 1000), JobID: l.JobID}); err != nil {
				return err
			}
			if err := f.s.want(ctx, 1); err != nil {
				return err
			}
			if f.failures++; f.failures >= 5 {
				return fmt.Errorf("5 downloads failed in a row, last: %w", err)
			}
			continue
		}
		f.failures = 0
		f.s.counts.Store(l.ID, l.Count)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case f.ready <- t:
		}
	}
}

// fill downloads what lease l needs into t: its examples and, unless its
// snapshot is "latest" (fetched when it starts), its snapshot.
func (f *fetcher) fill(ctx context.Context, t *task, l protocol.Lease) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	t.lease = l
	jc, why := f.s.job(l.JobID)
	if jc == nil {
		return errors.New(why)
	}
	model := jc.model
	t.params = grow(t.params, model.NumParams)
	if compute.IsRL(l) {
		// An RL lease reads no shard: its prompt or its scored groups
		// travel in the lease, and it computes from the policy version
		// it names (always granted).
		t.x, t.labels = t.x[:0], t.labels[:0]
		before := f.snapNanos.Load()
		if err := f.copySnapshot(ctx, t, l.SnapshotURL, model.NumParams); err != nil {
			return err
		}
		t.snapMs = ms(time.Duration(f.snapNanos.Load() - before))
		t.base = f.baseOf(l.BaseVersion)
		t.ref = nil
		if l.Learn != nil && l.Learn.KLCoef > 0 {
			ref, err := f.reference(ctx, l.Learn.ReferenceURL, model.NumParams)
			if err != nil {
				return err
			}
			t.ref = ref
		}
		return nil
	}
	shard, err := f.shard(ctx, l.ShardURL)
	if err != nil {
		return err
	}
	if err := shardFits(shard, model, l.ShardURL); err != nil {
		return err
	}
	lpe := shard.LabelsPerExample()
	if l.Start < 0 || l.Count < 1 || l.Start+l.Count > shard.N {
		return fmt.Errorf("lease wants examples %d..%d of a %d-example shard", l.Start, l.Start+l.Count-1, shard.N)
	}
	t.x = grow(t.x, l.Count*shard.ExampleSize())
	if cap(t.labels) < l.Count*lpe {
		t.labels = make([]int32, l.Count*lpe)
	}
	t.labels = t.labels[:l.Count*lpe]
	shard.Fill(t.x, t.labels, l.Start, l.Count)
	if l.Snapshot == protocol.SnapshotLatest {
		t.snap, t.base, t.snapMs = 0, -1, 0 // set when it starts
		return nil
	}
	before := f.snapNanos.Load()
	if err := f.copySnapshot(ctx, t, l.SnapshotURL, model.NumParams); err != nil {
		return err
	}
	t.snapMs = ms(time.Duration(f.snapNanos.Load() - before))
	t.base = f.baseOf(l.BaseVersion)
	return nil
}

// baseOf is the version the held snapshot is, fetched for a lease based
// on version: that one, unless the coordinator served a newer one in its
// place, which the result must then name. The caller holds mu.
func (f *fetcher) baseOf(version int64) int64 {
	if f.snapVersion >= 0 {
		return f.snapVersion
	}
	return version
}

// fillSnapshot puts the snapshot at ref into t, downloading it unless it
// is the one the fetcher holds.
// It returns the version it holds: base, unless the coordinator served a
// newer one in its place.
func (f *fetcher) fillSnapshot(ctx context.Context, t *task, ref string, base int64) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.copySnapshot(ctx, t, ref, len(t.params)); err != nil {
		return 0, err
	}
	return f.baseOf(base), nil
}

// copySnapshot puts the snapshot at ref, of n parameters, into t.
func (f *fetcher) copySnapshot(ctx context.Context, t *task, ref string, n int) error {
	if ref != f.lastSnap || len(f.snap) != n {
		if err := f.snapshot(ctx, ref, n); err != nil {
			return err
		}
	}
	copy(t.params, f.snap)
	t.snap = f.snapID
	return nil
}

func grow(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
}

func (f *fetcher) get(ctx context.Context, ref string) ([]byte, error) {
	body, _, err := f.getServed(ctx, ref)
	return body, err
}

// getServed is get, and the version the response says it holds in place
// of the one its URL names (the coordinator's X-Crowdtrain-Snapshot-Version
// header), -1 when it says none.
func (f *fetcher) getServed(ctx context.Context, ref string) (body []byte, served int64, err error) {
	served = -1
	u, err := f.s.base.Parse(ref)
	if err != nil {
		return nil, served, fmt.Errorf("bad URL %q: %w", ref, err)
	}
	limit := f.s.maxMessageBytes() + 64<<20
	start := time.Now()
	done := func(n int) {
		if isSnapshotURL(u.Path) {
			d := time.Since(start)
			f.snapNanos.Add(int64(d))
			f.s.link.downloaded(n, d)
		}
	}
	if fetch := f.s.w.cfg.Fetch; fetch != nil {
		body, err = fetch(ctx, u.String(), f.s.welcome.WorkerID, f.body[:0])
		if err != nil {
			return nil, served, fmt.Errorf("failed to fetch %s: %w", u, err)
		}
		if int64(len(body)) > limit {
			return nil, served, fmt.Errorf("%s is larger than %d bytes", u, limit)
		}
		f.body = body
		done(len(body))
		return body, served, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, served, err
	}
	// The coordinator counts the bytes for this worker (docs/API.md).
	req.Header.Set(WorkerHeader, f.s.welcome.WorkerID)
	resp, err := f.s.w.http.Do(req)
	if err != nil {
		return nil, served, fmt.Errorf("failed to fetch %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, served, fmt.Errorf("fetch %s: %s: %s", u, resp.Status, msg)
	}
	if h := resp.Header.Get(SnapshotVersionHeader); h != "" {
		if served, err = strconv.ParseInt(h, 10, 64); err != nil || served < 0 {
			return nil, -1, fmt.Errorf("fetch %s: bad %s %q", u, SnapshotVersionHeader, h)
		}
	}
	// Reuse one body buffer: snapshots are large and arrive constantly.
	buf := f.body[:0]
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := resp.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, served, fmt.Errorf("failed to read %s: %w", u, err)
		}
		if int64(len(buf)) > limit {
			return nil, served, fmt.Errorf("%s is larger than %d bytes", u, limit)
		}
	}
	f.body = buf
	done(len(buf))
	return buf, served, nil
}

// shardFits checks that the model reads the shard at ref: its examples'
// size and labels, its classes, and for text its tokens (DecodeShard
// checked each against the shard's vocabulary; the model's embedding must
// read all of them, or a forward pass would panic).
func shardFits(shard *dataset.Set, model *nn.Model, ref string) error {
	if shard.ExampleSize() != model.InputSize {
		return fmt.Errorf("shard %s: examples have %d values, the model takes %d", ref, shard.ExampleSize(), model.InputSize)
	}
	if shard.Classes > model.NumClasses {
		return fmt.Errorf("shard %s has %d classes, the model predicts %d", ref, shard.Classes, model.NumClasses)
	}
	if ls := model.Spec.Layers; shard.Kind == dataset.NextTokens && len(ls) > 0 && ls[0].Type == nn.TypeEmbedding && shard.Classes > ls[0].Vocab {
		return fmt.Errorf("shard %s holds token ids up to %d, outside the model's embedding vocabulary of %d", ref, shard.Classes-1, ls[0].Vocab)
	}
	if lpe, want := shard.LabelsPerExample(), model.LabelsPerExample; lpe != want {
		return fmt.Errorf("shard %s: examples have %d labels each (%s), the model predicts %d", ref, lpe, shard.Kind, want)
	}
	return nil
}

func (f *fetcher) shard(ctx context.Context, ref string) (*dataset.Set, error) {
	w := f.s.w
	w.shardMu.Lock()
	c, ok := w.shards[ref]
	w.shardMu.Unlock()
	if ok {
		return c.set, nil
	}
	body, err := f.get(ctx, ref)
	if err != nil {
		return nil, err
	}
	// DecodeShard may alias its input; the body buffer is reused, so copy.
	d, err := dataset.DecodeShard(append([]byte(nil), body...), 1<<20)
	if err != nil {
		return nil, fmt.Errorf("shard %s: %w", ref, err)
	}
	limit := f.s.w.cfg.ShardCacheBytes
	if limit <= 0 {
		limit = DefaultShardCacheBytes
	}
	n := int64(len(body))
	w.shardMu.Lock()
	defer w.shardMu.Unlock()
	for len(w.shardOrder) > 0 && w.shardBytes+n > limit {
		w.shardBytes -= w.shards[w.shardOrder[0]].bytes
		delete(w.shards, w.shardOrder[0])
		w.shardOrder = w.shardOrder[1:]
	}
	w.shards[ref] = cachedShard{set: d, bytes: n}
	w.shardOrder = append(w.shardOrder, ref)
	w.shardBytes += n
	return d, nil
}

// snapshot downloads the snapshot at ref into f.snap: as a delta from the
// snapshot the worker holds when it can (same coordinator, job, run and
// codec, an older version), else, or when the delta fails, whole.
func (f *fetcher) snapshot(ctx context.Context, ref string, n int) error {
	u, err := f.s.base.Parse(ref)
	if err != nil {
		return fmt.Errorf("bad snapshot URL %q: %w", ref, err)
	}
	key, version, codec, ok := parseSnapshotURL(u.String())
	if !ok {
		key, version, codec = u.String(), 0, protocol.SnapshotF32
	}
	f.snap = grow(f.snap, n)
	c := &f.s.w.snaps
	c.mu.Lock()
	defer c.mu.Unlock()
	maxBody := 4 * n
	if codec == protocol.SnapshotF16 {
		maxBody = 2 * n
	}
	have := ok && c.holds(key, version, codec)
	if d := c.deltaURL(key, version, codec); ok && !have && d != "" && c.cost.preferDelta(f.s.w.cfg.Deltas) {
		start := time.Now()
		delta, err := f.get(ctx, d)
		if err == nil {
			err = c.apply(delta, version, maxBody)
		}
		if err == nil {
			have = true
			c.cost.record(true, time.Since(start), len(c.body))
		} else if ctx.Err() == nil {
			f.s.w.cfg.Logf("snapshot delta %s: %v; fetching the full snapshot", d, err)
		}
	}
	if !have {
		start := time.Now()
		body, served, err := f.getServed(ctx, ref)
		if err != nil {
			return err
		}
		// The cache takes the body over, and the fetcher reads the next
		// one into the buffer the cache held.
		f.body = c.store(key, servedOr(served, version), codec, body)
		c.cost.record(false, time.Since(start), len(body))
	}
	if err := decodeSnapshot(f.snap, codec, c.body); err != nil {
		c.forget()
		f.lastSnap = ""
		return fmt.Errorf("snapshot %s: %w", ref, err)
	}
	f.lastSnap = ref
	f.snapID = SnapshotID(snapshotDownloads.Add(1))
	f.snapVersion = -1
	if ok && c.version != version {
		f.snapVersion = c.version // rebased (coordinator/rebase.go)
	}
	return nil
}

// reference returns the reference policy at ref, of n parameters
// (float32s, as a snapshot's f32 body), downloading it unless it is the
// one held. The caller holds mu.
func (f *fetcher) reference(ctx context.Context, ref string, n int) ([]float32, error) {
	if ref == f.refURL && len(f.ref) == n {
		return f.ref, nil
	}
	body, err := f.get(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("the reference policy: %w", err)
	}
	params := make([]float32, n)
	if err := protocol.DecodeFloatsInto(params, body); err != nil {
		return nil, fmt.Errorf("the reference policy %s: %w", ref, err)
	}
	f.refURL, f.ref = ref, params
	return params, nil
}

// servedOr is the version a response holds: served, when the
// coordinator named one, else the URL's.
func servedOr(served, version int64) int64 {
	if served >= 0 {
		return served
	}
	return version
}

// SnapshotVersionHeader names the version a full snapshot response holds
// when the coordinator served a newer one than its URL names.
const SnapshotVersionHeader = "X-Crowdtrain-Snapshot-Version"

// snapshotDownloads numbers every snapshot download in the process, so a
// SnapshotID is never reused, even across sessions or a coordinator that
// restarted from an older checkpoint and reuses version numbers.
var snapshotDownloads atomic.Uint64
