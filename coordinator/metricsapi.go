package coordinator

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/gorilla/mux"

	"github.com/crowdtrain/crowdtrain/store"
)

// handleMetrics serves a job's metrics history, never more than
// MetricsPageMax rows at once (docs/API.md):
//
//	?points=N           at most N rows sampled over the whole history
//	?after=CURSOR&limit=N   the page after CURSOR ("" is the start), oldest first
//	?limit=N            the newest N rows
//	(nothing)           the first page
//
// A full page carries the next page's cursor in X-Next-Cursor and Link.
func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	id := mux.Vars(r)["id"]
	if s.job(id) == nil {
		writeError(w, http.StatusNotFound, "no job %q", id)
		return
	}
	q := r.URL.Query()
	max := s.cfg.MetricsPageMax
	number := func(name string, min int) (int, bool) {
		v := q.Get(name)
		n, err := strconv.Atoi(v)
		if err != nil || n < min {
			writeError(w, http.StatusBadRequest, "%s must be a whole number >= %d (at most %d rows come back at once), got %q", name, min, max, v)
			return 0, false
		}
		return n, true
	}
	var (
		points, limit int
		after         store.MetricCursor
		paged         = !q.Has("limit") || q.Has("after")
	)
	ok := true
	if q.Has("points") {
		if q.Has("after") || q.Has("limit") {
			writeError(w, http.StatusBadRequest, "points samples the whole history: give it alone, not with after or limit")
			return
		}
		if points, ok = number("points", 2); !ok {
			return
		}
		points = min(points, max)
	}
	limit = max
	if q.Has("limit") {
		if limit, ok = number("limit", 1); !ok {
			return
		}
		limit = min(limit, max)
	}
	if q.Has("after") {
		var err error
		if after, err = store.ParseMetricCursor(q.Get("after")); err != nil {
			writeError(w, http.StatusBadRequest, "%v", err)
			return
		}
	}
	out := []store.Metric{}
	nextCursor := ""
	if st := s.cfg.Store; st != nil {
		var (
			ms   []store.Metric
			next store.MetricCursor
			err  error
		)
		switch {
		case points > 0:
			ms, err = st.MetricsSampled(r.Context(), id, points)
		case paged:
			ms, next, err = st.MetricsAfter(r.Context(), id, after, limit)
		default:
			ms, err = st.Metrics(r.Context(), id, limit)
		}
		if err != nil {
			writeError(w, http.StatusInternalServerError, "reading metrics: %v", err)
			return
		}
		if points == 0 && paged && len(ms) == limit {
			nextCursor = next.String()
		}
		out = append(out, ms...)
	}
	// A full page is bulk (about 1 MB for 5,000 rows, from a request of
	// 100 bytes, and a client that does not read it pins as much kernel
	// memory): it is charged to the anonymous budget like a shard, except
	// for the signed-in operator's admin page, and written paced.
	body, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		writeError(w, http.StatusInternalServerError, "encoding metrics: %v", err)
		return
	}
	body = append(body, '\n')
	if !s.signedIn(r) && !s.chargeBulk(w, r, len(body)) {
		return
	}
	if nextCursor != "" {
		w.Header().Set("X-Next-Cursor", nextCursor)
		w.Header().Set("Link", "<"+r.URL.Path+"?after="+url.QueryEscape(nextCursor)+"&limit="+strconv.Itoa(limit)+`>; rel="next"`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	if err := s.writePaced(w, body); err != nil {
		s.cfg.Logger.Info(fmt.Sprintf("%s %q from %s: %v", r.Method, r.URL.Path, r.RemoteAddr, err), "remote", r.RemoteAddr)
	}
}
