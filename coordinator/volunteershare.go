package coordinator

import (
	"fmt"

	"github.com/crowdtrain/crowdtrain/engine"
)

// A volunteer's share of the tasks: engine.VolunteerShares has the rule.
// The job's loop records each primary grant and each request that got
// nothing, and asks it before granting.

// noteStarved records that worker asked for work and got none. Call on
// the loop.
func (j *Job) noteStarved(worker string) {
	st := &j.st
	if m, ok := st.members[worker]; ok {
		st.shares.Starved(m.volunteer, st.sched.Now())
	}
}

// volunteerShare is how many more tasks volunteer v may take now under the
// bound, and why when it binds (for the idle message). Call on the loop.
func (j *Job) volunteerShare(v string) (int, string) {
	st := &j.st
	left := st.shares.Left(v, st.sched.Now(), st.spot.Vouched(v), len(st.members), j.unbannedVolunteers)
	if left > 0 {
		return left, ""
	}
	taken, window := st.shares.Share(v)
	return 0, fmt.Sprintf("this volunteer took %d of the last %d tasks, more than its share among %d volunteers (%.1fx even), while others go without; ask again when they have had theirs (spot checks that agree with others lift this bound)",
		taken, window, j.unbannedVolunteers(), engine.ShareSlack)
}

// unbannedVolunteers counts the distinct volunteers among the job's
// members that spot checks have not banned.
func (j *Job) unbannedVolunteers() int {
	vols := map[string]bool{}
	for _, m := range j.st.members {
		if !j.st.spot.Banned(m.volunteer) {
			vols[m.volunteer] = true
		}
	}
	return len(vols)
}
