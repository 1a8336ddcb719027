package coordinator

import (
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/protocol"
)

// abuseJob is tinyJob on a fake clock, with two volunteers joined from
// two addresses: "hostage" and "honest".
func abuseJob(t *testing.T, yaml string) (*Job, *time.Time) {
	t.Helper()
	j := tinyJob(t, yaml)
	j.st.spot.Rate = 0 // no spot check copies among the leases these rules count
	now := time.Unix(1_000_000, 0)
	j.st.sched.Now = func() time.Time { return now }
	j.join("hostage", member{volunteer: "a-hostage", address: "10.0.0.1"})
	j.join("honest", member{volunteer: "a-honest", address: "10.0.0.2"})
	return j, &now
}

// leaseFor grants worker one lease and starts it if it takes the latest
// snapshot; nil when none is granted.
func leaseFor(t *testing.T, j *Job, worker string) *protocol.Lease {
	t.Helper()
	ls := j.grant(worker, 1, "")
	if len(ls) == 0 {
		return nil
	}
	l := ls[0]
	if l.Snapshot == protocol.SnapshotLatest {
		st, err := j.start(worker, l.ID, "")
		if err != nil {
			t.Fatal(err)
		}
		l.BaseVersion = st.BaseVersion
	}
	return &l
}

// answer submits worker's result for l with an update of v everywhere
// (each v its own update: the replay window must not see two alike).
func answer(j *Job, worker string, l *protocol.Lease, v float32) protocol.Ack {
	sub := result(j, *l, v)
	sub.worker = worker
	return j.apply(sub)
}

// In async mode, a hostage holding the epoch's last task does not stall
// it: once the lease straggles, an honest worker asking for work gets a
// backup from the newest version, whose result ends the epoch with every
// example counted once; the hostage's own result comes too late, as a
// duplicate.
func TestStragglerBackupEndsTheAsyncEpoch(t *testing.T) {
	j, now := abuseJob(t, "mode: async\nlease_timeout: 60s\nmax_epochs: 2\n")
	held := leaseFor(t, j, "hostage")
	v := float32(1e-3)
	for {
		l := leaseFor(t, j, "honest")
		if l == nil {
			break
		}
		*now = now.Add(10 * time.Millisecond)
		if a := answer(j, "honest", l, v); !a.Accepted {
			t.Fatalf("honest result: %+v", a)
		}
		v += 1e-3
	}
	if j.st.epoch != 0 || j.st.remaining != int64(held.Count) {
		t.Fatalf("epoch %d, remaining %d; want epoch 0 waiting on the hostage's %d examples", j.st.epoch, j.st.remaining, held.Count)
	}
	if b := j.backup("honest", ""); b != nil {
		t.Fatalf("a backup of a lease held only %v: %+v", now.Sub(j.st.sched.Leases()[held.ID].Since), b)
	}
	*now = now.Add(j.stragglerAfter() + time.Millisecond)
	if b := j.backup("hostage", ""); b != nil {
		t.Fatalf("the hostage got a backup of its own lease: %+v", b)
	}
	bs := j.backup("honest", "")
	if len(bs) != 1 || bs[0].Start != held.Start || bs[0].Count != held.Count || bs[0].BaseVersion != j.st.model.Version {
		t.Fatalf("backup %+v of %+v; want the same examples from the newest version %d", bs, held, j.st.model.Version)
	}
	if again := j.backup("honest", ""); again != nil {
		t.Fatalf("a second backup of the same lease: %+v", again)
	}
	seen := j.st.examplesSeen
	if a := answer(j, "honest", &bs[0], v); !a.Accepted {
		t.Fatalf("backup's result: %+v", a)
	}
	if j.st.epoch != 1 || j.st.examplesSeen != seen+int64(held.Count) || j.st.abuse.backupsAnswered != 1 {
		t.Fatalf("epoch %d, examples %d (+%d), backups answered %d; want epoch 1 after the hostage's task counted once",
			j.st.epoch, j.st.examplesSeen, j.st.examplesSeen-seen, j.st.abuse.backupsAnswered)
	}
	version := j.st.model.Version
	if a := answer(j, "hostage", held, v+1); a.Accepted || a.Reason != protocol.ReasonDuplicate {
		t.Fatalf("the hostage's late result: %+v, want rejected as duplicate", a)
	}
	if j.st.model.Version != version || j.st.examplesSeen != seen+int64(held.Count) {
		t.Fatal("the duplicate moved the model or the count")
	}
}

// In a sync round, a hostage's lease keeps the round from closing; its
// backup takes no place of its own (the round still leases no more), and
// its result fills the hostage's place and closes the round. The
// hostage's expiry afterwards gives back no place, and queues nothing.
func TestStragglerBackupFillsItsPrimarysPlaceInARound(t *testing.T) {
	j, now := abuseJob(t, "mode: sync\nround_size: 2\nbackup_workers: 0\nlease_timeout: 60s\n")
	held := leaseFor(t, j, "hostage")
	mine := leaseFor(t, j, "honest")
	if held == nil || mine == nil || held.Round != 1 || mine.Round != 1 {
		t.Fatalf("round 1's leases: %+v, %+v", held, mine)
	}
	*now = now.Add(500 * time.Millisecond)
	if a := answer(j, "honest", mine, 0.01); !a.Accepted {
		t.Fatalf("honest: %+v", a)
	}
	if l := leaseFor(t, j, "honest"); l != nil {
		t.Fatalf("a round of 2 leased a third task: %+v", l)
	}
	queued := len(j.st.sched.Queue())
	*now = now.Add(j.stragglerAfter())
	bs := j.backup("honest", "")
	if len(bs) != 1 || bs[0].Round != 1 || bs[0].BaseVersion != held.BaseVersion {
		t.Fatalf("backup %+v; want round 1 from the round's base %d", bs, held.BaseVersion)
	}
	if l := leaseFor(t, j, "honest"); l != nil {
		t.Fatalf("the backup took a place in the round: a third lease %+v", l)
	}
	if a := answer(j, "honest", &bs[0], 0.02); !a.Accepted || a.Version != 1 {
		t.Fatalf("backup's result: %+v; want accepted, closing round 1 (version 1)", a)
	}
	*now = now.Add(2 * time.Minute)
	j.expireLeases()
	if len(j.st.sched.Queue()) != queued {
		t.Fatalf("the superseded hostage lease's expiry queued its task again: %d queued, want %d", len(j.st.sched.Queue()), queued)
	}
	// Round 2 leases both its places: none was given back to round 1's count.
	a, b := leaseFor(t, j, "honest"), leaseFor(t, j, "hostage")
	if a == nil || b == nil || a.Round != 2 {
		t.Fatalf("round 2: %+v, %+v", a, b)
	}
}

// A primary that expires while its backup is out hands the task over:
// not queued again, and in a round its place passes to the backup.
func TestExpiredPrimaryHandsOverToItsBackup(t *testing.T) {
	j, now := abuseJob(t, "mode: sync\nround_size: 2\nbackup_workers: 0\nlease_timeout: 10s\n")
	held := leaseFor(t, j, "hostage")
	mine := leaseFor(t, j, "honest")
	*now = now.Add(time.Second)
	answer(j, "honest", mine, 0.01)
	*now = now.Add(5 * time.Second)
	bs := j.backup("honest", "")
	if len(bs) != 1 {
		t.Fatalf("no backup of a lease held 6s")
	}
	queued := len(j.st.sched.Queue())
	*now = now.Add(6 * time.Second) // the hostage's deadline, not the backup's
	j.expireLeases()
	if len(j.st.sched.Queue()) != queued || j.st.leasesExpired != 1 {
		t.Fatalf("queue %d (want %d), expired %d", len(j.st.sched.Queue()), queued, j.st.leasesExpired)
	}
	if l := leaseFor(t, j, "honest"); l != nil {
		t.Fatalf("the hostage's place was given back while its backup holds the task: %+v", l)
	}
	if a := answer(j, "honest", &bs[0], 0.02); !a.Accepted || a.Version != 1 {
		t.Fatalf("the backup's result: %+v, want it to close the round", a)
	}
	if a := answer(j, "hostage", held, 0.03); a.Accepted || a.Reason != protocol.ReasonLate || !strings.Contains(a.Detail, "backup") {
		t.Fatalf("the expired hostage's result: %+v, want refused as late, its task with the backup", a)
	}
}

// Each expiry halves the volunteer's lease cap, an accepted result raises
// it by one, and MaxExpiriesInARow expiries with no result between drop
// it: once, with the reason and the cool-off.
func TestExpiriesCutTheLeaseCapThenDropTheVolunteer(t *testing.T) {
	j, now := abuseJob(t, "mode: async\nlease_timeout: 10s\n")
	type drop struct {
		v, reason string
		until     time.Time
	}
	var drops []drop
	j.limits = jobLimits{maxLeases: 4, perAddress: 100, expiriesInARow: 3, coolOff: time.Minute,
		drop: func(v, reason string, until time.Time) { drops = append(drops, drop{v, reason, until}) }}
	share := func() int { s, _ := j.leaseShare("hostage"); return s }
	if s := share(); s != 100 {
		t.Fatalf("share before any expiry: %d, want the address's 100", s)
	}
	leaseFor(t, j, "hostage")
	*now = now.Add(11 * time.Second)
	j.expireLeases()
	if s := share(); s != 2 {
		t.Fatalf("after one expiry: share %d, want the cap of 4 halved to 2", s)
	}
	// An accepted result raises the cap by one and ends the run of expiries.
	l := leaseFor(t, j, "hostage")
	if a := answer(j, "hostage", l, 0.5); !a.Accepted {
		t.Fatal(a)
	}
	if s, why := j.leaseShare("hostage"); s != 3 || !strings.Contains(why, "expired") {
		t.Fatalf("after a result: share %d (%q), want 3", s, why)
	}
	for i := range 3 {
		leaseFor(t, j, "hostage")
		*now = now.Add(11 * time.Second)
		j.expireLeases()
		if i < 2 && len(drops) != 0 {
			t.Fatalf("dropped after %d expiries in a row, want 3", i+1)
		}
	}
	if s := share(); s != 1 {
		t.Fatalf("share %d after four expiries, want at least 1", s)
	}
	if len(drops) != 1 || drops[0].v != "a-hostage" || !strings.Contains(drops[0].reason, "3 leases expired in a row") ||
		drops[0].until.Before(time.Now().Add(59*time.Second)) {
		t.Fatalf("drops %+v; want the hostage once, for a minute", drops)
	}
	if j.st.abuse.dropped != 1 || j.abuseView().LimitedVolunteers != 1 {
		t.Fatalf("view %+v", j.abuseView())
	}
	// The honest volunteer at another address is untouched.
	if s, _ := j.leaseShare("honest"); s != 100 {
		t.Fatalf("the honest volunteer's share: %d", s)
	}
}

// An address's connections together hold at most its share of leases.
func TestLeaseShareIsPerAddress(t *testing.T) {
	j, _ := abuseJob(t, "mode: async\n")
	j.limits = jobLimits{maxLeases: 2, perAddress: 3}
	for i := range 3 {
		j.join("sybil"+string(rune('a'+i)), member{volunteer: "k-" + string(rune('a'+i)), address: "10.0.0.9"})
	}
	j.grant("sybila", 2, "")
	if s, _ := j.leaseShare("sybilb"); s != 1 {
		t.Fatalf("share of a second connection: %d, want 1", s)
	}
	j.grant("sybilb", 1, "")
	s, why := j.leaseShare("sybilc")
	if s != 0 || !strings.Contains(why, "max_leases_per_address 3") {
		t.Fatalf("share of a third connection: %d (%q), want 0 saying why", s, why)
	}
	if s, _ := j.leaseShare("honest"); s != 3 {
		t.Fatalf("another address's share: %d, want 3", s)
	}
}

// A result whose update is bit-identical to an accepted one is refused as
// a duplicate and never applied, under any lease; its task is queued
// again. Another update is accepted.
func TestReplayedUpdateIsADuplicate(t *testing.T) {
	j, _ := abuseJob(t, "mode: async\n")
	a, b := leaseFor(t, j, "honest"), leaseFor(t, j, "hostage")
	if ack := answer(j, "honest", a, 0.25); !ack.Accepted {
		t.Fatal(ack)
	}
	version, seen := j.st.model.Version, j.st.examplesSeen
	sub := result(j, *b, 0.25)
	sub.worker, sub.res.BaseVersion = "hostage", b.BaseVersion
	ack := j.apply(sub)
	if ack.Accepted || ack.Reason != protocol.ReasonDuplicate || !strings.Contains(ack.Detail, "replay") {
		t.Fatalf("replayed update: %+v, want rejected as duplicate", ack)
	}
	if j.st.model.Version != version || j.st.examplesSeen != seen || j.st.rejections[protocol.ReasonDuplicate] != 1 {
		t.Fatal("the duplicate moved the model or the counts")
	}
	if q := j.st.sched.Queue(); len(q) == 0 || q[0].Shard != b.ShardID || q[0].Start != b.Start {
		t.Fatalf("the duplicate's task was not queued again: queue %v", q)
	}
	c := leaseFor(t, j, "hostage")
	if ack := answer(j, "hostage", c, 0.5); !ack.Accepted {
		t.Fatalf("a fresh update after the duplicate: %+v", ack)
	}
	// All-zero updates are what a model with nothing left to learn sends,
	// again and again: never duplicates. The tiny set's inputs are zeros
	// and its labels 0, so biases of ±100 fit it exactly.
	saturate(j)
	for i := range 2 {
		l := leaseFor(t, j, "honest")
		if ack := answer(j, "honest", l, 0); !ack.Accepted {
			t.Fatalf("all-zero update %d: %+v", i, ack)
		}
	}
}

// owe spends past zero and says how long until the debt is paid; refund
// pays it back.
func TestOweSaysHowLongToPause(t *testing.T) {
	l := newRateLimiter(100, 200, 10) // 100 a second, 200 at most
	now := time.Unix(0, 0)
	if d := l.owe("a", 150, now); d != 0 {
		t.Fatalf("within the burst: pause %v", d)
	}
	if d := l.owe("a", 150, now); d != time.Second {
		t.Fatalf("100 past zero at 100/s: pause %v, want 1s", d)
	}
	if d := l.owe("a", 0, now.Add(time.Second)); d != 0 {
		t.Fatalf("after paying a second: pause %v, want 0", d)
	}
	l.refund("a", 100, now.Add(time.Second))
	if d := l.owe("b", 300, now); d != time.Second {
		t.Fatalf("another key: pause %v, want its own 1s", d)
	}
}

// A straggling lease of a round that closed (by round_timeout) gets no
// backup, whose result would be late too: it is taken back, and its task
// leased in the open round; the hostage's result afterwards is an unknown
// lease.
func TestClosedRoundsStragglerIsTakenBack(t *testing.T) {
	j, now := abuseJob(t, "mode: sync\nround_size: 2\nbackup_workers: 0\nround_timeout: 1s\nlease_timeout: 60s\n")
	held := leaseFor(t, j, "hostage")
	mine := leaseFor(t, j, "honest")
	*now = now.Add(500 * time.Millisecond)
	answer(j, "honest", mine, 0.01)
	*now = now.Add(time.Second)
	j.step(*now)
	if j.st.model.Version != 1 || held.Round != 1 {
		t.Fatalf("round 1 did not close on its timeout: version %d", j.st.model.Version)
	}
	if bs := j.backup("honest", ""); bs != nil {
		t.Fatalf("the lease was taken back before it straggled: %+v", bs)
	}
	*now = now.Add(j.stragglerAfter())
	bs := j.backup("honest", "")
	if len(bs) != 1 || bs[0].Round != 2 || bs[0].Start != held.Start || bs[0].ShardID != held.ShardID {
		t.Fatalf("after the closed round's lease straggled: %+v; want its task in round 2", bs)
	}
	if j.st.abuse.reclaimed != 1 || j.st.abuse.backupsGranted != 0 {
		t.Fatalf("reclaimed %d, backups %d; want 1 taken back, no backup", j.st.abuse.reclaimed, j.st.abuse.backupsGranted)
	}
	if a := answer(j, "hostage", held, 0.03); a.Accepted || a.Reason != protocol.ReasonUnknownLease {
		t.Fatalf("the reclaimed lease's result: %+v", a)
	}
}

// saturate sets tinyJob's model to fit its set exactly: inputs are zeros
// and labels 0, so the logits are the output biases (the last two
// parameters), and ±100 make the softmax one-hot in float32.
func saturate(j *Job) {
	p := j.st.model.Params
	p[len(p)-2], p[len(p)-1] = 100, -100
}

// In a round mode a straggler's backup computes from the straggler's
// base, so the straggler's own result, arriving second, is the same
// computation: credited (not applied) when it agrees with the copy
// applied, refused as a duplicate when it does not. The model and the
// job's examples move once.
func TestLateCopyInARoundIsCreditedWhenItAgrees(t *testing.T) {
	j, now := abuseJob(t, "mode: sync\nround_size: 2\nbackup_workers: 0\nlease_timeout: 60s\n")
	book := newVolunteerBook()
	j.ledger = book
	for round, tc := range []struct {
		applied, late float32 // the backup's update and the straggler's, everywhere
		agree         bool
	}{{0.5, 0.5, true}, {0.6, -0.6, false}} {
		slow := leaseFor(t, j, "hostage")
		mine := leaseFor(t, j, "honest")
		*now = now.Add(500 * time.Millisecond)
		if a := j.apply(submissionOf(j, "honest", "a-honest", *mine)); !a.Accepted {
			t.Fatalf("round %d, honest: %+v", round+1, a)
		}
		*now = now.Add(j.stragglerAfter())
		bs := j.backup("honest", "")
		if len(bs) != 1 || bs[0].BaseVersion != slow.BaseVersion {
			t.Fatalf("round %d: backup %+v of %+v", round+1, bs, slow)
		}
		sub := result(j, bs[0], tc.applied)
		sub.worker, sub.volunteer = "honest", "a-honest"
		if a := j.apply(sub); !a.Accepted {
			t.Fatalf("round %d, backup: %+v", round+1, a)
		}
		version, seen := j.st.model.Version, j.st.examplesSeen
		before := int64(0)
		if c := book.byID["a-hostage"]; c != nil {
			before = c.Examples
		}
		late := result(j, *slow, tc.late)
		late.worker, late.volunteer = "hostage", "a-hostage"
		a := j.apply(late)
		credited := int64(0)
		if c := book.byID["a-hostage"]; c != nil {
			credited = c.Examples - before
		}
		if a.Accepted != tc.agree || a.Reason != protocol.ReasonDuplicate {
			t.Fatalf("round %d: the straggler's late result (%v against the applied %v): %+v; want accepted %v, duplicate", round+1, tc.late, tc.applied, a, tc.agree)
		}
		if want := map[bool]int64{true: int64(slow.Count)}[tc.agree]; credited != want {
			t.Fatalf("round %d: the straggler was credited %d examples, want %d", round+1, credited, want)
		}
		if j.st.model.Version != version || j.st.examplesSeen != seen {
			t.Fatalf("round %d: the late copy moved the model (v%d to v%d) or the examples (%d to %d)", round+1, version, j.st.model.Version, seen, j.st.examplesSeen)
		}
	}
	if got := j.abuseView().LateCopiesCredited; got != 1 {
		t.Fatalf("late copies credited %d, want 1", got)
	}
	if len(j.st.abuse.answers) != 0 {
		t.Fatalf("%d applied answers still kept after their late copies came", len(j.st.abuse.answers))
	}
}

// A round gives a worker one place at a time (engine.Scheduler.HoldsInRound):
// a worker computes its leases one after another, so a second place it
// held would only be computed after its first, and with as many workers
// as places the round would close without it, its work thrown away as
// late. Asked for two, each worker gets one; the round's backup place goes
// to a worker with no lease of the round unanswered, and with one worker
// in rounds of one (and a backup) no result comes back late.
func TestARoundGivesAWorkerOnePlaceAtATime(t *testing.T) {
	j, _ := abuseJob(t, "mode: sync\nround_size: 2\nbackup_workers: 1\nlease_timeout: 60s\n")
	hostage, honest := j.grant("hostage", 2, ""), j.grant("honest", 2, "")
	if len(hostage) != 1 || len(honest) != 1 {
		t.Fatalf("asked for two leases each in a round of 2 and a backup: %d and %d granted; want one each", len(hostage), len(honest))
	}
	if a := answer(j, "honest", &honest[0], 0.01); !a.Accepted || a.Version != 0 {
		t.Fatalf("honest's result: %+v", a)
	}
	backup := j.grant("honest", 2, "")
	if len(backup) != 1 || backup[0].Round != 1 {
		t.Fatalf("after its result honest got %+v; want round 1's backup place", backup)
	}
	if more := j.grant("hostage", 1, ""); len(more) != 0 {
		t.Fatalf("the round's places are out, yet hostage got %+v", more)
	}

	one, _ := abuseJob(t, "mode: sync\nround_size: 1\nbackup_workers: 1\nlease_timeout: 60s\n")
	for v := range 5 {
		ls := one.grant("honest", 2, "")
		if len(ls) != 1 || ls[0].Round != uint64(v+1) {
			t.Fatalf("round %d: leases %+v; want one of this round", v+1, ls)
		}
		if a := answer(one, "honest", &ls[0], float32(v+1)*1e-3); !a.Accepted || a.Version != int64(v+1) {
			t.Fatalf("round %d: %+v; want accepted, closing the round", v+1, a)
		}
	}
	if late := one.st.rejections[protocol.ReasonLate]; late != 0 {
		t.Errorf("%d results late with one worker in rounds of one", late)
	}
}
