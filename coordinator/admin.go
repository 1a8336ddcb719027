package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"
	"github.com/gorilla/mux"

	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/nn/onnx"
	"github.com/crowdtrain/crowdtrain/store"
)

// maxSpecBytes bounds a submitted job spec.
const maxSpecBytes = 1 << 20

// SubmitRequest is the body of POST /api/v1/jobs: a spec in YAML or JSON,
// or the name of a built-in job.
type SubmitRequest struct {
	Spec   string `json:"spec,omitempty"`
	Preset string `json:"preset,omitempty"`
}

func (s *Server) adminRoutes(r *mux.Router, api *mux.Router) {
	r.HandleFunc("/admin/login", s.handleLogin).Methods(http.MethodPost)
	r.HandleFunc("/admin/logout", s.handleLogout).Methods(http.MethodPost)
	api.HandleFunc("/session", s.admin(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]bool{"signed_in": true})
	})).Methods(http.MethodGet)
	api.HandleFunc("/presets", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, jobspec.PresetNames())
	}).Methods(http.MethodGet)
	api.HandleFunc("/jobs", s.admin(s.handleSubmit)).Methods(http.MethodPost)
	api.HandleFunc("/jobs/{id}", s.admin(s.handlePatch)).Methods(http.MethodPatch)
	for action, f := range map[string]func(context.Context, string) (JobView, error){
		"pause": s.PauseJob, "resume": s.ResumeJob, "stop": s.StopJob,
	} {
		api.HandleFunc("/jobs/{id}/"+action, s.admin(func(w http.ResponseWriter, r *http.Request) {
			v, err := f(r.Context(), mux.Vars(r)["id"])
			writeControl(w, v, err)
		})).Methods(http.MethodPost)
	}
	api.HandleFunc("/jobs/{id}/checkpoints", s.admin(s.handleCheckpoints)).Methods(http.MethodGet)
	api.HandleFunc("/jobs/{id}/checkpoints/{version:[0-9]+}/{format:safetensors|onnx}", s.admin(s.handleCheckpointDownload)).Methods(http.MethodGet)
	api.HandleFunc("/jobs/{id}/export", s.admin(s.handleExportLive)).Methods(http.MethodGet)
	api.HandleFunc("/jobs/{id}/sample", s.admin(s.handleSample)).Methods(http.MethodPost)
	api.HandleFunc("/workers", s.admin(s.handleWorkers)).Methods(http.MethodGet)
	api.HandleFunc("/workers/{id}", s.admin(s.handleDisconnect)).Methods(http.MethodDelete)
	api.HandleFunc("/events", s.admin(s.handleEvents)).Methods(http.MethodGet)
}

// writeControl answers a job control request: the job's view, or the
// error with the status that fits it.
func writeControl(w http.ResponseWriter, v JobView, err error) {
	var se *jobspec.Error
	switch {
	case err == nil:
		writeJSON(w, v)
	case errors.As(err, &se):
		writeJSONStatus(w, http.StatusBadRequest, map[string]string{"error": se.Error(), "key": se.Key, "problem": se.Problem})
	case errors.Is(err, ErrNoJob):
		writeError(w, http.StatusNotFound, "%v", err)
	case errors.Is(err, ErrTransition):
		writeError(w, http.StatusConflict, "%v", err)
	default:
		writeError(w, http.StatusServiceUnavailable, "%v", err)
	}
}

// readJSONBody decodes r's body, a JSON object of the form shown, into v,
// refusing unknown fields, and answers the error itself when it cannot: 413
// for a body over limit bytes (what names it), 400 for one that is not of
// the form.
func readJSONBody(w http.ResponseWriter, r *http.Request, v any, limit int, what, form string) bool {
	raw, err := io.ReadAll(io.LimitReader(r.Body, int64(limit)+1))
	if err != nil {
		writeError(w, http.StatusBadRequest, "reading the request: %v", err)
		return false
	}
	if len(raw) > limit {
		writeError(w, http.StatusRequestEntityTooLarge, "%s is at most %d bytes", what, limit)
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "the body must be JSON %s: %v", form, err)
		return false
	}
	return true
}

func (s *Server) handleSubmit(w http.ResponseWriter, r *http.Request) {
	var req SubmitRequest
	if !readJSONBody(w, r, &req, maxSpecBytes, "a job spec", `{"spec": "<YAML or JSON text>"} or {"preset": "NAME"}`) {
		return
	}
	var (
		spec jobspec.Spec
		err  error
	)
	switch {
	case req.Preset != "" && req.Spec != "":
		writeError(w, http.StatusBadRequest, "give a spec or a preset, not both")
		return
	case req.Preset != "":
		var ok bool
		spec, ok = jobspec.Preset(req.Preset)
		if !ok {
			writeJSONStatus(w, http.StatusBadRequest, map[string]string{
				"error":   fmt.Sprintf("unknown preset %q (presets: %s)", req.Preset, strings.Join(jobspec.PresetNames(), ", ")),
				"key":     "preset",
				"problem": "unknown preset",
			})
			return
		}
	case strings.TrimSpace(req.Spec) != "":
		spec, err = jobspec.Parse([]byte(req.Spec))
	default:
		writeError(w, http.StatusBadRequest, "the spec is empty: paste a YAML or JSON job spec, or pick a preset")
		return
	}
	if err == nil {
		err = s.resolveData(&spec)
	}
	if err == nil && spec.Sweep != nil {
		var x *Sweep
		if x, err = s.AddSweep(spec); err == nil { // sweep.go
			w.Header().Set("Location", "/api/v1/jobs/"+x.ID)
			writeJSONStatus(w, http.StatusCreated, x.View(r.Context()))
			return
		}
	}
	if err == nil {
		var j *Job
		if j, err = s.AddJob(spec); err == nil {
			v, _, verr := s.JobView(r.Context(), j.ID)
			if verr != nil {
				writeError(w, http.StatusServiceUnavailable, "job %s started but cannot be shown: %v", j.ID, verr)
				return
			}
			w.Header().Set("Location", "/api/v1/jobs/"+j.ID)
			writeJSONStatus(w, http.StatusCreated, v)
			return
		}
	}
	writeControl(w, JobView{}, err)
}

func (s *Server) handlePatch(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 4097))
	if err != nil || len(body) > 4096 {
		writeError(w, http.StatusBadRequest, `the body must be a JSON object of at most 4096 bytes, such as {"mode": "diloco"} or {"lr": 0.0005, "max_staleness": 16}`)
		return
	}
	v, err := s.PatchJob(r.Context(), mux.Vars(r)["id"], body)
	writeControl(w, v, err)
}

func (s *Server) handleCheckpointDownload(w http.ResponseWriter, r *http.Request) {
	vars := mux.Vars(r)
	id := vars["id"]
	if s.job(id) == nil {
		writeError(w, http.StatusNotFound, "no job %q", id)
		return
	}
	if s.cfg.Store == nil {
		writeError(w, http.StatusNotFound, "this coordinator keeps no checkpoints (start it with --db)")
		return
	}
	version, err := strconv.ParseInt(vars["version"], 10, 64)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad version %q", vars["version"])
		return
	}
	format := vars["format"]
	var buf bytes.Buffer
	if _, err := Export(r.Context(), s.cfg.Store, id, version, format, &buf); err != nil {
		code := http.StatusInternalServerError
		if errors.Is(err, store.ErrNotFound) || strings.Contains(err.Error(), "has no checkpoint") {
			code = http.StatusNotFound
		}
		writeError(w, code, "%v", err)
		return
	}
	s.serveDownload(w, r, fmt.Sprintf("%s-v%d.%s", id, version, format), buf.Bytes())
}

// handleExportLive writes the job's parameters as they are now, as
// safetensors or, with ?format=onnx, as an ONNX model.
func (s *Server) handleExportLive(w http.ResponseWriter, r *http.Request) {
	id := mux.Vars(r)["id"]
	format := r.URL.Query().Get("format")
	if format == "" {
		format = FormatSafetensors
	}
	if format != FormatSafetensors && format != FormatONNX {
		writeError(w, http.StatusBadRequest, "format %q: want %s", format, strings.Join(ExportFormats, " or "))
		return
	}
	if best, ok, err := s.bestOf(id); ok { // a sweep exports its best trial
		if err != nil {
			writeError(w, http.StatusConflict, "%v", err)
			return
		}
		id = best
	}
	j := s.job(id)
	if j == nil {
		writeError(w, http.StatusNotFound, "no job %q", id)
		return
	}
	params, version, err := j.currentParams(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "job %s: %v", id, err)
		return
	}
	var buf bytes.Buffer
	meta := ExportMetadata(id, j.Spec, version, "admin export at "+time.Now().UTC().Format(time.RFC3339))
	if format == FormatONNX {
		err = onnx.Write(&buf, j.model, params, meta)
	} else {
		err = nn.WriteSafetensors(&buf, j.model.Layout, params, meta)
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, "export: %v", err)
		return
	}
	s.serveDownload(w, r, fmt.Sprintf("%s-v%d.%s", id, version, format), buf.Bytes())
}

func (s *Server) serveDownload(w http.ResponseWriter, r *http.Request, name string, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", `attachment; filename="`+name+`"`)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	if err := s.writePaced(w, body); err != nil {
		s.cfg.Logger.Info(fmt.Sprintf("%s %q from %s: %v", r.Method, r.URL.Path, r.RemoteAddr, err), "remote", r.RemoteAddr)
	}
}

// DisconnectWorker closes a worker's connection; its leases go back to the
// queue. A volunteer's worker reconnects by itself after its backoff.
func (s *Server) DisconnectWorker(id string) bool {
	s.mu.Lock()
	wc := s.workers[id]
	s.mu.Unlock()
	if wc == nil {
		return false
	}
	s.cfg.Logger.Info(fmt.Sprintf("worker %s: disconnected by the operator", id), logWorker, id)
	go wc.ws.Close(websocket.StatusPolicyViolation, "disconnected by the operator")
	return true
}

func (s *Server) handleDisconnect(w http.ResponseWriter, r *http.Request) {
	id := mux.Vars(r)["id"]
	if !s.DisconnectWorker(id) {
		writeError(w, http.StatusNotFound, "no connected worker %q; GET /api/v1/workers lists them", id)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
