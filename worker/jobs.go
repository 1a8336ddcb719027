package worker

import (
	"fmt"
	"slices"
	"strings"

	"github.com/crowdtrain/crowdtrain/compute"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// A connection is not bound to one job: the coordinator places each want
// on a job and sends an assign before the first lease of a job the
// worker was not computing for (docs/PROTOCOL.md, Jobs). Leases name
// their job, and the worker keeps, per job it holds leases of, the model,
// the update encoder (its error feedback) and the computer.

// jobCtx is what a session needs to compute for one job.
type jobCtx struct {
	info   protocol.JobInfo
	limits protocol.Limits
	model  *nn.Model
	enc    *encoder
	comp   *compute.Computer
	// broken says why leases of the job cannot be computed here (a model
	// this worker cannot build): they are given back with it.
	broken string
}

// codec is the update codec the job's results go in ("" when its model
// cannot be built here).
func (jc *jobCtx) codec() string {
	if jc.enc == nil {
		return ""
	}
	return jc.enc.codec()
}

// maxJobs bounds the job contexts a session keeps: the current job, the
// one before it (whose leases may still be in the pipeline) and a spare.
const maxJobs = 3

// addJob records job info from a welcome or an assign and makes it the
// current one. A model this worker cannot build is not an error for the
// session: that job's leases are given back saying why.
func (s *session) addJob(info protocol.JobInfo, limits protocol.Limits) *jobCtx {
	s.jobsMu.Lock()
	defer s.jobsMu.Unlock()
	if jc := s.jobs[info.ID]; jc != nil && jc.info.NumParams == info.NumParams {
		s.order = append(removeString(s.order, info.ID), info.ID)
		s.revoked.Delete(info.ID)
		s.current = jc
		return jc
	}
	jc := &jobCtx{info: info, limits: limits}
	model, err := nn.NewModel(info.Model)
	switch {
	case err != nil:
		jc.broken = fmt.Sprintf("job %s has a model this worker cannot build: %v", info.ID, err)
	case model.NumParams != info.NumParams:
		jc.broken = fmt.Sprintf("job %s: model has %d parameters here, %d at the coordinator: upgrade this worker", info.ID, model.NumParams, info.NumParams)
	default:
		jc.model = model
		var warn string
		if jc.enc, warn = newEncoder(info); warn != "" {
			s.w.cfg.Logf("%s", warn)
		}
		jc.comp = compute.NewComputer(s.w.cfg.Backend, model)
		jc.comp.Share(&s.backend)
	}
	if jc.broken != "" {
		s.w.cfg.Logf("%s", jc.broken)
	}
	if s.jobs == nil {
		s.jobs = map[string]*jobCtx{}
	}
	s.jobs[info.ID] = jc
	s.order = append(removeString(s.order, info.ID), info.ID)
	// The oldest go first; a lease of a dropped job that is still queued
	// is given back as of an unknown job.
	for len(s.order) > maxJobs {
		delete(s.jobs, s.order[0])
		s.order = s.order[1:]
	}
	s.revoked.Delete(info.ID)
	s.current = jc
	s.w.update(func(st *Stats) { st.JobID, st.JobName = info.ID, info.Name })
	return jc
}

func removeString(list []string, v string) []string {
	return slices.DeleteFunc(list, func(x string) bool { return x == v })
}

// job returns the context of job id, or nil and why there is none.
func (s *session) job(id string) (*jobCtx, string) {
	s.jobsMu.Lock()
	defer s.jobsMu.Unlock()
	jc := s.jobs[id]
	switch {
	case jc == nil:
		return nil, fmt.Sprintf("the lease is for job %q, which the coordinator did not assign to this worker", truncate(id, 64))
	case jc.broken != "":
		return nil, jc.broken
	}
	return jc, ""
}

// maxMessageBytes is the largest message any of the session's jobs allows.
func (s *session) maxMessageBytes() int64 {
	s.jobsMu.Lock()
	defer s.jobsMu.Unlock()
	var n int64 = 1 << 20
	for _, jc := range s.jobs {
		n = max(n, jc.limits.MaxMessageBytes)
	}
	return n
}

// isRevoked reports whether the coordinator voided job id's leases.
func (s *session) isRevoked(id string) bool {
	_, ok := s.revoked.Load(id)
	return ok
}

// heldData lists the data sets whose shards the worker caches, by the key
// in their URLs (/api/v1/data/KEY/shards/...), for hello.
func (w *Worker) heldData() []string {
	w.shardMu.Lock()
	defer w.shardMu.Unlock()
	var keys []string
	for _, ref := range w.shardOrder {
		if k := dataKeyOf(ref); k != "" && !slices.Contains(keys, k) && len(keys) < 64 {
			keys = append(keys, k)
		}
	}
	return keys
}

// dataKeyOf is the data set key in a shard URL, "" if it names none.
func dataKeyOf(ref string) string {
	_, rest, ok := strings.Cut(ref, "/api/v1/data/")
	if !ok {
		return ""
	}
	key, _, ok := strings.Cut(rest, "/")
	if !ok || key == "" || len(key) > 64 {
		return ""
	}
	return key
}
