package engine

import "time"

// A volunteer's share of the tasks. Per-address limits bound the leases
// one address holds at once, but not how fast it turns them over: twenty
// connections that answer every task at once with garbage took 95% of the
// tasks from two honest workers that compute theirs. Bounded here: over
// the last shareWindow primary tasks granted, a volunteer (by key, else by
// address, all its connections summed) takes at most shareSlack times its
// share of the volunteers connected, until spot checks have vouched for it
// (SpotChecks.Vouched): a fast honest volunteer, a GPU beside CPUs,
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

// VolunteerShares is a job's memory for the bound: the volunteers of
// the last shareWindow primary grants, and the volunteers that went
// without lately. The zero value is empty. Not safe for concurrent use:
// a job's loop owns it.
type VolunteerShares struct {
	ring    [shareWindow]string
	n       int // grants in the ring
	pos     int
	count   map[string]int
	starved map[string]time.Time // volunteers that asked and got nothing, when
	pruned  time.Time
}

// Granted records a primary task granted to volunteer v.
func (s *VolunteerShares) Granted(v string) {
	if s.count == nil {
		s.count = map[string]int{}
	}
	if s.n == shareWindow {
		old := s.ring[s.pos]
		if s.count[old]--; s.count[old] <= 0 {
			delete(s.count, old)
		}
	} else {
		s.n++
	}
	s.ring[s.pos] = v
	s.pos = (s.pos + 1) % shareWindow
	s.count[v]++
}

// Starved records that volunteer v asked for work at now and got none.
func (s *VolunteerShares) Starved(v string, now time.Time) {
	if s.starved == nil {
		s.starved = map[string]time.Time{}
	}
	s.starved[v] = now
	if now.Sub(s.pruned) > starvedFor {
		// Once per starvedFor, not per request: thousands of idle
		// volunteers asking must not each scan the others.
		s.pruned = now
		for u, at := range s.starved {
			if now.Sub(at) > starvedFor {
				delete(s.starved, u)
			}
		}
	}
}

// othersStarved reports whether a volunteer other than v went without
// work within starvedFor of now.
func (s *VolunteerShares) othersStarved(v string, now time.Time) bool {
	for u, at := range s.starved {
		if u != v && now.Sub(at) <= starvedFor {
			return true
		}
	}
	return false
}

// Share is the recent grants' count and volunteer v's part of them.
func (s *VolunteerShares) Share(v string) (taken, window int) { return s.count[v], s.n }

// Left is how many more tasks volunteer v may take at now under the
// bound: unbounded (shareWindow) below shareMinSamples grants, when
// vouched, or while no one else goes without. connections is the job's
// members; volunteers, asked only when the bound may bind, counts the
// distinct volunteers among them that are not banned.
func (s *VolunteerShares) Left(v string, now time.Time, vouched bool, connections int, volunteers func() int) int {
	if s.n < shareMinSamples || vouched || !s.othersStarved(v, now) {
		return shareWindow
	}
	// The limit is at least shareSlack·n over the connections: below
	// that, no need to count the volunteers.
	if connections > 0 && float64(s.count[v]) < shareSlack*float64(s.n)/float64(connections) {
		return shareWindow
	}
	k := volunteers()
	if k < 2 {
		return shareWindow
	}
	limit := int(shareSlack*float64(s.n)/float64(k) + 0.5)
	return max(0, limit-s.count[v])
}

// ShareSlack is how far above the even share a volunteer may go.
const ShareSlack = shareSlack
