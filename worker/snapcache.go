package worker

import (
	"fmt"
	"regexp"
	"strconv"
	"sync"

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

	deltas, fulls int // downloads of each kind (tests)
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

// store keeps a full body (copied: the caller's buffer is reused). The
// caller holds mu.
func (c *snapCache) store(key string, version int64, codec string, body []byte) {
	c.body = append(c.body[:0], body...)
	c.key, c.version, c.codec = key, version, codec
	c.fulls++
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
