package coordinator

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/crowdtrain/crowdtrain/engine"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/protocol"
	relaymsg "github.com/crowdtrain/crowdtrain/protocol/relay"
)

// A relay runs a copy of each of its root's jobs: the same spec, data and
// shards, so its volunteers meet the coordinator they know, with every
// per-volunteer defence (validation, the norm gate, replays, spot checks,
// bans). Its tasks are blocks leased from the root; its model is the
// root's, set from the root's snapshots, and never steps here. What its
// workers' accepted results would do to the model is summed instead and
// forwarded upstream once per round, or once per relay_window in an
// asynchronous mode (docs/RELAYS.md).

// mirror is a relay job's link to its root's job, owned by the job's loop.
type mirror struct {
	relay string
	out   *relayOutbox // aggregates to publish, off the loop
	// wake asks the link for a block (non-blocking send).
	wake chan struct{}
	// bootID keeps aggregate ids unique across the relay's restarts.
	bootID string
	seq    uint64

	run   int64  // the root run the held leases belong to
	round uint64 // the round of the held leases (round modes)
	// answered is the newest round an aggregate was sent for.
	answered uint64
	// offset is the copy's version minus the root's: a root that restarts
	// numbers its versions again from its checkpoint, with other
	// contents, and the copy's snapshot URLs (by version) must never name
	// two contents, so its versions keep rising.
	offset int64
	ups    []*upLease

	// The sum being gathered.
	sum                        []float32
	results, examples, correct int
	base                       int64
	leases                     []uint64
	tasks                      []relaymsg.Task
	volunteers                 []string // who answered each of leases
	released                   []uint64
	// toRelease are leases handed back with no aggregate to carry them:
	// the link tells the root (relaymsg.Release).
	toRelease []uint64
	credits   map[string]*relaymsg.Credit
	since     time.Time // the sum's first result
	// strikes holds, per volunteer, the evidence of the spot checks'
	// strikes not yet reported upstream: for each strike, the root lease
	// id of a task the volunteer answered here (the root believes a
	// strike only with one). answeredBy keeps each volunteer's latest
	// such leases to draw that evidence from.
	strikes    map[string][]uint64
	answeredBy map[string][]uint64
}

// maxEvidence is how many answered root leases a relay keeps per
// volunteer as evidence for strikes; volunteers past maxEvidenceKept are
// forgotten, oldest first (the map is cleared).
const (
	maxEvidence     = 8
	maxEvidenceKept = 4096
)

// upLease is a lease held from the root.
type upLease struct {
	relaymsg.Lease
	deadline time.Time
	answered bool
}

func (u *upLease) task() engine.Task {
	return engine.Task{Shard: u.Shard, Start: u.Start, Count: u.Count}
}

// relayMargin is how long before its root deadline a relay hands a lease
// back unanswered, so that the root still holds it when the word arrives.
func relayMargin(leaseTimeout time.Duration) time.Duration {
	return min(5*time.Second, leaseTimeout/4)
}

// mirrorAggregator is a relay job's Aggregator: it sums accepted results
// (mirrorStep forwards the sum); it leases every queued task, in the
// round of the block the tasks came in.
type mirrorAggregator struct {
	j *Job
}

func (a mirrorAggregator) Lease(time.Time) (uint64, bool) { return a.j.mirror.round, true }
func (a mirrorAggregator) Unlease(uint64)                 {}
func (a mirrorAggregator) Ready(time.Time) (engine.Step, bool) {
	return engine.Step{}, false
}
func (a mirrorAggregator) Partial() engine.Partial      { return engine.Partial{} }
func (a mirrorAggregator) Restore(engine.Partial) error { return nil }

func (a mirrorAggregator) Offer(c engine.Contribution) engine.Decision {
	m, spec := a.j.mirror, &a.j.st.spec
	if spec.Rounds() && c.Round != m.round {
		return engine.Decision{Reason: engine.ReasonLate, Detail: fmt.Sprintf("round %d closed before this result arrived (round %d is open)", c.Round, m.round)}
	}
	if !spec.Rounds() && c.Staleness > int64(spec.MaxStaleness) {
		return engine.Decision{Reason: engine.ReasonStale, Detail: fmt.Sprintf("staleness %d > max_staleness %d: fetch a newer snapshot", c.Staleness, spec.MaxStaleness)}
	}
	if !engine.Finite(c.Update) {
		return engine.Decision{Reason: engine.ReasonInvalid, Detail: engine.ErrNonFinite.Error()}
	}
	base := a.j.st.model.Version - c.Staleness
	if m.results == 0 || base < m.base {
		m.base = base
	}
	if m.results == 0 {
		m.since = a.j.st.sched.Now()
		clear(m.sum)
	}
	for i, v := range c.Update {
		m.sum[i] += v
	}
	m.results++
	return engine.Decision{Accepted: true}
}

// newMirror makes j a relay's copy of its root's job.
func (j *Job) makeMirror(relay string, out *relayOutbox, bootID string) *mirror {
	m := &mirror{relay: relay, out: out, wake: make(chan struct{}, 1), bootID: bootID,
		sum: make([]float32, j.model.NumParams), credits: map[string]*relaymsg.Credit{}, strikes: map[string][]uint64{},
		answeredBy: map[string][]uint64{}}
	j.mirror = m
	st := &j.st
	st.agg = mirrorAggregator{j}
	st.sched.SetQueue(nil)
	// One local lease per root lease, as the root carved it: H is the
	// steps its examples make.
	st.sched.Dynamic, st.sched.LocalSteps, st.sched.KeepTasks = false, math.MaxInt32, true
	// In an asynchronous mode a worker here starts a task from the newest
	// version the relay holds, as it would at the root (snapshot:
	// latest): a task it queued must not be staler for the queue.
	st.sched.Latest = !st.spec.Rounds() && st.spec.Snapshot == jobspec.SnapshotLatest
	st.remaining = math.MaxInt64 // the root counts the epoch
	st.model.Version = -1        // nothing until the first block
	return m
}

// mirrorHolds reports whether t is the task of a root lease held and not
// yet answered.
func (j *Job) mirrorHolds(t engine.Task) bool {
	return slices.ContainsFunc(j.mirror.ups, func(u *upLease) bool { return !u.answered && u.task() == t })
}

// mirrorAnswered records an accepted result of lease l (apply).
func (j *Job) mirrorAnswered(l *engine.Lease, volunteer string, res *protocol.Result) {
	m := j.mirror
	for _, u := range m.ups {
		if !u.answered && u.task() == l.Task {
			u.answered = true
			m.leases = append(m.leases, u.ID)
			m.tasks = append(m.tasks, relaymsg.Task{Shard: u.Shard, Start: u.Start, Count: u.Count})
			m.volunteers = append(m.volunteers, volunteer)
			if volunteer != "" {
				if len(m.answeredBy) >= maxEvidenceKept {
					clear(m.answeredBy)
				}
				ids := append(m.answeredBy[volunteer], u.ID)
				m.answeredBy[volunteer] = ids[max(0, len(ids)-maxEvidence):]
			}
			break
		}
	}
	m.examples += res.Examples
	m.correct += res.Correct
	if volunteer != "" {
		c := m.credits[volunteer]
		if c == nil {
			c = &relaymsg.Credit{Volunteer: volunteer}
			m.credits[volunteer] = c
		}
		c.Examples += int64(res.Examples)
	}
}

// mirrorStep forwards the sum when it is due, hands back leases whose
// root deadline nears, and asks for more work.
func (j *Job) mirrorStep(now time.Time) {
	m, st := j.mirror, &j.st
	margin := relayMargin(st.spec.LeaseTimeout.Duration)
	var late []uint64
	for _, u := range m.ups {
		if !u.answered && now.After(u.deadline.Add(-margin)) {
			late = append(late, u.ID)
		}
	}
	if len(late) > 0 {
		j.mirrorDrop(late)
	}
	due := false
	if st.spec.Rounds() {
		// The round's block is settled: every lease answered or handed
		// back (mirrorDrop takes those out of ups). One aggregate a round.
		due = (m.results > 0 || len(m.released) > 0) && !slices.ContainsFunc(m.ups, func(u *upLease) bool { return !u.answered })
	} else {
		due = len(m.released) > 0 || m.results >= relayMaxResults(&st.spec) ||
			m.results > 0 && now.Sub(m.since) >= st.spec.EffectiveRelayWindow() // 0: each result
	}
	if due {
		j.mirrorFlush()
	}
	if j.mirrorWantsWork() {
		select {
		case m.wake <- struct{}{}:
		default:
		}
	}
}

// relayMaxResults is the most results an aggregate holds in an
// asynchronous mode with a relay_window. The root takes an aggregate of k
// results as k steps from one base (engine.Async): the last of them is
// as stale as a direct result k steps behind, and the aggregate's base
// is some versions old already, so k is held to half of max_staleness,
// the bound a direct result has. It also keeps an aggregate from turning
// into one large batch computed from the versions the relay held while
// it gathered them.
func relayMaxResults(s *jobspec.Spec) int { return max(1, s.MaxStaleness/2) }

// mirrorWantsWork reports whether the relay should lease more: its queue
// is short for its workers, and in a round mode its round is settled.
func (j *Job) mirrorWantsWork() bool {
	m, st := j.mirror, &j.st
	if st.state != StateRunning {
		return false
	}
	if st.spec.Rounds() {
		return len(m.ups) == 0
	}
	return len(st.sched.Queue()) < max(2, len(st.members))
}

// mirrorWant is how many tasks the relay asks for: two per worker.
func (j *Job) mirrorWant() int { return min(maxRelayBlock, max(2, 2*len(j.st.members))) }

// mirrorDrop hands back the root leases ids unanswered: their tasks leave
// the queue and their local leases end (a late result is refused as not
// held).
func (j *Job) mirrorDrop(ids []uint64) {
	m, st := j.mirror, &j.st
	gone := map[engine.Task]bool{}
	m.ups = slices.DeleteFunc(m.ups, func(u *upLease) bool {
		if slices.Contains(ids, u.ID) && !u.answered {
			gone[u.task()] = true
			m.released = append(m.released, u.ID)
			return true
		}
		return false
	})
	st.sched.Drop(func(t engine.Task) bool { return gone[t] })
}

// mirrorFlush hands the sum, and the leases handed back, to the outbox.
func (j *Job) mirrorFlush() {
	m := j.mirror
	if m.results == 0 && len(m.released) == 0 {
		return
	}
	if len(m.leases) == 0 {
		// Only leases handed back: nothing to apply.
		m.toRelease = append(m.toRelease, m.released...)
		m.released = nil
		m.results, m.examples, m.correct = 0, 0, 0
		return
	}
	m.seq++
	a := &relaymsg.Aggregate{
		ID: m.relay + "-" + m.bootID + "-" + strconv.FormatUint(m.seq, 10), Relay: m.relay, Job: j.ID, Run: m.run,
		Base: m.base - m.offset, Round: m.round, Leases: m.leases, Tasks: m.tasks, Volunteers: m.volunteers, Released: m.released,
		Results: m.results, Examples: m.examples, Correct: m.correct, Sum: slices.Clone(m.sum),
	}
	strikes := 0
	for v, ev := range m.strikes {
		// The root takes at most relaymsg.MaxStrikes an aggregate; the
		// rest wait for the next.
		ev = ev[:min(len(ev), relaymsg.MaxStrikes-strikes)]
		if len(ev) == 0 {
			continue
		}
		strikes += len(ev)
		if m.credits[v] == nil {
			m.credits[v] = &relaymsg.Credit{Volunteer: v}
		}
		m.credits[v].Strikes, m.credits[v].Evidence = len(ev), ev
		if m.strikes[v] = m.strikes[v][len(ev):]; len(m.strikes[v]) == 0 {
			delete(m.strikes, v)
		}
	}
	for _, c := range m.credits {
		a.Credits = append(a.Credits, *c)
	}
	m.out.push(a)
	if j.st.spec.Rounds() {
		m.answered = max(m.answered, m.round)
	}
	answered := map[uint64]bool{}
	for _, id := range m.leases {
		answered[id] = true
	}
	m.ups = slices.DeleteFunc(m.ups, func(u *upLease) bool { return answered[u.ID] })
	m.leases, m.tasks, m.volunteers, m.released = nil, nil, nil, nil
	m.results, m.examples, m.correct = 0, 0, 0
	clear(m.credits)
}

// mirrorBlock takes a block the root leased (params: the snapshot of its
// version, nil when the relay holds that version already).
func (j *Job) mirrorBlock(r relaymsg.LeaseReply, params []float32, now time.Time) {
	m, st := j.mirror, &j.st
	if r.Run != m.run && m.run != 0 && st.model.Version >= 0 {
		m.offset = st.model.Version + 1 - r.Version
	}
	if r.Run != m.run {
		// The root restarted: the leases it gave before are forgotten,
		// and it computes its versions again from its checkpoint, so a
		// task may come back at a version it was already computed from:
		// the same update, bit for bit, is no replay now.
		j.mirrorDrop(idsOf(m.ups))
		m.released = nil
		j.mirrorForget()
		m.run, m.answered = r.Run, 0
		j.st.abuse.replays = engine.ReplayWindow{}
		j.st.sched.ForgetRound() // round numbers come again, with the same tasks
	}
	if params != nil && r.Version+m.offset != st.model.Version {
		// The sum may hold results of older versions: its base is the
		// oldest, and the root weighs its staleness from there.
		copy(st.model.Params, params)
		st.model.Version = r.Version + m.offset
		if !j.publish() {
			return
		}
	}
	if st.spec.Rounds() && r.Round != m.round {
		j.mirrorFlush()
		j.mirrorDrop(idsOf(m.ups))
		m.released = nil // the root closed that round
		m.round = r.Round
	}
	for _, l := range r.Leases {
		dl := time.UnixMilli(l.DeadlineUnixMs)
		if d := now.Add(2 * st.spec.LeaseTimeout.Duration); dl.After(d) {
			dl = d // a root clock ahead of ours must not keep leases for ever
		}
		m.ups = append(m.ups, &upLease{Lease: l, deadline: dl})
		st.sched.Enqueue(engine.Task{Shard: l.Shard, Start: l.Start, Count: l.Count})
	}
}

// mirrorForget discards the sum gathered for a run of the root that is gone.
func (j *Job) mirrorForget() {
	m := j.mirror
	m.leases, m.tasks, m.volunteers, m.released = nil, nil, nil, nil
	m.results, m.examples, m.correct = 0, 0, 0
	clear(m.credits)
	// The new run's root knows none of the old run's leases.
	clear(m.strikes)
	clear(m.answeredBy)
}

func idsOf(ups []*upLease) []uint64 {
	ids := make([]uint64, len(ups))
	for i, u := range ups {
		ids[i] = u.ID
	}
	return ids
}

// strikeTap is a relay job's ledger: the server's book, with each strike
// also counted for the next aggregate, which reports it upstream.
type strikeTap struct {
	ledger
	m *mirror
}

// Strike counts the strike here and queues it for the root with the
// volunteer's latest answered root lease as evidence; a volunteer with
// none (it answered no root lease here lately) is struck here only.
func (t strikeTap) Strike(volunteer, job, detail string) int {
	if ids := t.m.answeredBy[volunteer]; len(ids) > 0 {
		t.m.strikes[volunteer] = append(t.m.strikes[volunteer], ids[len(ids)-1])
		t.m.answeredBy[volunteer] = ids[:len(ids)-1]
	}
	return t.ledger.Strike(volunteer, job, detail)
}

func (t strikeTap) banned(volunteer, address string) bool {
	b, ok := t.ledger.(banChecker)
	return ok && b.banned(volunteer, address)
}
