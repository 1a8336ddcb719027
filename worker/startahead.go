package worker

import (
	"context"

	"github.com/crowdtrain/crowdtrain/protocol"
)

// Starting ahead (docs/PROTOCOL.md, "A session", step 4).
//
// A lease with snapshot "latest" has no base until the worker starts it:
// a start/started round trip through the job's loop, then the snapshot's
// download. Done when the previous task's result is sent, both are time
// the backend waits. With Config.StartAhead, the starter stage, between
// the fetcher and the computing goroutine, starts each lease while the
// task before it computes: it hands tasks on through an unbuffered
// channel, so it holds at most one started lease that is not yet
// computing, and starts it as soon as the previous one is taken. That
// base is the newest version when the previous task began, so it misses
// that task's own result: one version more staleness, bounded as every
// other by max_staleness, and paid in examples where staleness hurts.
// Without it the stage only hands tasks on, and each lease starts after
// the previous result, as before.

// begun is what starting a task ahead gave: begin's answers.
type begun struct {
	done    bool  // begin ran for this task
	refused bool  // the coordinator refused the start
	err     error // begin failed
}

// startAhead takes the fetcher's tasks, starts the "latest" ones, and
// hands each on to out, in order, until ctx ends.
func (s *session) startAhead(ctx context.Context, f *fetcher, out chan<- *task) error {
	for {
		var t *task
		select {
		case <-ctx.Done():
			return ctx.Err()
		case t = <-f.ready:
		}
		t.begun = begun{}
		if s.startsAhead(t) {
			refused, err := s.begin(ctx, f, t)
			t.begun = begun{done: true, refused: refused, err: err}
		}
		select {
		case <-ctx.Done():
			f.free <- t
			return ctx.Err()
		case out <- t:
		}
	}
}

// startsAhead reports whether t is a lease to start before it computes:
// with Config.StartAhead, a "latest" one of a job the worker computes
// for, while not paused (a paused worker hands its leases back
// unstarted).
func (s *session) startsAhead(t *task) bool {
	if !s.w.cfg.StartAhead || t.lease.Snapshot != protocol.SnapshotLatest || s.isRevoked(t.lease.JobID) || s.w.isPaused() {
		return false
	}
	jc, _ := s.job(t.lease.JobID)
	return jc != nil
}
