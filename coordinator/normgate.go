package coordinator

import "slices"

// The max_update_norm_ratio gate refuses an update far larger than the
// accepted ones. Its reference must not be one that a few clients can set:
// a sybil answering every lease at once with an all-zero update, its
// zeros accepted first, drove a plain running mean of accepted norms to a
// twentieth of an honest norm, after which the gate refused every honest
// update and a sync job stood still at version 7. So the reference is
// the median over volunteers of each volunteer's running mean of accepted
// norms (one vote per volunteer, however many connections it opens: a
// keyless one is its address), once normVoters volunteers have had
// updates accepted. With fewer there is no majority to tell the broken
// one from: the largest of their means is taken, so that a tiny liar
// cannot shut the others out (a huge one cannot raise it either: its
// first update is compared with the others' and refused, and the robust
// rule and validation answer one that arrives first).

// normVoters is how many volunteers the median needs; normVolunteers how
// many (the most recent) it keeps.
const (
	normVoters     = 3
	normVolunteers = 64
)

// A reference can still go stale: four colluding attackers of nine that
// connected first had the only accepted updates, set the median at a
// twentieth of an honest norm, and were then struck and banned, leaving
// a gate that refused every honest update, with nothing accepted to move
// it. So a struck volunteer's vote is dropped, and when the gate refuses
// normStaleRun results in a row from two or more volunteers, with none
// accepted between, the reference is what is wrong: it starts again, the
// gate off until normWarmup more updates are accepted (the robust rule
// and validation still bound them).
const normStaleRun = 8

// normRef is the gate's memory: the job's state holds one.
type normRef struct {
	refusedRun  int                 // gate refusals since the last accepted update
	refusedBy   map[string]struct{} // their volunteers
	byVolunteer map[string]float64  // each volunteer's running mean of accepted norms
	order       []string            // volunteers by first update, for eviction
	count       map[string]int      // updates counted per volunteer, up to normVolunteerWindow
	median      float64             // of byVolunteer, kept up to date
	scratch     []float64
}

// normVolunteerWindow is the span of each volunteer's running mean.
const normVolunteerWindow = 20

// observe records an accepted update's norm from volunteer.
func (n *normRef) observe(volunteer string, norm float64) {
	if n.byVolunteer == nil {
		n.byVolunteer, n.count = map[string]float64{}, map[string]int{}
	}
	if _, ok := n.byVolunteer[volunteer]; !ok {
		if len(n.order) >= normVolunteers {
			old := n.order[0]
			n.order = n.order[1:]
			delete(n.byVolunteer, old)
			delete(n.count, old)
		}
		n.order = append(n.order, volunteer)
	}
	n.refusedRun = 0
	clear(n.refusedBy)
	c := min(n.count[volunteer]+1, normVolunteerWindow)
	n.count[volunteer] = c
	n.byVolunteer[volunteer] += (norm - n.byVolunteer[volunteer]) / float64(c)
	n.update()
}

// update recomputes the median of the volunteers' means.
func (n *normRef) update() {
	n.scratch = n.scratch[:0]
	for _, v := range n.byVolunteer {
		n.scratch = append(n.scratch, v)
	}
	slices.Sort(n.scratch)
	k := len(n.scratch)
	if k == 0 {
		n.median = 0
		return
	}
	n.median = n.scratch[k/2]
	if k%2 == 0 {
		n.median = (n.scratch[k/2-1] + n.scratch[k/2]) / 2
	}
}

// reference is what the gate compares with: the median over volunteers
// when enough have voted, else the largest volunteer's mean, else (none
// yet, as after a restart) mean, the running mean of every accepted norm.
func (n *normRef) reference(mean float64) float64 {
	switch k := len(n.scratch); {
	case k >= normVoters:
		return n.median
	case k > 0:
		return n.scratch[k-1]
	}
	return mean
}

// forget drops volunteer's vote (a spot check struck it).
func (n *normRef) forget(volunteer string) {
	if _, ok := n.byVolunteer[volunteer]; !ok {
		return
	}
	delete(n.byVolunteer, volunteer)
	delete(n.count, volunteer)
	n.order = slices.DeleteFunc(n.order, func(v string) bool { return v == volunteer })
	n.update()
}

// refused records that the gate refused volunteer's update, and reports
// whether the reference went stale (see normStaleRun): then it has been
// cleared, and the caller restarts the gate's warm-up.
func (n *normRef) refused(volunteer string) bool {
	if n.refusedBy == nil {
		n.refusedBy = map[string]struct{}{}
	}
	n.refusedRun++
	n.refusedBy[volunteer] = struct{}{}
	if n.refusedRun < normStaleRun || len(n.refusedBy) < 2 {
		return false
	}
	clear(n.byVolunteer)
	clear(n.count)
	clear(n.refusedBy)
	n.order, n.refusedRun = n.order[:0], 0
	n.update()
	return true
}
