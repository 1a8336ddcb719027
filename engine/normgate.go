package engine

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
// NormStaleRun results in a row from two or more volunteers, with none
// accepted between, the reference is what is wrong: it starts again, the
// gate off until NormWarmup more updates are accepted (the robust rule
// and validation still bound them).
const NormStaleRun = 8

// normVotes are the volunteers' votes on the gate's reference.
type normVotes struct {
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
func (n *normVotes) observe(volunteer string, norm float64) {
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
func (n *normVotes) update() {
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
func (n *normVotes) reference(mean float64) float64 {
	switch k := len(n.scratch); {
	case k >= normVoters:
		return n.median
	case k > 0:
		return n.scratch[k-1]
	}
	return mean
}

// forget drops volunteer's vote (a spot check struck it).
func (n *normVotes) forget(volunteer string) {
	if _, ok := n.byVolunteer[volunteer]; !ok {
		return
	}
	delete(n.byVolunteer, volunteer)
	delete(n.count, volunteer)
	n.order = slices.DeleteFunc(n.order, func(v string) bool { return v == volunteer })
	n.update()
}

// refused records that the gate refused volunteer's update, and reports
// whether the reference went stale (see NormStaleRun): then it has been
// cleared, and the caller restarts the gate's warm-up.
func (n *normVotes) refused(volunteer string) bool {
	if n.refusedBy == nil {
		n.refusedBy = map[string]struct{}{}
	}
	n.refusedRun++
	n.refusedBy[volunteer] = struct{}{}
	if n.refusedRun < NormStaleRun || len(n.refusedBy) < 2 {
		return false
	}
	clear(n.byVolunteer)
	clear(n.count)
	clear(n.refusedBy)
	n.order, n.refusedRun = n.order[:0], 0
	n.update()
	return true
}

// NormGate is the max_update_norm_ratio gate, and the near-zero gate
// beside it (MovesNothing), for direct results and relays' aggregates
// alike: the running mean of accepted norms, the volunteers' votes, and
// the warm-up. The ratio is passed in, as a live patch may change it.
// Not safe for concurrent use: a job's loop owns it.
type NormGate struct {
	mean     float64 // running mean of accepted norms, over about the last 50
	count    int64   // norms accepted since the (re)start
	votes    normVotes
	outliers normOutliers // updates over the limit: which are hard batches (normoutliers.go)
}

// NormResult is what the gate judges of one result.
type NormResult struct {
	Volunteer, Worker string
	Task              Task
	Base              int64 // the version it was computed from
	Norm              float64
	Update            []float32
	// ClipFollows says a robust clip past its warm-up bounds the update
	// next (async): one over the limit needs no second computation.
	ClipFollows bool
}

// NormVerdict is the gate's answer for one result.
type NormVerdict struct {
	// Over: the norm is above Limit. Unless Refused, the update is
	// applied scaled down to Limit (a hard batch, normoutliers.go).
	Over, Refused bool
	Limit, Ref    float64
	// Stale: this refusal showed the reference stale, and the gate has
	// started again (Refused).
	Stale bool
	// Kept counts the updates over the limit let through, this one
	// included.
	Kept int64
}

// Judge judges r at ratio (the job's max_update_norm_ratio).
func (g *NormGate) Judge(ratio float64, r NormResult) NormVerdict {
	limit, ref, on := g.Limit(ratio)
	v := NormVerdict{Limit: limit, Ref: ref}
	if !on || r.Norm <= limit {
		if ratio > 0 {
			g.outliers.note(r.Worker, false)
		}
		return v
	}
	v.Over = true
	if r.Norm > outlierMaxOver*limit || !r.ClipFollows && !g.outliers.admit(r.Task, r.Worker, r.Base, r.Norm, r.Update) {
		v.Refused, v.Stale = true, g.Refused(r.Volunteer)
		return v
	}
	g.outliers.kept++
	v.Kept = g.outliers.kept
	return v
}

// NormWarmup is how many updates are accepted before the gate starts:
// the running mean needs a few samples to mean anything.
const NormWarmup = 10

// minUpdateNormRatio: an update under this share of the reference moves
// nothing (MovesNothing). Honest updates of a batch the model fits lie
// within a few hundredths of the reference.
const minUpdateNormRatio = 1e-4

// Reference is the typical accepted norm the gate compares with: the
// median over volunteers when enough have voted, else the largest
// volunteer's mean, else (none yet, as after a restart) the running mean.
func (g *NormGate) Reference() float64 { return g.votes.reference(g.mean) }

// Limit is the largest norm the gate lets through whole at ratio (the
// job's max_update_norm_ratio) and the reference it is ratio times; on is
// false while the gate is off (ratio 0, warming up, no reference yet).
func (g *NormGate) Limit(ratio float64) (limit, ref float64, on bool) {
	ref = g.Reference()
	if ratio <= 0 || g.count < NormWarmup || ref <= 0 {
		return 0, ref, false
	}
	return ratio * ref, ref, true
}

// MovesNothing reports whether an update of norm, not zero, is so far
// below the reference that it moves the model by nothing, where the gate
// is on at ratio; and the reference.
func (g *NormGate) MovesNothing(ratio, norm float64) (bool, float64) {
	if ratio <= 0 || g.count < NormWarmup {
		return false, 0
	}
	ref := g.Reference()
	return ref > 0 && norm > 0 && norm < minUpdateNormRatio*ref, ref
}

// Observe feeds the gate an accepted update's norm from volunteer: the
// running mean follows the norms down as training converges, and the
// votes give the reference no few sources can set.
func (g *NormGate) Observe(volunteer string, norm float64) {
	g.count++
	g.mean += (norm - g.mean) / float64(min(g.count, 50))
	g.votes.observe(volunteer, norm)
}

// Refused records that the gate refused volunteer's update, and reports
// whether the reference went stale: then the gate has started again, off
// until NormWarmup more updates are accepted.
func (g *NormGate) Refused(volunteer string) bool {
	if !g.votes.refused(volunteer) {
		return false
	}
	g.mean, g.count = 0, 0
	return true
}

// Forget drops volunteer's vote (a spot check struck it).
func (g *NormGate) Forget(volunteer string) { g.votes.forget(volunteer) }

// Progress is what a checkpoint keeps of the gate: the running mean and
// its count (the votes start again after a restart).
func (g *NormGate) Progress() (mean float64, count int64) { return g.mean, g.count }

// Restore sets what Progress returned.
func (g *NormGate) Restore(mean float64, count int64) { g.mean, g.count = mean, count }
