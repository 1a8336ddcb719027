package coordinator

import (
	"fmt"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/crowdtrain/crowdtrain/engine"
)

// Hostages: engine.LeaseCaps halves a volunteer's lease cap at each
// expiry and raises it by one at each accepted result; a volunteer whose
// leases expire Config.MaxExpiriesInARow times with no accepted result
// between is dropped here: its connections close, and its hellos are
// refused as rate_limited for Config.HostageCoolOff. Straggler backups
// (stragglers.go) finish the tasks it sits on meanwhile.

// abuseState is what a job's loop keeps against hostages, stragglers and
// replays.
type abuseState struct {
	caps            engine.LeaseCaps // hostages' cut lease caps
	dropped         int64            // volunteers dropped for expiries in a row
	backupsGranted  int64
	backupsAnswered int64 // tasks whose backup's result came first
	// answers holds, in a round mode, the result applied for a backed-up
	// task by the lease it superseded (stragglers.go, lateCopy), within
	// keptAnswerBytes; lateCredited counts the late copies credited.
	answers      map[uint64]engine.SpotResult
	answerOrder  []uint64
	lateCredited int64
	reclaimed    int64 // leases of closed rounds taken back (stragglers.go)
	replays      engine.ReplayWindow
	dupRun       int // duplicates since the last accepted result
	// noStragglerBefore is when the oldest lease held last time a scan
	// found no straggler becomes one (stragglers.go): no scan before.
	noStragglerBefore time.Time
}

// AbuseView is what the job view shows of the hostage, straggler and
// replay rules (replays are counted among the rejections, "duplicate").
type AbuseView struct {
	// LimitedVolunteers have a lease cap cut by expiries now;
	// DroppedVolunteers were dropped for too many in a row.
	LimitedVolunteers int   `json:"limited_volunteers"`
	DroppedVolunteers int64 `json:"dropped_volunteers"`
	// BackupsGranted counts backup copies of straggling leases;
	// BackupsAnswered the tasks whose backup answered first.
	BackupsGranted  int64 `json:"backups_granted"`
	BackupsAnswered int64 `json:"backups_answered"`
	// LateCopiesCredited counts the copies of backed-up tasks that
	// answered second in a round mode and were credited, not applied,
	// for agreeing with the copy applied.
	LateCopiesCredited int64 `json:"late_copies_credited"`
	// Reclaimed counts straggling leases of closed rounds taken back and
	// queued again (sync and DiLoCo).
	Reclaimed int64 `json:"reclaimed"`
}

func (j *Job) abuseView() AbuseView {
	a := &j.st.abuse
	return AbuseView{LimitedVolunteers: a.caps.Len(), DroppedVolunteers: a.dropped,
		BackupsGranted: a.backupsGranted, BackupsAnswered: a.backupsAnswered, LateCopiesCredited: a.lateCredited, Reclaimed: a.reclaimed}
}

// leaseExpired counts l's expiry against its worker's volunteer.
func (j *Job) leaseExpired(l *engine.Lease) {
	st := &j.st
	m, ok := st.members[l.Worker]
	if !ok {
		return
	}
	lim := j.limits.orDefaults()
	a := &st.abuse
	capNow, inARow, drop := a.caps.Expired(m.volunteer, st.sched.Now(), lim.maxLeases, lim.expiriesInARow)
	if !drop {
		j.log.Info(fmt.Sprintf("job %s: volunteer %s (worker %s, %s) let lease %d expire without a result (%d in a row): it may hold %d leases now",
			j.ID, m.volunteer, l.Worker, m.address, l.ID, inARow, capNow), logVolunteer, m.volunteer, logWorker, l.Worker)
		return
	}
	a.dropped++
	until := time.Now().Add(lim.coolOff)
	reason := fmt.Sprintf("%d leases expired in a row with no result: refused for %v", inARow, lim.coolOff)
	j.log.Warn(fmt.Sprintf("job %s: volunteer %s (worker %s, %s) dropped: %s", j.ID, m.volunteer, l.Worker, m.address, reason), logVolunteer, m.volunteer, logWorker, l.Worker)
	if lim.drop != nil {
		lim.drop(m.volunteer, reason, until)
	}
}

// resultAccepted raises the cap of worker's volunteer again by one, and
// forgets it once whole.
func (j *Job) resultAccepted(worker string) {
	st := &j.st
	m, ok := st.members[worker]
	if !ok {
		return
	}
	st.abuse.caps.Accepted(m.volunteer, st.sched.Now(), j.limits.orDefaults().maxLeases)
}

// coolOffs is the server's table of volunteers refused for a while,
// bounded like the rate limiters' tables.
type coolOffs struct {
	mu    sync.Mutex
	until map[string]time.Time
	max   int
}

func (c *coolOffs) set(v string, until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.until == nil {
		c.until = map[string]time.Time{}
	}
	now := time.Now()
	if len(c.until) >= c.max {
		for k, t := range c.until { // the ended ones first, else the soonest to end
			if !t.After(now) {
				delete(c.until, k)
			}
		}
		for len(c.until) >= c.max {
			var soonest string
			for k, t := range c.until {
				if soonest == "" || t.Before(c.until[soonest]) {
					soonest = k
				}
			}
			delete(c.until, soonest)
		}
	}
	c.until[v] = until
}

// left is how long v stays refused; 0 when it is not.
func (c *coolOffs) left(v string) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.until[v]
	if !ok {
		return 0
	}
	d := time.Until(t)
	if d <= 0 {
		delete(c.until, v)
		return 0
	}
	return d
}

// dropVolunteer closes every connection of volunteer, saying why, and
// refuses its hellos until until. It runs on a job's loop: the closes
// (which wait for the peer's close frame) run on their own goroutines.
func (s *Server) dropVolunteer(volunteer, reason string, until time.Time) {
	s.coolOff.set(volunteer, until)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, wc := range s.workers {
		if wc.volunteer != volunteer {
			continue
		}
		why := "dropped: " + reason
		wc.closedBy.Store(&why)
		go wc.ws.Close(websocket.StatusPolicyViolation, truncateReason(why))
	}
}
