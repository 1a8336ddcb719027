package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/crowdtrain/crowdtrain/jobspec"
)

// StateStopped is a job an operator stopped: like done, it hands out no
// more work and is not resumed after a restart.
const StateStopped = "stopped"

// ErrNoJob is returned by the control methods for an unknown job id.
var ErrNoJob = errors.New("no such job")

// ErrTransition is wrapped by the control methods when the job's state does
// not allow the change (resuming a job that is done, say).
var ErrTransition = errors.New("not possible in the job's state")

// Settings are what an operator may change while a job runs. Nil fields
// stay as they are.
type Settings struct {
	LR           *float64 `json:"lr,omitempty"`            // the outer optimizer's learning rate
	MaxStaleness *int     `json:"max_staleness,omitempty"` // see jobspec.Spec.MaxStaleness
}

// control runs f on the job's loop and returns the job's view after it.
func (s *Server) control(ctx context.Context, id string, f func(j *Job, st *jobState) error) (JobView, error) {
	j := s.job(id)
	if j == nil {
		return JobView{}, fmt.Errorf("%w %q; GET /api/v1/jobs lists them", ErrNoJob, id)
	}
	var v JobView
	var ferr error
	if err := j.exec(ctx, func(st *jobState) {
		if ferr = f(j, st); ferr == nil {
			v = j.view(st)
		}
	}); err != nil {
		return JobView{}, fmt.Errorf("job %s: %w", id, err)
	}
	v.Workers, v.WorkerUtilisation = s.countWorkers(id), s.meanUtilisation(id)
	return v, ferr
}

// PauseJob stops handing out work. Leases out now go back to the queue at
// once (their results will be refused as not_running), so a resumed job
// starts from a clean slate. The state is checkpointed.
func (s *Server) PauseJob(ctx context.Context, id string) (JobView, error) {
	return s.control(ctx, id, func(j *Job, st *jobState) error {
		if st.state != StateRunning {
			return fmt.Errorf("job %s is %s, only a running job can be paused: %w", id, st.state, ErrTransition)
		}
		j.unleased(st.sched.ReleaseAll())
		j.setState(StatePaused)
		j.logf("job %s: paused by the operator at version %d", id, st.model.Version)
		j.recordNote("paused")
		j.checkpoint(true)
		return nil
	})
}

// ResumeJob hands out work again after PauseJob.
func (s *Server) ResumeJob(ctx context.Context, id string) (JobView, error) {
	return s.control(ctx, id, func(j *Job, st *jobState) error {
		if st.state != StatePaused {
			return fmt.Errorf("job %s is %s, only a paused job can be resumed: %w", id, st.state, ErrTransition)
		}
		j.setState(StateRunning)
		j.logf("job %s: resumed by the operator at version %d", id, st.model.Version)
		j.recordNote("resumed")
		j.checkpoint(true)
		return nil
	})
}

// StopJob ends a running or paused job for good; its model stays as it is,
// checkpointed and exportable.
func (s *Server) StopJob(ctx context.Context, id string) (JobView, error) {
	return s.control(ctx, id, func(j *Job, st *jobState) error {
		if st.state != StateRunning && st.state != StatePaused {
			return fmt.Errorf("job %s is already %s: %w", id, st.state, ErrTransition)
		}
		j.recordNote("stopped")
		j.finish(StateStopped, fmt.Sprintf("stopped by the operator at version %d", st.model.Version))
		return nil
	})
}

// UpdateJob changes a job's lr and max_staleness; see PatchJob.
func (s *Server) UpdateJob(ctx context.Context, id string, set Settings) (JobView, error) {
	b, err := json.Marshal(set)
	if err != nil {
		return JobView{}, err
	}
	return s.PatchJob(ctx, id, b)
}

// PatchJob changes a running or paused job's live settings: a JSON object
// of the keys jobspec.LiveKeys names (mode and its keys, lr,
// max_staleness, ...), as jobspec.Patch applies them. They take effect
// from the next lease and result, are recorded as a note in the metrics
// history, and are stored with the job's spec so a resumed job keeps
// them. Invalid values are a *jobspec.Error naming the key.
func (s *Server) PatchJob(ctx context.Context, id string, patch []byte) (JobView, error) {
	var specJSON []byte
	v, err := s.control(ctx, id, func(j *Job, st *jobState) error {
		if st.state != StateRunning && st.state != StatePaused {
			return fmt.Errorf("job %s is %s; its settings no longer matter: %w", id, st.state, ErrTransition)
		}
		next, notes, err := jobspec.Patch(st.spec, patch)
		if err != nil {
			return err
		}
		if len(notes) == 0 {
			return nil // the same values again
		}
		b, err := json.Marshal(next)
		if err != nil {
			return err
		}
		// The loop's copy only: connections read j.Spec, which keeps the
		// spec the job started with.
		if err := j.configure(next); err != nil {
			return err
		}
		specJSON = b
		note := strings.Join(notes, "; ")
		j.logf("job %s: %s (from version %d)", id, note, st.model.Version+1)
		j.recordNote(note)
		// A changed mode survives a crash from now on, with its partial
		// round (none yet) and optimizer state.
		j.checkpoint(true)
		return nil
	})
	if err != nil || specJSON == nil {
		return v, err
	}
	if db := s.cfg.Store; db != nil {
		if err := db.UpdateJobSpec(ctx, id, specJSON); err != nil {
			return v, fmt.Errorf("job %s: the change applies but was not saved, and a restart will undo it: %w", id, err)
		}
	}
	return v, nil
}
