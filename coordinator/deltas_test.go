package coordinator_test

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/worker"
)

// getBody GETs path and returns its status and body.
func (g *testGrid) getBody(path string) (int, []byte) {
	g.t.Helper()
	resp, err := http.Get(g.http.URL + path)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		g.t.Fatal(err)
	}
	return resp.StatusCode, b
}

func deltaJob(t *testing.T, codec string) jobspec.Spec {
	return jobSpec(t, "mnist-mlp", func(s *jobspec.Spec) {
		s.TargetAccuracy = 1
		s.EvalEvery = 1 << 30
		s.MaxStaleness = 1 << 20
		s.SnapshotCodec = codec
	})
}

// Over HTTP: a delta from v to v+k applied to the full body of v is the
// full body of v+k, bit for bit, in f32 and in f16; a delta from a
// version the coordinator no longer keeps is gone (410).
func TestSnapshotDeltasOverHTTP(t *testing.T) {
	g := newTestGrid(t, deltaJob(t, jobspec.CodecFP16))
	rc := g.joinRawHello(func(h *protocol.Hello) { h.SnapshotCodecs = []string{protocol.SnapshotF32, protocol.SnapshotF16} })
	if c := rc.welcome.Job.SnapshotCodec; c != protocol.SnapshotF16 {
		t.Fatalf("welcome snapshot_codec %q, want f16", c)
	}
	old := g.joinRawHello(nil) // names no codec: f32
	if c := old.welcome.Job.SnapshotCodec; c != protocol.SnapshotF32 {
		t.Fatalf("welcome snapshot_codec for a worker without f16: %q, want f32", c)
	}
	r := rand.New(rand.NewPCG(1, 2))
	n := rc.welcome.Job.NumParams
	f32 := map[int64][]byte{}
	f16 := map[int64][]byte{}
	var base string // the snapshot path without its version
	var last protocol.Lease
	for i := range 6 {
		l := rc.leases(1)[0]
		last = l
		if !strings.HasSuffix(l.SnapshotURL, "/f16") {
			t.Fatalf("lease of an f16 worker names %q, want an /f16 URL", l.SnapshotURL)
		}
		full := strings.TrimSuffix(l.SnapshotURL, "/f16")
		base = strings.TrimSuffix(full, "/"+strconv.FormatInt(l.BaseVersion, 10))
		code, b32 := g.getBody(full)
		code16, b16 := g.getBody(l.SnapshotURL)
		if code != http.StatusOK || code16 != http.StatusOK {
			t.Fatalf("version %d: f32 %d, f16 %d", l.BaseVersion, code, code16)
		}
		if len(b32) != 4*n || len(b16) != 2*n {
			t.Fatalf("version %d: f32 body %d bytes, f16 %d, want %d and %d", l.BaseVersion, len(b32), len(b16), 4*n, 2*n)
		}
		f32[l.BaseVersion], f16[l.BaseVersion] = b32, b16
		// In an f16 job the f32 body carries the f16 values widened:
		// every worker computes from the same parameters.
		p32, p16 := make([]float32, n), make([]float32, n)
		if err := protocol.DecodeFloatsInto(p32, b32); err != nil {
			t.Fatal(err)
		}
		if err := protocol.DecodeHalvesInto(p16, b16); err != nil {
			t.Fatal(err)
		}
		for k := range p32 {
			if p32[k] != p16[k] {
				t.Fatalf("version %d parameter %d: f32 body %v, f16 body %v", l.BaseVersion, k, p32[k], p16[k])
			}
		}
		if i == 5 {
			break // hold the last lease: it pins its version
		}
		up := make(protocol.Floats, n)
		for k := range up {
			up[k] = float32(r.NormFloat64()) * 1e-3
		}
		rc.send(&protocol.Result{LeaseID: l.ID, JobID: l.JobID, BaseVersion: l.BaseVersion, Codec: protocol.CodecF32,
			Update: up, Examples: l.Count, LossSum: 1})
		if a := rc.ack(l.ID); !a.Accepted {
			t.Fatalf("result %d rejected: %+v", i, a)
		}
	}
	to := last.BaseVersion
	for _, k := range []int64{1, 5} {
		from := to - k
		for codec, bodies := range map[string]map[int64][]byte{"f32": f32, "f16": f16} {
			path := base + "/" + strconv.FormatInt(to, 10) + "/" + codec + "/from/" + strconv.FormatInt(from, 10)
			code, d := g.getBody(path)
			if code != http.StatusOK {
				t.Fatalf("GET %s: %d %s", path, code, d)
			}
			got, err := protocol.ApplyDelta(nil, bodies[from], d, 4*n)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if !bytes.Equal(got, bodies[to]) {
				t.Fatalf("%s: delta applied to version %d differs from the full body of version %d", path, from, to)
			}
			if bytes.Equal(bodies[from], bodies[to]) {
				t.Fatalf("versions %d and %d have equal %s bodies: the test proves nothing", from, to, codec)
			}
			if len(d) >= len(bodies[to]) {
				t.Errorf("%s: delta of %d bytes, the full body has %d", path, len(d), len(bodies[to]))
			}
			t.Logf("%s delta over %d version(s): %d bytes (full body %d)", codec, k, len(d), len(bodies[to]))
		}
	}
	// A second request is served from the cache.
	made := coordinator.DeltasMade(g.job)
	if code, _ := g.getBody(base + "/" + strconv.FormatInt(to, 10) + "/f32/from/" + strconv.FormatInt(to-1, 10)); code != http.StatusOK {
		t.Fatalf("second request: %d", code)
	}
	if got := coordinator.DeltasMade(g.job); got != made {
		t.Errorf("a cached delta was encoded again (%d deltas made, then %d)", made, got)
	}

	// Bad requests: each answers with its error, none panics.
	v := strconv.FormatInt(to, 10)
	for path, want := range map[string]int{
		base + "/" + v + "/f32/from/" + strconv.FormatInt(to+1, 10):                        http.StatusBadRequest, // from > version
		base + "/" + v + "/f32/from/99999999999999999999999":                               http.StatusBadRequest, // not an int64
		base + "/" + v + "/i8/from/0":                                                      http.StatusNotFound,
		base + "/" + v + "/f32/from/x":                                                     http.StatusNotFound,
		strings.Replace(base, "/snapshots/1", "/snapshots/2", 1) + "/" + v + "/f32/from/0": http.StatusGone, // another run
		base + "/12345/f32/from/0":                                                         http.StatusGone, // version not published
		base + "/12345/f16":                                                                http.StatusGone,
	} {
		if code, b := g.getBody(path); code != want {
			t.Errorf("GET %s: %d %s, want %d", path, code, b, want)
		}
	}

	// Bound the cache to nothing: only the current version stays, a
	// delta from any older one is gone, and the answer says to fetch the
	// full snapshot, which is there.
	coordinator.SetSnapshotCacheBytes(g.job, 1)
	rc.send(&protocol.Result{LeaseID: last.ID, JobID: last.JobID, BaseVersion: last.BaseVersion, Codec: protocol.CodecF32,
		Update: smallUpdate(n), Examples: last.Count, LossSum: 1})
	if a := rc.ack(last.ID); !a.Accepted {
		t.Fatalf("result rejected: %+v", a)
	}
	l := rc.leases(1)[0] // publishes a new version: the cache drops every other
	for _, from := range []int64{0, l.BaseVersion - 1} {
		path := base + "/" + strconv.FormatInt(l.BaseVersion, 10) + "/f32/from/" + strconv.FormatInt(from, 10)
		code, b := g.getBody(path)
		if code != http.StatusGone || !strings.Contains(string(b), "fetch the full snapshot") {
			t.Errorf("GET %s: %d %s, want 410 saying to fetch the full snapshot", path, code, b)
		}
	}
	if code, b := g.getBody(base + "/" + strconv.FormatInt(l.BaseVersion, 10)); code != http.StatusOK || len(b) != 4*n {
		t.Errorf("the current version past the cache's bound: %d, %d bytes", code, len(b))
	}
}

// A job with snapshot_codec fp16 trains with local workers, which read
// f16 snapshots and their deltas: with the base fixed when the worker
// starts computing and in the lease, in async and sync modes.
func TestF16SnapshotJobTrains(t *testing.T) {
	for _, c := range []struct{ name, yaml string }{
		{"async-latest", "snapshot: latest\n"},
		{"async-granted", "snapshot: granted\n"},
		{"sync", "mode: sync\nround_size: 2\nbackup_workers: 0\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			spec := modeSpec(t, "snapshot_codec: fp16\ntarget_accuracy: 1\neval_every: 1000000\n"+c.yaml)
			g := newTestGrid(t, spec)
			defer g.close()
			g.addWorker(1, nil)
			g.addWorker(1, nil)
			first := g.waitFor("20 accepted updates", 60*time.Second, func(v coordinator.JobView) bool { return v.UpdatesApplied >= 20 })
			g.waitFor("20 more", 60*time.Second, func(v coordinator.JobView) bool { return v.UpdatesApplied >= first.UpdatesApplied+20 })
			if made := coordinator.DeltasMade(g.job); made == 0 {
				t.Errorf("no delta was requested: the workers downloaded every snapshot whole")
			}
			// A granted lease's base is fixed when it is granted: a
			// worker held up a moment (a shard's download, a core
			// shared with the other) returns results past max_staleness
			// (a CI run: two of 64, staleness 9), which says nothing of
			// the f16 path. Any other refusal does.
			v := g.jobView()
			for reason, n := range v.Rejections {
				if n > 0 && reason != protocol.ReasonStale {
					t.Errorf("%d updates rejected as %s (all rejections: %v)", n, reason, v.Rejections)
				}
			}
		})
	}
}

// snapshotKinds counts the snapshot GETs a handler serves, by kind.
type snapshotKinds struct {
	mu                    sync.Mutex
	full32, full16, delta int
	// breakDeltas answers every other delta request 410 and cuts the
	// others short.
	breakDeltas bool
}

func (k *snapshotKinds) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := r.URL.Path; strings.Contains(p, "/snapshots/") {
			k.mu.Lock()
			switch {
			case strings.Contains(p, "/from/"):
				k.delta++
				if k.breakDeltas {
					n := k.delta
					k.mu.Unlock()
					if n%2 == 1 {
						http.Error(w, "gone", http.StatusGone)
						return
					}
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, r)
					b := rec.Body.Bytes()
					w.WriteHeader(rec.Code)
					w.Write(b[:len(b)*2/3])
					return
				}
			case strings.HasSuffix(p, "/f16"):
				k.full16++
			default:
				k.full32++
			}
			k.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	})
}

func (k *snapshotKinds) get() (full32, full16, delta int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.full32, k.full16, k.delta
}

// A worker that holds version v downloads a delta to the next version it
// needs, in its codec; after a reconnect it keeps its snapshot and goes
// on with deltas, never the whole model again.
func TestWorkerDownloadsDeltas(t *testing.T) {
	for _, codec := range []string{jobspec.CodecFP32, jobspec.CodecFP16} {
		t.Run(codec, func(t *testing.T) {
			g := newTestGrid(t, deltaJob(t, codec))
			defer g.close()
			var kinds snapshotKinds
			counted := httptest.NewUnstartedServer(kinds.wrap(g.srv.Handler()))
			counted.Config.ConnState = g.srv.ConnState
			counted.Start()
			defer counted.Close()
			w := g.addWorkerWith(1, nil, func(c *worker.Config) {
				c.Coordinator = "ws" + strings.TrimPrefix(counted.URL, "http") + "/ws"
				// On loopback a full body is cheaper than a delta, and
				// DeltasAuto would take it: this test is of deltas.
				c.Deltas = worker.DeltasAlways
			})
			g.waitFor("10 accepted updates", 60*time.Second, func(v coordinator.JobView) bool { return v.UpdatesApplied >= 10 })
			// The worker counts a download when it is done, the handler
			// when it starts: read the worker's first.
			wd, wf := w.SnapshotDownloads()
			f32, f16, deltas := kinds.get()
			t.Logf("before the reconnect: %d full f32, %d full f16, %d deltas", f32, f16, deltas)
			fulls := f32 + f16
			if codec == jobspec.CodecFP16 && f32 != 0 {
				t.Errorf("an f16 worker fetched %d f32 snapshots", f32)
			}
			if codec == jobspec.CodecFP32 && f16 != 0 {
				t.Errorf("an f32 worker fetched %d f16 snapshots", f16)
			}
			if fulls != 1 || deltas == 0 {
				t.Fatalf("%d full snapshots and %d deltas, want the first whole and deltas after", fulls, deltas)
			}
			if wd > deltas || wd < deltas-1 || wf != fulls {
				t.Errorf("the worker counts %d deltas and %d full, the handler %d and %d", wd, wf, deltas, fulls)
			}

			if !g.srv.DisconnectWorker(w.Stats().WorkerID) {
				t.Fatal("the worker was not connected")
			}
			applied := g.jobView().UpdatesApplied
			waitUntil(t, "the worker reconnects", func() bool { return w.Stats().Connects >= 2 })
			g.waitFor("10 more accepted updates", 60*time.Second, func(v coordinator.JobView) bool { return v.UpdatesApplied >= applied+10 })
			f32b, f16b, deltasb := kinds.get()
			t.Logf("after the reconnect: %d full f32, %d full f16, %d deltas", f32b, f16b, deltasb)
			if f32b+f16b != fulls {
				t.Errorf("after a reconnect the worker fetched %d whole snapshots, want none (it keeps its last)", f32b+f16b-fulls)
			}
			if deltasb <= deltas {
				t.Errorf("no delta after the reconnect")
			}
		})
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A delta that fails (gone, or cut short) is followed by the full
// snapshot, and the worker trains on.
func TestWorkerFallsBackToFullSnapshots(t *testing.T) {
	g := newTestGrid(t, deltaJob(t, jobspec.CodecFP16))
	defer g.close()
	kinds := snapshotKinds{breakDeltas: true}
	counted := httptest.NewUnstartedServer(kinds.wrap(g.srv.Handler()))
	counted.Config.ConnState = g.srv.ConnState
	counted.Start()
	defer counted.Close()
	w := g.addWorkerWith(1, nil, func(c *worker.Config) {
		c.Coordinator = "ws" + strings.TrimPrefix(counted.URL, "http") + "/ws"
	})
	g.waitFor("10 accepted updates", 60*time.Second, func(v coordinator.JobView) bool { return v.UpdatesApplied >= 10 })
	_, f16, deltas := kinds.get()
	t.Logf("%d full f16 snapshots, %d deltas tried", f16, deltas)
	// Counted while the worker runs: the last failed delta's full
	// snapshot may still be on its way.
	if deltas < 2 || f16 < deltas || f16 > deltas+1 {
		t.Errorf("%d deltas tried and %d full snapshots, want each failed delta followed by a full snapshot (and the first)", deltas, f16)
	}
	if d, _ := w.SnapshotDownloads(); d != 0 {
		t.Errorf("the worker applied %d broken deltas", d)
	}
	if s := w.Stats(); s.Rejected != 0 {
		t.Errorf("%d results rejected", s.Rejected)
	}
}

// A client that holds no lease pays for a delta before it is made: over
// its budget, it gets 429 and the coordinator spends nothing on it.
func TestAnonymousDeltaPaysFirst(t *testing.T) {
	g := newTestGridWith(t, deltaJob(t, jobspec.CodecFP32), func(c *coordinator.Config) {
		c.AnonBulkRate, c.AnonBulkBurst = 1, 100<<10
	})
	rc := g.joinRaw() // from 127.0.0.1
	var l protocol.Lease
	for range 2 {
		l = rc.leases(1)[0]
		rc.send(&protocol.Result{LeaseID: l.ID, JobID: l.JobID, BaseVersion: l.BaseVersion, Codec: protocol.CodecF32,
			Update: smallUpdate(rc.welcome.Job.NumParams), Examples: l.Count, LossSum: 1})
		if a := rc.ack(l.ID); !a.Accepted {
			t.Fatalf("result rejected: %+v", a)
		}
	}
	held := rc.leases(1)[0] // publishes version 2
	anon := clientFrom(t, "127.0.0.2")
	refused := false
	for from := range held.BaseVersion {
		path := held.SnapshotURL + "/f32/from/" + strconv.FormatInt(from, 10)
		made := coordinator.DeltasMade(g.job)
		resp, b := g.send(anon, http.MethodGet, path, nil, nil)
		switch resp.StatusCode {
		case http.StatusOK:
		case http.StatusTooManyRequests:
			refused = true
			if got := coordinator.DeltasMade(g.job); got != made {
				t.Errorf("a delta was made for a client that could not pay for it")
			}
		default:
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
	}
	if !refused {
		t.Fatal("an address without a lease got every delta over its budget")
	}
	// The lease holder's address gets it free.
	path := held.SnapshotURL + "/f32/from/0"
	if code, b := g.getBody(path); code != http.StatusOK {
		t.Errorf("the lease holder's GET %s: %d %s", path, code, b)
	}
}

// A lease makes a few new deltas to its version free, not one from every
// version kept: past freeDeltas the holder's address pays like anyone,
// so one lease cannot buy tens of delta encodings.
func TestLeaseHolderGetsFewFreeDeltas(t *testing.T) {
	g := newTestGridWith(t, deltaJob(t, jobspec.CodecFP32), func(c *coordinator.Config) {
		c.AnonBulkRate, c.AnonBulkBurst = 1, 100<<10
	})
	rc := g.joinRaw()
	for range 8 {
		l := rc.leases(1)[0]
		rc.send(&protocol.Result{LeaseID: l.ID, JobID: l.JobID, BaseVersion: l.BaseVersion, Codec: protocol.CodecF32,
			Update: smallUpdate(rc.welcome.Job.NumParams), Examples: l.Count, LossSum: 1})
		if a := rc.ack(l.ID); !a.Accepted {
			t.Fatalf("result rejected: %+v", a)
		}
	}
	held := rc.leases(1)[0]
	if held.BaseVersion < 6 {
		t.Fatalf("lease based on version %d; the test needs 6 older versions kept", held.BaseVersion)
	}
	served, refused := 0, 0
	for from := range held.BaseVersion {
		path := held.SnapshotURL + "/f32/from/" + strconv.FormatInt(from, 10)
		switch code, b := g.getBody(path); code {
		case http.StatusOK:
			served++
		case http.StatusTooManyRequests:
			refused++
		default:
			t.Fatalf("GET %s: %d %s", path, code, b)
		}
	}
	t.Logf("%d deltas to version %d served free, %d refused over the budget", served, held.BaseVersion, refused)
	// The address's budget (a burst of 100 KB) pays for at most one more.
	if served < 1 || served > coordinator.FreeDeltas+1 || refused == 0 {
		t.Fatalf("the lease holder got %d new deltas to one version and %d refused; want 1..%d free and one paid, then refusals", served, refused, coordinator.FreeDeltas)
	}
	// A delta made already costs nothing to serve again.
	if code, b := g.getBody(held.SnapshotURL + "/f32/from/0"); code != http.StatusOK {
		t.Fatalf("a delta made already: %d %s", code, b)
	}
}
