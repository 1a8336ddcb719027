package worker

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/crowdtrain/crowdtrain/protocol"
)

func TestParseSnapshotURL(t *testing.T) {
	for _, c := range []struct {
		url, key, codec string
		version         int64
		ok              bool
	}{
		{"http://h:1/api/v1/jobs/j-1/snapshots/3/42", "http://h:1/api/v1/jobs/j-1/snapshots/3", "f32", 42, true},
		{"http://h:1/api/v1/jobs/j-1/snapshots/3/42/f16", "http://h:1/api/v1/jobs/j-1/snapshots/3", "f16", 42, true},
		{"http://h:1/api/v1/jobs/j-1/snapshots/3/42/f32/from/7", "", "", 0, false},
		{"http://h:1/api/v1/jobs/j-1/snapshots/3/99999999999999999999", "", "", 0, false},
		{"http://h:1/elsewhere/42", "", "", 0, false},
	} {
		key, v, codec, ok := parseSnapshotURL(c.url)
		if ok != c.ok || (ok && (key != c.key || v != c.version || codec != c.codec)) {
			t.Errorf("%s: %q %d %q %v, want %q %d %q %v", c.url, key, v, codec, ok, c.key, c.version, c.codec, c.ok)
		}
	}
}

func TestSnapCacheDeltaURL(t *testing.T) {
	var c snapCache
	key := "http://h/api/v1/jobs/j/snapshots/1"
	if u := c.deltaURL(key, 5, "f32"); u != "" {
		t.Errorf("nothing held, delta URL %q", u)
	}
	c.store(key, 3, "f32", []byte{1, 2, 3, 4})
	if u, want := c.deltaURL(key, 5, "f32"), key+"/5/f32/from/3"; u != want {
		t.Errorf("delta URL %q, want %q", u, want)
	}
	for _, u := range []string{
		c.deltaURL(key, 3, "f32"),                                  // the same version: nothing to fetch
		c.deltaURL(key, 2, "f32"),                                  // an older one: fetched whole
		c.deltaURL(key, 5, "f16"),                                  // another codec
		c.deltaURL("http://h/api/v1/jobs/j/snapshots/2", 5, "f32"), // another run
	} {
		if u != "" {
			t.Errorf("delta URL %q where none applies", u)
		}
	}
	if !c.holds(key, 3, "f32") || c.holds(key, 3, "f16") {
		t.Error("holds is wrong")
	}
}

// Once warm, taking a delta and decoding it allocates no buffer of the
// body's size: the browser does this for every snapshot.
func TestSnapCacheWarmReusesBuffers(t *testing.T) {
	const n = 100_000
	p0, p1 := make([]float32, n), make([]float32, n)
	for i := range p0 {
		p0[i] = float32(i%1000) / 1000
		p1[i] = p0[i] + 1e-4
	}
	for _, codec := range []string{protocol.SnapshotF32, protocol.SnapshotF16} {
		enc, es := protocol.EncodeFloats, 4
		if codec == protocol.SnapshotF16 {
			enc, es = func(p []float32) []byte { return protocol.EncodeHalves(nil, p) }, 2
		}
		b0, b1 := enc(p0), enc(p1)
		fwd, err := protocol.EncodeDelta(nil, b0, b1, es)
		if err != nil {
			t.Fatal(err)
		}
		back, err := protocol.EncodeDelta(nil, b1, b0, es)
		if err != nil {
			t.Fatal(err)
		}
		var c snapCache
		params := make([]float32, n)
		c.store("k", 0, codec, b0)
		step := func(v int64) {
			d := fwd
			if v%2 == 0 {
				d = back
			}
			if err := c.apply(d, v, n*es); err != nil {
				t.Fatal(err)
			}
			if err := decodeSnapshot(params, codec, c.body); err != nil {
				t.Fatal(err)
			}
		}
		step(1)
		step(2)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for v := int64(3); v < 9; v++ {
			step(v)
		}
		runtime.ReadMemStats(&after)
		if per := (after.TotalAlloc - before.TotalAlloc) / 6; per > uint64(n*es)/10 {
			t.Errorf("%s: %d bytes allocated per delta of a %d-byte body", codec, per, n*es)
		}
		if !bytes.Equal(c.body, b0) || c.version != 8 {
			t.Errorf("%s: after the deltas the cache holds version %d, body equal to version 8's: %v", codec, c.version, bytes.Equal(c.body, b0))
		}
	}
}
