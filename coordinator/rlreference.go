package coordinator

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/store"
	"github.com/gorilla/mux"
)

// The KL penalty's reference policy (docs/TRAINING.md, "The KL
// penalty"). An RL job with kl_coef above 0 penalises its policy's drift
// from the policy it started from, its version 0. The learn worker
// computes the reference's log-probabilities of each completion itself,
// from the reference's parameters, which it GETs once from the URL its
// learn leases name: the coordinator does no forward pass for it, and a
// learn result is checked as any gradient is.
//
// The reference must be the same after a restart, so its checkpoint of
// version 0 is kept past the pruning (store.Checkpoint.KeepVersion0); a
// job stopped before that checkpoint was durable reads its policy again,
// pinned as a resumed job's version 0 is (reinit).

// hasKL reports whether spec is an RL job with a KL penalty.
func hasKL(spec jobspec.Spec) bool { return spec.RL != nil && spec.RL.KLCoef > 0 }

// setReference keeps params as the job's KL reference, when it has one.
func (j *Job) setReference(params []float32) {
	if hasKL(j.Spec) {
		j.rlReference = protocol.EncodeFloats(params)
	}
}

// referencePath is where the job's reference policy is served.
func (j *Job) referencePath() string { return "/api/v1/jobs/" + j.ID + "/reference" }

// resumeReference sets a resumed RL job's KL reference: its version 0
// checkpoint; or, when it had none, the parameters reinit read (reread
// false: they are its version 0); or, when a newer checkpoint superseded
// version 0 before it was durable, its policy read again, which must be
// the very one it started from. A job without a KL penalty, or one that
// ended, needs none.
func (s *Server) resumeReference(ctx context.Context, j *Job, st *store.Store, reread bool) error {
	if !hasKL(j.Spec) || ended(j.st.state) { // an ended job hands out no learn lease
		return nil
	}
	if !reread {
		j.setReference(j.st.model.Params)
		return nil
	}
	c, err := st.Checkpoint(ctx, j.ID, 0)
	switch {
	case err == nil && len(c.Params) == 4*j.model.NumParams:
		j.rlReference = c.Params
		return nil
	case err == nil:
		return fmt.Errorf("its KL reference, the checkpoint of version 0, holds %d bytes of parameters, the model has %d parameters", len(c.Params), j.model.NumParams)
	case !errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("reading its KL reference, the checkpoint of version 0: %w", err)
	}
	const because = "its KL reference, version 0, was never saved"
	params, in, now, err := s.readStart(ctx, j, because)
	switch {
	case err != nil:
		return fmt.Errorf("%s, and reading its policy again failed: %w", because, err)
	case params == nil:
		return fmt.Errorf("%s, and it names no policy to read again", because)
	case in.Job != "" && now.Version != in.Version:
		return &jobspec.Error{Key: "policy", Problem: fmt.Sprintf("%s, and its policy, job %s, is at version %d now, not the version %d the job started from: delete the job, or submit it again", because, now.Job, now.Version, in.Version)}
	}
	j.setReference(params)
	return nil
}

// handleReference serves an RL job's KL reference, immutable for the
// job's life.
func (s *Server) handleReference(w http.ResponseWriter, r *http.Request) {
	id := mux.Vars(r)["id"]
	j := s.job(id)
	if j == nil {
		writeError(w, http.StatusNotFound, "no job %q", id)
		return
	}
	if j.rlReference == nil {
		writeError(w, http.StatusNotFound, "job %s has no KL reference: only an RL job with kl_coef above 0 has one", j.ID)
		return
	}
	s.serveImmutable(w, r, j, servedSnapshot, fmt.Sprintf(`"%s-reference"`, j.ID), j.rlReference, false)
}
