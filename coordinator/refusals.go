package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/crowdtrain/crowdtrain/protocol"
)

// routineRefusals are the reasons an honest worker's result is refused
// in the ordinary course of training: a version moved on, a round
// closed, another copy answered first, the job paused. They are logged
// at DEBUG (per-result chatter); the others, results that are broken or
// come from a volunteer under suspicion, at WARN.
var routineRefusals = map[string]bool{
	protocol.ReasonStale:        true,
	protocol.ReasonLate:         true,
	protocol.ReasonUnknownLease: true,
	protocol.ReasonNotRunning:   true,
	protocol.ReasonDuplicate:    true,
}

// refusalWarnEvery is how often one worker's refusals of one reason may
// log at WARN; in between they log at DEBUG. Every refusal is counted in
// the job's rejections whatever its level.
const refusalWarnEvery = 10 * time.Second

// logRefusal logs a refused result with the job, worker and volunteer
// as attributes. The detail may quote what the worker sent: the
// handlers quote the message, so it stays one line.
func (j *Job) logRefusal(sub submission, reason, detail string) {
	level := slog.LevelDebug
	if !routineRefusals[reason] {
		level = j.refusals.level(sub.worker+"\x00"+reason, time.Now().UnixNano(), int64(refusalWarnEvery))
	}
	ctx := context.Background()
	if !j.log.Enabled(ctx, level) {
		return
	}
	j.log.Log(ctx, level, fmt.Sprintf("job %s: result of lease %d from worker %s REFUSED (%s): %s", j.ID, sub.res.LeaseID, sub.worker, reason, detail),
		logWorker, sub.worker, logVolunteer, sub.volunteer, "lease", sub.res.LeaseID, "reason", reason)
}
