package coordinator

import (
	"container/list"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/gorilla/mux"

	"github.com/crowdtrain/crowdtrain/protocol"
)

// Snapshot codecs and deltas (docs/PROTOCOL.md, "Snapshots").
//
// The job's snapshot cache (snapcache.go) keeps the published snapshots
// within its bound: the versions leases name and workers may still hold,
// from which a delta to a newer version is made. f16 bodies are built once
// per version, on first request, and kept with the snapshot; deltas are
// made on first request, in the handler's goroutine (never the job's
// loop), and kept in the same cache.

// encodeSnapshot is the f32 body of the current version's snapshot
// (snapshotParams), the index of its first NaN or ±Inf (-1 if none; such
// a body must not be published) and that value. In a job that serves f16
// snapshots it holds the values the f16 body decodes to, widened: a
// worker that reads only f32 computes from the same parameters as the
// others, so a spot check's copy matches its original whatever codec
// each worker reads, and the f16 body made from it is exact.
func (j *Job) encodeSnapshot() (body []byte, bad int, badValue float32) {
	body, bad = j.bodies.take(4*len(j.st.model.Params)), -1
	at := 0
	j.snapshotParams(func(block []float32) {
		var i int
		body, i = protocol.AppendFiniteFloats(body, block)
		if i >= 0 && bad < 0 {
			bad, badValue = at+i, block[i]
		}
		at += len(block)
	})
	if bad >= 0 || wireSnapshotCodec(j.Spec) != protocol.SnapshotF16 {
		return body, bad, badValue
	}
	protocol.RoundBodyToHalves(body)
	return body, -1, 0
}

// f16Body is the snapshot as f16, built on first use.
func (s *snapshot) f16Body() []byte {
	s.f16Once.Do(func() {
		p := make([]float32, len(s.body)/4)
		protocol.CopyFloats(p, s.body)
		s.f16 = protocol.EncodeHalves(make([]byte, 0, 2*len(p)), p)
	})
	return s.f16
}

// codecBody is the snapshot's body in codec.
func (s *snapshot) codecBody(codec string) []byte {
	if codec == protocol.SnapshotF16 {
		return s.f16Body()
	}
	return s.body
}

// snapshotCost is what a snapshot counts in the cache: its f32 body and,
// in a job that serves f16, the f16 body it will likely get.
func (j *Job) snapshotCost(body []byte) int64 {
	if wireSnapshotCodec(j.Spec) == protocol.SnapshotF16 {
		return int64(len(body) + len(body)/2)
	}
	return int64(len(body))
}

// snapshotCodec is the snapshot codec worker reads in this job: the
// job's, if the worker named it in hello, else f32.
func (j *Job) snapshotCodec(hello *protocol.Hello) string {
	if c := wireSnapshotCodec(j.Spec); c != protocol.SnapshotF32 && slices.Contains(hello.SnapshotCodecs, c) {
		return c
	}
	return protocol.SnapshotF32
}

// snapshotURL is the URL of version's snapshot in worker's codec.
func (j *Job) snapshotURL(worker string, version int64, baseURL string) string {
	if m, ok := j.st.members[worker]; ok && m.snapCodec == protocol.SnapshotF16 {
		return baseURL + j.snapshotPath(version) + "/" + protocol.SnapshotF16
	}
	return baseURL + j.snapshotPath(version)
}

// deltaKey names a delta: codec, from, to.
type deltaKey struct {
	codec    string
	from, to int64
}

type deltaEntry struct {
	key  deltaKey
	done chan struct{}
	body []byte
	err  error
	// In the snapshot cache (snapcache.go), under its pool's mutex.
	owner *snapCache
	elem  *list.Element // in the pool's age list once kept
}

type freeDeltaKey struct {
	client string
	to     int64
}

// freeDeltas is how many new deltas to one version a client holding a
// lease on it gets made without paying: an honest worker asks for one
// (from the snapshot it holds), a second covers the other codec or a
// worker beside it. Without the bound, one lease would let a client ask
// a delta from every version kept (tens of them, each milliseconds of
// CPU) for every version it leases.
const freeDeltas = 4

// maxFreeDeltaKeys bounds freeMade; past it the counts start again.
const maxFreeDeltaKeys = 4096

// handleSnapshotF16 serves a snapshot's f16 body.
func (s *Server) handleSnapshotF16(w http.ResponseWriter, r *http.Request) {
	vars := mux.Vars(r)
	j := s.job(vars["id"])
	if j == nil {
		writeError(w, http.StatusNotFound, "no job %q", vars["id"])
		return
	}
	version, err := strconv.ParseInt(vars["version"], 10, 64)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad version %q", vars["version"])
		return
	}
	snap, rebased := s.snapshotFor(r, j, vars["run"], version)
	if snap == nil {
		writeError(w, http.StatusGone, "snapshot %d of job %s is not available (too old or never published); release the lease and ask for a new one", version, j.ID)
		return
	}
	if rebased {
		s.serveRebased(w, r, j, servedSnapshot, snap.version, snap.f16Body())
		return
	}
	body := snap.f16Body()
	free := s.snapshotHeldFrom(r.Context(), r, j, version)
	s.serveImmutable(w, r, j, servedSnapshot, fmt.Sprintf(`"%s-r%d-v%d-f16"`, j.ID, j.run, version), body, free)
}

// handleSnapshotDelta serves the delta that turns snapshot from into
// snapshot version, both in codec.
func (s *Server) handleSnapshotDelta(w http.ResponseWriter, r *http.Request) {
	vars := mux.Vars(r)
	j := s.job(vars["id"])
	if j == nil {
		writeError(w, http.StatusNotFound, "no job %q", vars["id"])
		return
	}
	version, err := strconv.ParseInt(vars["version"], 10, 64)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad version %q", vars["version"])
		return
	}
	from, err := strconv.ParseInt(vars["from"], 10, 64)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad from version %q", vars["from"])
		return
	}
	codec := vars["codec"]
	if codec != protocol.SnapshotF32 && codec != protocol.SnapshotF16 {
		writeError(w, http.StatusNotFound, "no snapshot codec %q: f32 or f16", codec)
		return
	}
	if from > version {
		writeError(w, http.StatusBadRequest, "a delta goes from an older version to a newer one, not from %d to %d", from, version)
		return
	}
	if vars["run"] != strconv.FormatInt(j.run, 10) {
		writeError(w, http.StatusGone, "run %s of job %s is over (the current run is %d): fetch the full snapshot the lease names", vars["run"], j.ID, j.run)
		return
	}
	// The cache evicts oldest first: when version is gone, so is from,
	// and the worker's full snapshot request is the one served a newer
	// version in its place (rebase.go).
	to := j.snaps.snapshot(version)
	if to == nil {
		writeError(w, http.StatusGone, "snapshot %d of job %s is not available (too old or never published): fetch the full snapshot", version, j.ID)
		return
	}
	held := j.snaps.snapshot(from)
	if held == nil {
		writeError(w, http.StatusGone, "snapshot %d of job %s is no longer kept to make deltas from: fetch the full snapshot", from, j.ID)
		return
	}
	elem := 4
	if codec == protocol.SnapshotF16 {
		elem = 2
	}
	key := deltaKey{codec, from, version}
	free := s.snapshotHeldFrom(r.Context(), r, j, version)
	if !j.snaps.hasDelta(key) && (!free || !j.snaps.takeFree(s.clientKey(r), version)) {
		// Making a delta costs CPU: a client that holds no lease, or
		// asks for more new deltas to one version than a worker needs,
		// pays for it before, the size of the full body (no useful delta
		// is larger), not after.
		if !s.chargeBulk(w, r, len(to.codecBody(codec))) {
			return
		}
		free = true
	}
	body, err := j.snaps.delta(key, func() ([]byte, error) {
		return protocol.EncodeDelta(nil, held.codecBody(codec), to.codecBody(codec), elem)
	})
	if err != nil {
		writeError(w, http.StatusInternalServerError, "delta from %d to %d: %v", from, version, err)
		return
	}
	s.serveImmutable(w, r, j, servedDelta, fmt.Sprintf(`"%s-r%d-v%d-%s-from%d"`, j.ID, j.run, version, codec, from), body, free)
}
