package coordinator

import "fmt"

// duplicateWarning is how many duplicates in a row, with no accepted
// result between, make the job warn that its model may have stopped
// learning.
const duplicateWarning = 64

// duplicateRun counts a duplicate, and warns once per run of them: a
// model that has stopped learning (a dead network) gives every batch the
// same update, which looks exactly like a replay, and then the job makes
// no progress.
func (j *Job) duplicateRun() {
	a := &j.st.abuse
	if a.dupRun++; a.dupRun == duplicateWarning {
		j.log.Warn(fmt.Sprintf("job %s: %d results in a row were bit-identical to accepted ones and refused as replays: replay attacks, or a model that no longer learns (a dead network gives every batch the same update); check its evaluations",
			j.ID, a.dupRun))
	}
}
