package coordinator

import (
	"context"
	"net/http"
	"strconv"
)

// Rebasing (docs/PROTOCOL.md, "Snapshots"): a worker whose lease names a
// version the snapshot cache no longer holds is served the current version
// instead, and computes from it. The response says which version it is
// (SnapshotVersionHeader), the worker reports that version as its result's
// base, and the lease accepts either its own base or the one served in its
// place (engine.Lease.Served). The result is fresher than the lease asked,
// so the staleness bound still holds. Only a worker that said in hello it
// reads the header (snapshot_rebase) is rebased, only from its own address,
// and never a copy (a spot check compares copies from one base) or a lease
// of a synchronous round (whose base is the round's). Anyone else gets 410
// as before: it gives the lease back and is granted one on a kept version.

// SnapshotVersionHeader names the version a full snapshot response (f32
// or f16) holds when it is not the version its URL names.
const SnapshotVersionHeader = "X-Crowdtrain-Snapshot-Version"

// snapshotFor is the snapshot to serve for version in run: the cached
// one, or the current one in its place when version was evicted and the
// requesting worker's leases on it can be rebased (rebased is then true).
// nil: there is none to serve (410).
func (s *Server) snapshotFor(r *http.Request, j *Job, run string, version int64) (snap *snapshot, rebased bool) {
	if run != strconv.FormatInt(j.run, 10) {
		return nil, false
	}
	if snap := j.snaps.snapshot(version); snap != nil {
		return snap, false
	}
	snap = j.rebase(r.Context(), r.Header.Get(WorkerHeader), s.clientKey(r), version)
	return snap, snap != nil
}

// rebase marks the worker's leases based on the evicted version as served
// the current one and returns it; nil when the worker or none of its
// leases may be rebased.
func (j *Job) rebase(ctx context.Context, worker, client string, version int64) *snapshot {
	if worker == "" {
		return nil
	}
	var out *snapshot
	_ = j.exec(ctx, func(st *jobState) {
		m, ok := st.members[worker]
		if !ok || !m.rebase || m.address != client || st.spec.Rounds() || version >= st.published {
			return
		}
		cur := j.snaps.newest()
		if cur == nil || cur.version != st.published {
			return
		}
		for _, l := range st.sched.Leases() {
			if l.Worker == worker && l.Base == version && !l.IsCopy() {
				l.Served = cur.version
				out = cur
			}
		}
		if out != nil {
			st.rebased++
		}
	})
	return out
}

// serveRebased writes body, version's snapshot, served for a URL that
// names an evicted version. It is never cached:
// the URL's own content is another version's.
func (s *Server) serveRebased(w http.ResponseWriter, r *http.Request, j *Job, kind served, version int64, body []byte) {
	h := w.Header()
	h.Set(SnapshotVersionHeader, strconv.FormatInt(version, 10))
	h.Set("Cache-Control", "no-store")
	s.writeBody(w, r, j, kind, body)
}
