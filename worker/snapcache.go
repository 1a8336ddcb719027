package worker

import (
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/crowdtrain/crowdtrain/protocol"
)

// snapCache is the last snapshot a Worker downloaded, as its raw body in
// its codec: it outlives a session, so that a worker that reconnects (a
// browser tab whose socket dropped) asks for a delta from the version it
// holds instead of the whole model. Its buffers are reused: once warm, a
// delta costs no allocation of the body's size.
type snapCache struct {
	mu      sync.Mutex
	key     string // the snapshot URL up to its version: coordinator, job, run
	version int64
	codec   string
	body    []byte // nil: nothing held
	spare   []byte // the other body buffer, swapped with body on each delta
	dec     protocol.DeltaDecoder
	cost    fetchCosts

	deltas, fulls int // downloads of each kind (tests)
}

// DeltaPolicy is a Worker's choice between snapshot deltas and full
// snapshots (Config.Deltas).
type DeltaPolicy int

const (
	// DeltasAuto takes whichever way to a new snapshot has cost less
	// wall time per byte of body lately, trying the other now and then
	// (the dearer it is, the more rarely).
	DeltasAuto DeltaPolicy = iota
	// DeltasAlways asks for a delta whenever a snapshot is held.
	DeltasAlways
)

// fetchCosts measures the two ways to a new snapshot body: a delta (its
// GET, which includes the coordinator making it, and applying it) and
// the full body (its GET and a copy), each in seconds per byte of body,
// smoothed. A delta is worth it only where the link is slow: compressing
// and inflating it costs CPU on both sides (on loopback about 10 ms for
// mnist-mlp's 400 KB, where the full body takes 1 ms), and saves a
// fraction of the bytes. Which wins depends on the link, the model and
// both machines, so it is measured, not assumed.
type fetchCosts struct {
	delta, full float64 // 0: not measured yet
	sinceProbe  int
}

const (
	// fetchCostAlpha is the weight of the newest measurement.
	fetchCostAlpha = 0.3
	// probeEvery: every this many fetches the way not taken is taken
	// once, so that its cost follows a link that changes, while the two
	// ways cost about the same. A way r times dearer is tried r times
	// less often (probeInterval), so that trying it costs about
	// 1/probeEvery of what the fetches in between cost.
	probeEvery = 16
	// maxProbeEvery bounds that interval: a link that turns slow (a
	// laptop leaving the LAN) is noticed within this many fetches.
	maxProbeEvery = 256
)

// record adds a fetch that took d for a body of n bytes to the cost of
// its way (delta or full).
func (c *fetchCosts) record(delta bool, d time.Duration, n int) {
	if n <= 0 {
		return
	}
	per := d.Seconds() / float64(n)
	p := &c.full
	if delta {
		p = &c.delta
	}
	if *p == 0 {
		*p = per
	} else {
		*p += fetchCostAlpha * (per - *p)
	}
}

// preferDelta says whether the next fetch, which could be a delta,
// should be one.
func (c *fetchCosts) preferDelta(policy DeltaPolicy) bool {
	if policy == DeltasAlways || c.delta == 0 || c.full == 0 {
		return true // measure the delta first: the first body came whole
	}
	cheaper := c.delta <= c.full
	c.sinceProbe++
	if c.sinceProbe >= c.probeInterval() {
		c.sinceProbe = 0
		return !cheaper
	}
	return cheaper
}

// probeInterval is how many fetches go the cheaper way between two
// tries of the other: probeEvery times how much dearer the other is, at
// most maxProbeEvery. On loopback a delta costs a coordinator and a
// worker about 25 times a full body's CPU (compressing and inflating
// incompressible bits); tried every 16 fetches it cost as much as all
// the full bodies together.
func (c *fetchCosts) probeInterval() int {
	lo, hi := c.delta, c.full
	if lo > hi {
		lo, hi = hi, lo
	}
	ratio := hi / lo
	if !(ratio < maxProbeEvery) { // NaN too
		return maxProbeEvery
	}
	return min(maxProbeEvery, int(probeEvery*max(1, ratio)))
}

// snapshotURLPattern splits a snapshot URL: everything up to the run,
// the version, and an optional codec suffix.
var snapshotURLPattern = regexp.MustCompile(`^(.*/snapshots/[0-9]+)/([0-9]+)(/f16)?$`)

// parseSnapshotURL reads the key, version and codec of an absolute
// snapshot URL; ok is false for a URL of another shape (then no delta is
// tried).
func parseSnapshotURL(u string) (key string, version int64, codec string, ok bool) {
	m := snapshotURLPattern.FindStringSubmatch(u)
	if m == nil {
		return "", 0, "", false
	}
	v, err := strconv.ParseInt(m[2], 10, 64)
	if err != nil {
		return "", 0, "", false
	}
	codec = protocol.SnapshotF32
	if m[3] != "" {
		codec = protocol.SnapshotF16
	}
	return m[1], v, codec, true
}

// deltaURL is the URL of the delta from the held version to version, or
// "" when nothing held can make it. The caller holds mu.
func (c *snapCache) deltaURL(key string, version int64, codec string) string {
	if c.body == nil || c.key != key || c.codec != codec || c.version >= version {
		return ""
	}
	return fmt.Sprintf("%s/%d/%s/from/%d", key, version, codec, c.version)
}

// holds reports whether the cache has exactly this snapshot. The caller
// holds mu.
func (c *snapCache) holds(key string, version int64, codec string) bool {
	return c.body != nil && c.key == key && c.version == version && c.codec == codec
}

// apply makes the body of version from the held one and delta. The
// caller holds mu.
func (c *snapCache) apply(delta []byte, version int64, maxBody int) error {
	out, err := c.dec.Apply(c.spare, c.body, delta, maxBody)
	if err != nil {
		return err
	}
	c.spare, c.body = c.body, out
	c.version = version
	c.deltas++
	return nil
}

// store keeps a full body, taking it over (no copy: this is on every
// task's path), and returns the buffer it held, for the caller to reuse.
// The caller holds mu.
func (c *snapCache) store(key string, version int64, codec string, body []byte) (old []byte) {
	old, c.body = c.body[:0], body
	c.key, c.version, c.codec = key, version, codec
	c.fulls++
	return old
}

// forget drops what is held (its bytes failed to decode). The caller
// holds mu.
func (c *snapCache) forget() {
	c.key, c.body = "", c.body[:0:0]
}

// decodeSnapshot decodes a body of codec into params.
func decodeSnapshot(params []float32, codec string, body []byte) error {
	if codec == protocol.SnapshotF16 {
		return protocol.DecodeHalvesInto(params, body)
	}
	return protocol.DecodeFloatsInto(params, body)
}

// SnapshotDownloads reports how many snapshots this worker fetched as
// deltas and how many whole.
func (w *Worker) SnapshotDownloads() (deltas, full int) {
	w.snaps.mu.Lock()
	defer w.snaps.mu.Unlock()
	return w.snaps.deltas, w.snaps.fulls
}
