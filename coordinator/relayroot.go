package coordinator

import (
	"fmt"
	"slices"
	"time"

	"github.com/crowdtrain/crowdtrain/engine"
	"github.com/crowdtrain/crowdtrain/protocol"
	relaymsg "github.com/crowdtrain/crowdtrain/protocol/relay"
)

// The root's side of relays, on the job's loop: a relay holds leases
// like a worker named relayWorker(name), and answers many of them with
// one aggregate (docs/RELAYS.md). An aggregate is applied whole or not at
// all; once applied its id is kept in the checkpoint, and its
// acknowledgement waits for the checkpoint that holds its effect to be
// durable, so that neither a crash nor a redelivery loses or repeats it.

// relayWorker is the worker name a relay's leases are held under.
func relayWorker(relay string) string { return "relay/" + relay }

// relayAckDelay is the longest an applied aggregate waits for the
// checkpoint that acknowledges it.
const relayAckDelay = time.Second

// maxRelayBlock is the most tasks one lease request is granted.
const maxRelayBlock = 256

// relayRootState is the loop's relay bookkeeping.
type relayRootState struct {
	applied recentIDs
	// acks wait for the next checkpoint (persist.go).
	acks []func()
	// resumedAt is the version the job resumed from: an aggregate of an
	// earlier run computed from a newer version saw parameters this run
	// does not have.
	resumedAt int64
	// Counters for the API.
	aggregates, duplicates, refused int64
	// asked is when each relay last asked for work, and answered the
	// round it asked again for after answering it (round modes).
	asked    map[string]time.Time
	answered map[string]uint64
	// owners remembers, per relay, who answered its recently applied
	// leases: a strike is believed only with one of them as evidence.
	owners map[string]*leaseOwners
	// strikesDropped counts strikes refused for want of evidence.
	strikesDropped int64
}

// leaseOwners is a bounded map of root lease id to the volunteer a relay
// named for it, oldest dropped first.
type leaseOwners struct {
	by    map[uint64]string
	order []uint64
}

// maxLeaseOwners is how many answered leases a job remembers per relay
// as strike evidence; maxOwnerRelays bounds the relays remembered.
const (
	maxLeaseOwners = 4096
	maxOwnerRelays = 256
)

func (o *leaseOwners) add(id uint64, volunteer string) {
	if o.by == nil {
		o.by = map[uint64]string{}
	}
	o.by[id] = volunteer
	o.order = append(o.order, id)
	if len(o.order) > maxLeaseOwners {
		delete(o.by, o.order[0])
		o.order = slices.Delete(o.order, 0, 1)
	}
}

// take reports whether lease id was answered by volunteer, and forgets
// it: one task is evidence for one strike.
func (o *leaseOwners) take(id uint64, volunteer string) bool {
	if o == nil || o.by[id] != volunteer || volunteer == "" {
		return false
	}
	delete(o.by, id)
	return true
}

// relayActive is how recently a relay must have asked for work to count
// as at work.
const relayActive = 10 * time.Second

// relaysAnswered reports whether the round is answered by every relay at
// work, and no worker is connected here: nobody could grow it.
func (j *Job) relaysAnswered(round uint64) bool {
	st := &j.st
	if len(st.members) > 0 || len(st.relay.asked) == 0 {
		return false
	}
	now := st.sched.Now()
	for relay, at := range st.relay.asked {
		if now.Sub(at) > relayActive {
			delete(st.relay.asked, relay)
			continue
		}
		if st.relay.answered[relay] != round {
			return false
		}
	}
	return len(st.relay.asked) > 0
}

// recentIDs is a bounded set of ids, oldest dropped first.
type recentIDs struct {
	set   map[string]bool
	order []string
}

// maxRecentIDs is how many applied aggregate ids a job remembers: far
// more than a stream holds unacknowledged.
const maxRecentIDs = 8192

func (r *recentIDs) has(id string) bool { return r.set[id] }

func (r *recentIDs) add(id string) {
	if r.set == nil {
		r.set = map[string]bool{}
	}
	if r.set[id] {
		return
	}
	r.set[id] = true
	r.order = append(r.order, id)
	if len(r.order) > maxRecentIDs {
		delete(r.set, r.order[0])
		r.order = slices.Delete(r.order, 0, 1)
	}
}

func (r *recentIDs) list() []string { return slices.Clone(r.order) }

func (r *recentIDs) restore(ids []string) {
	r.set, r.order = nil, nil
	for _, id := range ids {
		r.add(id)
	}
}

// grantRelay leases up to req.Want tasks to a relay, all from the newest
// version, published for it to fetch.
func (j *Job) grantRelay(req relaymsg.LeaseRequest) relaymsg.LeaseReply {
	st := &j.st
	reply := relaymsg.LeaseReply{Run: j.run, State: st.state, Version: st.model.Version}
	if st.state != StateRunning {
		reply.Wait = "job is " + st.state
		return reply
	}
	if !j.publish() {
		reply.State, reply.Wait = st.state, "job is "+st.state
		return reply
	}
	reply.Version, reply.SnapshotPath = st.published, j.snapshotPath(st.published)
	now := st.sched.Now()
	if st.relay.asked == nil {
		st.relay.asked, st.relay.answered = map[string]time.Time{}, map[string]uint64{}
	}
	st.relay.asked[req.Relay] = now
	if r, ok := st.agg.(*engine.Rounds); ok && req.Answered != 0 && r.Round() <= req.Answered {
		// A relay sends one aggregate a round: it waits for the next,
		// which opens now if nobody else can grow this one.
		st.relay.answered[req.Relay] = r.Round()
		j.step(now)
		if r.Round() <= req.Answered || !j.publish() {
			reply.Round, reply.Wait = r.Round(), fmt.Sprintf("this relay answered round %d already", r.Round())
			return reply
		}
		reply.Version, reply.SnapshotPath = st.published, j.snapshotPath(st.published)
	}
	worker := relayWorker(req.Relay)
	for n := min(req.Want, maxRelayBlock); n > 0; n-- {
		round, ok := st.agg.Lease(now)
		if !ok {
			reply.Wait = fmt.Sprintf("round %d has all its leases out", round)
			break
		}
		l, ok := st.sched.Grant(worker, st.published, round)
		if !ok {
			st.agg.Unlease(round)
			reply.Wait = "no task is queued now (the epoch's last ones are out)"
			break
		}
		if !l.Started() {
			l.Base, l.Since = st.published, now // a relay starts what it leases
		}
		// A relay hands the task on and sums before it answers: twice
		// a worker's time.
		l.Deadline = now.Add(2 * st.sched.LeaseTimeout)
		st.leasesIssued++
		reply.Round = round
		reply.Leases = append(reply.Leases, relaymsg.Lease{ID: l.ID, Shard: l.Task.Shard, Start: l.Task.Start, Count: l.Task.Count,
			LocalSteps: l.LocalSteps, DeadlineUnixMs: l.Deadline.UnixMilli()})
	}
	return reply
}

// Verdicts of applyAggregate. aggForged is a refusal for claims no
// honest relay makes (credit, strikes, tasks or counts that disagree with
// what the root leased): it counts towards the relay's quarantine. A
// refusal for timing (a lease expired, a round closed) does not.
const (
	aggApplied   = "applied"
	aggDuplicate = "duplicate"
	aggRefused   = "refused"
	aggForged    = "forged"
)

// applyAggregate checks a relay's aggregate and applies it whole, or
// refuses it (detail says why) with the model untouched. ack
// acknowledges it on the stream: run once the checkpoint holding it is
// durable (at once without a store), and never for a refusal, which the
// caller terminates.
func (j *Job) applyAggregate(a *relaymsg.Aggregate, ack func()) (verdict, detail string) {
	st := &j.st
	refuse := func(format string, args ...any) (string, string) {
		st.relay.refused++
		return aggRefused, fmt.Sprintf(format, args...)
	}
	forged := func(format string, args ...any) (string, string) {
		st.relay.refused++
		return aggForged, fmt.Sprintf(format, args...)
	}
	if st.relay.applied.has(a.ID) {
		st.relay.duplicates++
		j.relayAck(ack)
		return aggDuplicate, "applied before; acknowledged again"
	}
	if st.state != StateRunning {
		return refuse("job is %s", st.state)
	}
	if d := j.checkAggregate(a); d != "" {
		return forged("%s", d)
	}
	if err := a.CheckCredits(); err != nil {
		return forged("%v", err)
	}
	worker := relayWorker(a.Relay)
	var leases []*engine.Lease
	orphan := a.Run != j.run
	if orphan {
		// Sent to an earlier run of this job: the restart forgot the
		// leases and queued their tasks again. It is applied if it
		// computed from parameters this run has and its tasks are still
		// queued, which are then taken out.
		if a.Run > j.run {
			return forged("aggregate names run %d of the job, this is run %d", a.Run, j.run)
		}
		if a.Base > st.relay.resumedAt {
			return refuse("aggregate of run %d computed from version %d, newer than the checkpoint this run resumed from (v%d): its base is lost", a.Run, a.Base, st.relay.resumedAt)
		}
		trial := engine.Scheduler{}
		trial.SetQueue(st.sched.Queue())
		for _, t := range a.Tasks {
			if !trial.TakeQueued(engine.Task{Shard: t.Shard, Start: t.Start, Count: t.Count}) {
				return refuse("aggregate of run %d covers shard %d examples %d..%d, which are no longer queued", a.Run, t.Shard, t.Start, t.Start+t.Count-1)
			}
		}
	} else {
		held := st.sched.Leases()
		for i, id := range a.Leases {
			l := held[id]
			if l == nil || l.Worker != worker {
				return refuse("lease %d is not held by relay %s (it expired, was answered, or was never granted)", id, a.Relay)
			}
			if t := a.Tasks[i]; l.Task != (engine.Task{Shard: t.Shard, Start: t.Start, Count: t.Count}) {
				return forged("lease %d is shard %d examples %d+%d, the aggregate says shard %d examples %d+%d",
					id, l.Task.Shard, l.Task.Start, l.Task.Count, t.Shard, t.Start, t.Count)
			}
			if st.spec.Rounds() && l.Round != a.Round {
				return refuse("lease %d is of round %d, the aggregate says round %d", id, l.Round, a.Round)
			}
			leases = append(leases, l)
		}
		for _, id := range a.Released {
			if l := held[id]; l == nil || l.Worker != worker {
				return refuse("released lease %d is not held by relay %s", id, a.Relay)
			}
		}
	}
	staleness := st.model.Version - a.Base
	if staleness < 0 {
		return forged("aggregate computed from version %d, newer than the model's %d", a.Base, st.model.Version)
	}
	// The gates a direct result meets, where they apply to a sum (its
	// NaN and Inf are checkAggregate's, its staleness the aggregator's):
	// the norm gate takes the mean of its results, whose norm a direct
	// result's is compared with; the replay window its sum.
	norm := protocol.Floats(a.Sum).Norm() / float64(a.Results)
	if limit, ref, on := st.norms.Limit(st.spec.MaxUpdateNormRatio); on && norm > limit {
		if st.norms.Refused(worker) {
			j.log.Warn(fmt.Sprintf("job %s: the norm gate refused %d updates in a row from several sources, none accepted between: its reference %.3g was stale; it starts again",
				j.ID, engine.NormStaleRun, ref))
		}
		return refuse("the mean of its %d results has norm %.3g, %.0fx the typical norm %.3g of accepted updates (limit %gx): the relay's own norm gate should have refused what made it",
			a.Results, norm, norm/ref, ref, st.spec.MaxUpdateNormRatio)
	}
	hash := engine.UpdateHash(a.Sum)
	if hash != 0 && st.abuse.replays.Seen(hash) {
		j.duplicateRun()
		return refuse("its sum is bit-identical to an update accepted before (a replay)")
	}
	// From here on the aggregate is taken: its leases are settled.
	for _, l := range leases {
		st.sched.Take(worker, l.ID)
	}
	if orphan {
		for _, t := range a.Tasks {
			st.sched.TakeQueued(engine.Task{Shard: t.Shard, Start: t.Start, Count: t.Count})
		}
	}
	j.releaseLeases(worker, a.Released, "relay "+a.Relay+" gave them back")
	d := st.agg.Offer(engine.Contribution{Update: a.Sum, Round: a.Round, Staleness: staleness, Examples: a.Examples,
		Worker: worker, Results: a.Results})
	if !d.Accepted {
		for _, l := range leases {
			j.requeue(l)
		}
		if orphan {
			for _, t := range a.Tasks {
				st.sched.Requeue(engine.Task{Shard: t.Shard, Start: t.Start, Count: t.Count})
			}
		}
		return refuse("%s: %s", d.Reason, d.Detail)
	}
	dropped := j.creditAggregate(a)
	st.relay.applied.add(a.ID)
	st.relay.aggregates++
	if hash != 0 {
		st.abuse.replays.Add(hash)
	}
	st.abuse.dupRun = 0
	st.nonFiniteRun = 0
	st.norms.Observe(worker, norm)
	j.countApplied(a.Results, a.Examples, staleness)
	// Stepped first: the checkpoint that acknowledges it must hold the
	// step (an asynchronous rule applies it in step, not in Offer).
	j.step(st.sched.Now())
	if st.remaining <= 0 {
		j.endEpoch()
	}
	j.relayAck(ack)
	detail = fmt.Sprintf("%d results, %d examples at staleness %d: version %d", a.Results, a.Examples, staleness, st.model.Version)
	if dropped > 0 {
		detail += fmt.Sprintf("; %d strikes REFUSED: their evidence is no task the relay answered for that volunteer (or was used already)", dropped)
	}
	return aggApplied, detail
}

// creditAggregate books an applied aggregate's credit (checked against
// its leases by CheckCredits) and its strikes, each only where its
// evidence is a lease of the relay answered by that volunteer, here or
// in an earlier aggregate; it returns how many strikes it refused.
func (j *Job) creditAggregate(a *relaymsg.Aggregate) (dropped int) {
	st := &j.st
	if st.relay.owners == nil {
		st.relay.owners = map[string]*leaseOwners{}
	}
	owners := st.relay.owners[a.Relay]
	if owners == nil {
		if len(st.relay.owners) >= maxOwnerRelays {
			clear(st.relay.owners)
		}
		owners = &leaseOwners{}
		st.relay.owners[a.Relay] = owners
	}
	for i, id := range a.Leases {
		if v := a.Volunteers[i]; v != "" {
			owners.add(id, v)
		}
	}
	for _, c := range a.Credits {
		if c.Examples > 0 {
			j.ledger.Credit(c.Volunteer, j.ID, c.Examples, float64(c.Examples)*j.flopsPerExample)
		}
		for _, id := range c.Evidence {
			if !owners.take(id, c.Volunteer) {
				dropped++
				continue
			}
			j.ledger.Strike(c.Volunteer, j.ID, fmt.Sprintf("refuted by a spot check at relay %s (lease %d)", a.Relay, id))
		}
	}
	st.relay.strikesDropped += int64(dropped)
	return dropped
}

// checkAggregate is why a is malformed for this job, or "".
func (j *Job) checkAggregate(a *relaymsg.Aggregate) string {
	examples := 0
	seen := map[uint64]bool{}
	for _, id := range slices.Concat(a.Leases, a.Released) {
		if seen[id] {
			return fmt.Sprintf("lease %d is named twice", id)
		}
		seen[id] = true
	}
	for _, t := range a.Tasks {
		if t.Count < 1 || t.Start < 0 || t.Shard < 0 || t.Shard >= len(j.shards) || t.Start+t.Count > len(j.shards[t.Shard].Indices) {
			return fmt.Sprintf("task %+v lies outside the job's shards", t)
		}
		examples += t.Count
	}
	switch {
	case len(a.Leases) == 0:
		return "aggregate answers no lease"
	case len(a.Sum) != j.model.NumParams:
		return fmt.Sprintf("sum has %d values, the model has %d parameters", len(a.Sum), j.model.NumParams)
	case a.Results != len(a.Leases):
		return fmt.Sprintf("aggregate says %d results for %d leases: a relay answers each lease with one result", a.Results, len(a.Leases))
	case a.Examples != examples:
		return fmt.Sprintf("aggregate says %d examples, its leases hold %d", a.Examples, examples)
	case a.Correct < 0 || a.Correct > a.Examples*j.model.LabelsPerExample:
		return fmt.Sprintf("aggregate says %d label positions were right, of %d examples", a.Correct, a.Examples)
	case a.Base < 0:
		return fmt.Sprintf("base version %d", a.Base)
	}
	if i := protocol.Floats(a.Sum).FirstNonFinite(); i >= 0 {
		return fmt.Sprintf("sum value %d is %v", i, a.Sum[i])
	}
	return ""
}

// relayAck queues ack for the next durable checkpoint and has one taken
// soon; without a store nothing becomes durable, and it runs at once.
func (j *Job) relayAck(ack func()) {
	if ack == nil {
		return
	}
	if j.store == nil {
		ack()
		return
	}
	j.st.relay.acks = append(j.st.relay.acks, ack)
	if time.Since(j.st.ckptAt) >= relayAckDelay {
		j.checkpoint(true)
	}
}

// flushRelayAcks checkpoints for acknowledgements that waited
// relayAckDelay (the loop's tick).
func (j *Job) flushRelayAcks(now time.Time) {
	if len(j.st.relay.acks) > 0 && now.Sub(j.st.ckptAt) >= relayAckDelay && len(j.ckptCh) == 0 {
		j.checkpoint(true)
	}
}

// runAcks runs the acknowledgements a durable checkpoint holds.
func runAcks(acks []func()) {
	for _, a := range acks {
		a()
	}
}
