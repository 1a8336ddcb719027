package coordinator

import (
	"fmt"
	"time"
)

// A volunteer's share of the tasks. Per-address limits bound the leases
// one address holds at once, but not how fast it turns them over: twenty
// connections that answer every task at once with garbage took 95% of the
// tasks from two honest workers that compute theirs. Bounded here: over
// the last shareWindow primary tasks granted, a volunteer (by key, else by
// address, all its connections summed) takes at most shareSlack times its
// share of the volunteers connected, until spot checks have vouched for it
// (engine.SpotChecks.Vouched): a fast honest volunteer, a GPU beside CPUs,
// earns its way past the bound by results that agree with others'.
//
// The bound holds only while another volunteer goes without: one that
// asked for work within starvedFor and got none (a round's places all
// taken, the queue empty). A volunteer alone at work, or beside ones
// that do not ask (a hostage sitting on its leases), is never held back.
const (
	shareWindow = 256
	// shareSlack above the even share: volunteers differ in speed, and an
	// honest one twice as fast as the rest still gets its work.
	shareSlack = 1.5
	// shareMinSamples: below this many grants in the window, no bound.
	shareMinSamples = 32
	// starvedFor: how long a request that got nothing counts as a
	// volunteer going without.
	starvedFor = 2 * time.Second
)

// noteStarved records that worker asked for work and got none. Call on
// the loop.
func (j *Job) noteStarved(worker string) {
	st := &j.st
	m, ok := st.members[worker]
	if !ok {
		return
	}
	if st.starved == nil {
		st.starved = map[string]time.Time{}
	}
	now := st.sched.Now()
	st.starved[m.volunteer] = now
	if now.Sub(st.starvedPruned) > starvedFor {
		// Once per starvedFor, not per request: thousands of idle
		// volunteers asking must not each scan the others.
		st.starvedPruned = now
		for v, at := range st.starved {
			if now.Sub(at) > starvedFor {
				delete(st.starved, v)
			}
		}
	}
}

// othersStarved reports whether a volunteer other than v went without
// work within starvedFor.
func (j *Job) othersStarved(v string) bool {
	now := j.st.sched.Now()
	for u, at := range j.st.starved {
		if u != v && now.Sub(at) <= starvedFor {
			return true
		}
	}
	return false
}

// grantShares is the ring of the volunteers of the last shareWindow
// primary grants.
type grantShares struct {
	ring  [shareWindow]string
	n     int // grants in the ring
	pos   int
	count map[string]int
}

func (g *grantShares) add(v string) {
	if g.count == nil {
		g.count = map[string]int{}
	}
	if g.n == shareWindow {
		old := g.ring[g.pos]
		if g.count[old]--; g.count[old] <= 0 {
			delete(g.count, old)
		}
	} else {
		g.n++
	}
	g.ring[g.pos] = v
	g.pos = (g.pos + 1) % shareWindow
	g.count[v]++
}

// volunteerShare is how many more tasks volunteer v may take now under the
// bound, and why when it binds (for the idle message). Call on the loop.
func (j *Job) volunteerShare(v string) (int, string) {
	st := &j.st
	g := &st.grantShares
	if g.n < shareMinSamples || st.spot.Vouched(v) || !j.othersStarved(v) {
		return shareWindow, ""
	}
	// The limit is at least shareSlack·n over the members (connections):
	// below that, no need to count the volunteers.
	if len(st.members) > 0 && float64(g.count[v]) < shareSlack*float64(g.n)/float64(len(st.members)) {
		return shareWindow, ""
	}
	vols := map[string]bool{}
	for _, m := range st.members {
		if !st.spot.Banned(m.volunteer) {
			vols[m.volunteer] = true
		}
	}
	if len(vols) < 2 {
		return shareWindow, ""
	}
	limit := int(shareSlack*float64(g.n)/float64(len(vols)) + 0.5)
	left := limit - g.count[v]
	if left > 0 {
		return left, ""
	}
	return 0, fmt.Sprintf("this volunteer took %d of the last %d tasks, more than its share among %d volunteers (%.1fx even), while others go without; ask again when they have had theirs (spot checks that agree with others lift this bound)",
		g.count[v], g.n, len(vols), shareSlack)
}
