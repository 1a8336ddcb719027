package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/gorilla/mux"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/engine"
	"github.com/crowdtrain/crowdtrain/store"
)

// The public HTTP API: routes, jobs, snapshots, shards and metrics.

func (s *Server) routes() {
	r := mux.NewRouter()
	r.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	}).Methods(http.MethodGet, http.MethodHead)
	r.HandleFunc("/ws", s.serveWorker)
	api := r.PathPrefix("/api/v1").Subrouter()
	api.HandleFunc("/jobs", s.handleJobs).Methods(http.MethodGet)
	api.HandleFunc("/jobs/{id}", s.handleJob).Methods(http.MethodGet)
	api.HandleFunc("/sweeps", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, s.Sweeps(r.Context())) }).Methods(http.MethodGet)
	api.HandleFunc("/jobs/{id}/snapshots/{run:[0-9]+}/{version:[0-9]+}", s.handleSnapshot).Methods(http.MethodGet, http.MethodHead)
	api.HandleFunc("/jobs/{id}/snapshots/{run:[0-9]+}/{version:[0-9]+}/f16", s.handleSnapshotF16).Methods(http.MethodGet, http.MethodHead)
	api.HandleFunc("/jobs/{id}/snapshots/{run:[0-9]+}/{version:[0-9]+}/{codec:f32|f16}/from/{from:[0-9]+}", s.handleSnapshotDelta).Methods(http.MethodGet, http.MethodHead)
	api.HandleFunc("/jobs/{id}/reference", s.handleReference).Methods(http.MethodGet, http.MethodHead) // rlreference.go
	api.HandleFunc("/jobs/{id}/metrics", s.handleMetrics).Methods(http.MethodGet)
	api.HandleFunc("/relays", s.handleRelays).Methods(http.MethodGet)
	s.relayRoutes(api)
	api.HandleFunc("/jobs/{id}/shards/v{format:[0-9]+}/{shard:[0-9]+}", s.handleShard).Methods(http.MethodGet, http.MethodHead)
	api.HandleFunc("/data/{key:[0-9a-f]+}/shards/v{format:[0-9]+}/{shard:[0-9]+}", s.handleDataShard).Methods(http.MethodGet, http.MethodHead)
	api.HandleFunc("/jobs/{id}/shards/{shard:[0-9]+}", s.handleShard).Methods(http.MethodGet, http.MethodHead)
	s.adminRoutes(r, api)
	s.volunteerRoutes(api)
	r.Handle("/metrics", s.guardMetrics(s.metrics.handler())).Methods(http.MethodGet)
	api.NotFoundHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such API endpoint %s; see docs/API.md", r.URL.Path)
	})
	if s.cfg.Pages != nil {
		r.PathPrefix("/").Handler(s.budgetPages(s.cfg.Pages))
	} else {
		r.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprint(w, `<!doctype html><title>crowdtrain</title><h1>crowdtrain coordinator</h1>
<p>Jobs: <a href="/api/v1/jobs">/api/v1/jobs</a> · Workers: <a href="/api/v1/workers">/api/v1/workers</a></p>
<p>Join with a native worker: <code>crowdtrain work --coordinator ws://HOST/ws</code></p>`)
		}).Methods(http.MethodGet)
	}
	s.router = r
	s.handler = s.checkAccess(r)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, format string, args ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": fmt.Sprintf(format, args...)})
}

func (s *Server) handleJobs(w http.ResponseWriter, r *http.Request) {
	views, err := s.JobViews(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "jobs unavailable: %v", err)
		return
	}
	writeJSON(w, views)
}

func (s *Server) handleJob(w http.ResponseWriter, r *http.Request) {
	id := mux.Vars(r)["id"]
	if x := s.sweep(id); x != nil {
		writeJSON(w, x.View(r.Context()))
		return
	}
	v, ok, err := s.JobView(r.Context(), id)
	switch {
	case !ok:
		writeError(w, http.StatusNotFound, "no job %q; GET /api/v1/jobs lists them", id)
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, "job %s unavailable: %v", id, err)
	default:
		writeJSON(w, v)
	}
}

func (s *Server) handleWorkers(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, s.workerViews(r.Context()))
}

// workerViews is WorkerViews with each worker's held leases.
func (s *Server) workerViews(ctx context.Context) []WorkerView {
	views := s.WorkerViews()
	held := map[string][]uint64{}
	s.mu.Lock()
	jobs := slices.Clone(s.jobs)
	s.mu.Unlock()
	for _, j := range jobs {
		_ = j.exec(ctx, func(st *jobState) {
			for id, l := range st.sched.Leases() {
				held[l.Worker] = append(held[l.Worker], id)
			}
		})
	}
	for i := range views {
		if ids := held[views[i].ID]; ids != nil {
			slices.Sort(ids)
			views[i].Leases = ids
		}
	}
	return views
}

// serveImmutable serves bytes that never change under this URL, so any
// cache between here and the volunteers may keep them. Unless free, the
// body is charged to the client's anonymous budget. A body sent is
// counted (wire.go) as kind for job j, and for the worker the request's
// X-Crowdtrain-Worker header names.
func (s *Server) serveImmutable(w http.ResponseWriter, r *http.Request, j *Job, kind served, etag string, body []byte, free bool) {
	h := w.Header()
	if r.Header.Get("If-None-Match") == etag {
		h.Set("ETag", etag)
		w.WriteHeader(http.StatusNotModified)
		return
	}
	if r.Method != http.MethodHead && !free && !s.chargeBulk(w, r, len(body)) {
		return
	}
	h.Set("ETag", etag)
	h.Set("Cache-Control", "public, max-age=31536000, immutable")
	s.writeBody(w, r, j, kind, body)
}

// writeBody writes body as the response's octet stream, paced, and counts
// it as served; a HEAD request gets the headers only.
func (s *Server) writeBody(w http.ResponseWriter, r *http.Request, j *Job, kind served, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if r.Method == http.MethodHead {
		return
	}
	if err := s.writePaced(w, body); err != nil {
		s.cfg.Logger.Info(fmt.Sprintf("%s %q from %s: %v", r.Method, r.URL.Path, r.RemoteAddr, err), "remote", r.RemoteAddr)
		return
	}
	s.countServed(r, j, kind, len(body))
}

func (s *Server) handleSnapshot(w http.ResponseWriter, r *http.Request) {
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
		// Either never published or evicted from the snapshot cache, to a
		// worker that cannot be rebased: it should give the lease back
		// and ask again.
		writeError(w, http.StatusGone, "snapshot %d of job %s is not available (too old or never published); release the lease and ask for a new one", version, j.ID)
		return
	}
	if rebased {
		s.serveRebased(w, r, j, servedSnapshot, snap.version, snap.body)
		return
	}
	free := s.snapshotHeldFrom(r.Context(), r, j, version)
	s.serveImmutable(w, r, j, servedSnapshot, fmt.Sprintf(`"%s-r%d-v%d"`, j.ID, j.run, version), snap.body, free)
}

func (s *Server) handleShard(w http.ResponseWriter, r *http.Request) {
	vars := mux.Vars(r)
	j := s.job(vars["id"])
	if j == nil {
		writeError(w, http.StatusNotFound, "no job %q", vars["id"])
		return
	}
	if f := vars["format"]; f != strconv.Itoa(dataset.ShardVersion) {
		if f == "" {
			f = "1"
		}
		writeError(w, http.StatusGone, "shard format %s is not served: this coordinator serves format %d at /api/v1/jobs/%s/shards/v%d/N; update the worker",
			f, dataset.ShardVersion, j.ID, dataset.ShardVersion)
		return
	}
	shard, err := strconv.Atoi(vars["shard"])
	if err != nil || shard < 0 || shard >= len(j.shardBody) {
		writeError(w, http.StatusNotFound, "job %s has shards 0..%d, not %q", j.ID, len(j.shardBody)-1, vars["shard"])
		return
	}
	free := s.leaseHeldFrom(r.Context(), r, j, func(l *engine.Lease) bool { return l.Task.Shard == shard })
	s.serveImmutable(w, r, j, servedShard, fmt.Sprintf(`"%s-s%d-f%d-%d"`, j.ID, j.Spec.ShardSize, dataset.ShardVersion, shard), j.shardBody[shard], free)
}

func (s *Server) handleCheckpoints(w http.ResponseWriter, r *http.Request) {
	id := mux.Vars(r)["id"]
	if s.job(id) == nil {
		writeError(w, http.StatusNotFound, "no job %q", id)
		return
	}
	out := []store.CheckpointInfo{}
	if s.cfg.Store != nil {
		cs, err := s.cfg.Store.Checkpoints(r.Context(), id)
		if err != nil {
			writeError(w, http.StatusInternalServerError, "reading checkpoints: %v", err)
			return
		}
		out = append(out, cs...)
	}
	writeJSON(w, out)
}
