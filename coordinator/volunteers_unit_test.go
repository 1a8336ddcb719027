package coordinator

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/store"
)

// startedLease grants worker one lease of j and starts it.
func startedLease(t *testing.T, j *Job, worker string) protocol.Lease {
	t.Helper()
	ls := j.grant(worker, 1, "")
	if len(ls) != 1 {
		t.Fatalf("no lease for %s", worker)
	}
	started, err := j.start(worker, ls[0].ID, "")
	if err != nil {
		t.Fatal(err)
	}
	ls[0].BaseVersion = started.BaseVersion
	return ls[0]
}

func submissionOf(j *Job, worker, volunteer string, l protocol.Lease) submission {
	// Distinct per lease: a repeated update would be refused as a replay.
	sub := result(j, l, 0.01*float32(l.ID))
	sub.worker, sub.volunteer = worker, volunteer
	return sub
}

// An accepted result credits its volunteer with its examples and their
// FLOPs; once the volunteer is banned, its results in flight, and those of
// anyone at an address it used, are refused as banned and change nothing;
// a pardon lets them in again.
func TestCreditAndBannedResults(t *testing.T) {
	j := tinyJob(t, "")
	j.st.spot.Rate = 0 // every lease here a primary, none a spot check's copy
	book := newVolunteerBook()
	j.ledger = book
	// A dense layer of 4 inputs and 2 units: 8 multiply-adds, 48 FLOPs.
	if j.flopsPerExample != 48 {
		t.Fatalf("flopsPerExample %v, want 48", j.flopsPerExample)
	}
	j.join("w1", member{volunteer: "k-mallory", address: "127.0.0.2"})
	j.join("w2", member{volunteer: "k-sybil", address: "127.0.0.2"})
	j.join("w3", member{volunteer: "k-honest", address: "127.0.0.3"})
	book.seen("k-mallory", "mallory", "", "127.0.0.2")

	l := startedLease(t, j, "w1")
	if a := j.apply(submissionOf(j, "w1", "k-mallory", l)); !a.Accepted {
		t.Fatalf("first result: %+v", a)
	}
	credit := *book.byID["k-mallory"]
	if credit.Examples != int64(l.Count) || credit.FLOPs != float64(l.Count)*48 {
		t.Fatalf("credit after one result of %d examples: %d examples, %v FLOPs", l.Count, credit.Examples, credit.FLOPs)
	}

	inFlight1, inFlight2 := startedLease(t, j, "w1"), startedLease(t, j, "w2")
	book.Ban("k-mallory", "forged results")
	version := j.st.model.Version
	for _, c := range []struct {
		worker, volunteer string
		l                 protocol.Lease
	}{{"w1", "k-mallory", inFlight1}, {"w2", "k-sybil", inFlight2}} {
		a := j.apply(submissionOf(j, c.worker, c.volunteer, c.l))
		if a.Accepted || a.Reason != protocol.ReasonBanned {
			t.Fatalf("%s's result after the ban: %+v, want refused as banned", c.volunteer, a)
		}
	}
	if j.st.model.Version != version || book.byID["k-mallory"].Examples != credit.Examples || book.byID["k-sybil"] != nil {
		t.Fatalf("a banned result changed something: version %d -> %d, credit %d -> %d", version, j.st.model.Version,
			credit.Examples, book.byID["k-mallory"].Examples)
	}
	if j.st.rejections[protocol.ReasonBanned] != 2 {
		t.Fatalf("rejections %v, want 2 banned", j.st.rejections)
	}
	// Someone else, elsewhere, is not touched by the ban.
	if a := j.apply(submissionOf(j, "w3", "k-honest", startedLease(t, j, "w3"))); !a.Accepted {
		t.Fatalf("an honest volunteer's result: %+v", a)
	}
	if why := book.refusal("k-new", "127.0.0.2"); !strings.Contains(why, "address") || !strings.Contains(why, "forged results") {
		t.Fatalf("a new key from the banned address: refusal %q", why)
	}

	if !book.Pardon("k-mallory") || book.Pardon("k-unknown") {
		t.Fatal("Pardon: want true for a known volunteer, false for an unknown one")
	}
	if a := j.apply(submissionOf(j, "w2", "k-sybil", startedLease(t, j, "w2"))); !a.Accepted {
		t.Fatalf("after the pardon, a result from the address: %+v", a)
	}
	if why := book.refusal("k-mallory", "127.0.0.2"); why != "" {
		t.Fatalf("after the pardon: refusal %q", why)
	}
}

// Refuted credit moves from the credit to the refuted columns.
func TestRefuteMovesCredit(t *testing.T) {
	book := newVolunteerBook()
	book.Credit("k-a", "j", 100, 1e6)
	book.Refute("k-a", "j", 30, 3e5)
	s := book.byID["k-a"]
	if s.Examples != 70 || s.FLOPs != 7e5 || s.RefutedExamples != 30 || s.RefutedFLOPs != 3e5 {
		t.Fatalf("after refuting 30 of 100: %+v", *s)
	}
	if book.Strike("k-a", "j", "x") != 1 || book.Strike("k-a", "j", "y") != 2 {
		t.Fatal("strikes do not count up")
	}
}

// A book with a store writes behind; a new book on the reopened file has
// the ban and the address bans, and the credit a checkpoint took. Names that fail
// CheckVolunteerName are never stored, and a reason's control characters
// are not kept.
func TestLedgerSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ct.db")
	db, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	book := newVolunteerBook()
	if err := book.load(ctx, db, LogfLogger(t.Logf)); err != nil {
		t.Fatal(err)
	}
	book.seen("k-a", "alice", "", "127.0.0.2")
	book.seen("k-a", "", "", "127.0.0.3") // no name: keeps alice
	book.seen("k-b", "bob\nFORGED", "", "127.0.0.4")
	for i := range maxVolunteerAddresses + 2 {
		book.seen("k-c", "", "", "10.0.0."+string(rune('a'+i)))
	}
	book.Credit("k-a", "j", 640, 6.4e8)
	book.Ban("k-b", "strikes\x1b[2J")
	// Credit is durable with the checkpoint that holds the work.
	if err := db.CreateJob(ctx, store.JobRecord{ID: "j", State: StateRunning}); err != nil {
		t.Fatal(err)
	}
	if err := db.SaveCheckpoint(ctx, store.Checkpoint{JobID: "j", Version: 1, Params: []byte{0}, Credits: book.takeCredit("j")}, 1); err != nil {
		t.Fatal(err)
	}
	if err := book.close(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	db.Close()

	db, err = store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	again := newVolunteerBook()
	if err := again.load(ctx, db, LogfLogger(t.Logf)); err != nil {
		t.Fatal(err)
	}
	defer again.close(time.Now().Add(10 * time.Second))
	a := again.byID["k-a"]
	if a == nil || a.Name != "alice" || a.Examples != 640 || a.FLOPs != 6.4e8 || len(a.Addresses) != 2 || a.Addresses[1].Address != "127.0.0.3" {
		t.Fatalf("k-a after reopen: %+v", a)
	}
	b := again.byID["k-b"]
	if b == nil || b.Name != "" || !b.Banned || b.BanReason != "strikes [2J" {
		t.Fatalf("k-b after reopen: %+v", b)
	}
	if c := again.byID["k-c"]; len(c.Addresses) != maxVolunteerAddresses || c.Addresses[0].Address != "10.0.0.c" {
		t.Fatalf("k-c keeps %d addresses from %v; want the last %d", len(c.Addresses), c.Addresses, maxVolunteerAddresses)
	}
	if why := again.refusal("k-new", "127.0.0.4"); !strings.Contains(why, "strikes") {
		t.Fatalf("the banned volunteer's address after reopen: refusal %q", why)
	}
	// A pardon reaches the disk too.
	again.Pardon("k-b")
	if err := again.close(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if bans, err := db.AddressBans(ctx); err != nil || len(bans) != 0 {
		t.Fatalf("address bans after the pardon: %v, %v", bans, err)
	}
}

// A write the store refuses is kept and retried with the next: nothing
// changed is dropped, and a pardon queued meanwhile drops the pending
// bans it lifts (a batch applies its lifts before its bans).
func TestLedgerKeepsFailedWrites(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "ct.db"))
	if err != nil {
		t.Fatal(err)
	}
	book := newVolunteerBook()
	book.w = newLedgerWriter(db, LogfLogger(t.Logf)) // flushed by hand below, not by its goroutine
	db.Close()                                       // every write fails from now on
	book.seen("k-a", "", "", "127.0.0.2")
	book.Credit("k-a", "j", 10, 100)
	book.Ban("k-a", "strikes")
	book.w.flush(book)
	pending := func() (bool, int, int) {
		book.mu.Lock()
		defer book.mu.Unlock()
		return book.w.dirty["k-a"], len(book.w.bans), len(book.w.lifts)
	}
	if dirty, bans, _ := pending(); !dirty || bans != 1 || book.w.failed.Load() == 0 {
		t.Fatalf("after a failed write: dirty %v, %d bans pending, %d failures; want the row and the ban kept", dirty, bans, book.w.failed.Load())
	}
	book.Pardon("k-a")
	if _, bans, lifts := pending(); bans != 0 || lifts == 0 {
		t.Fatalf("after a pardon: %d bans, %d lifts pending; want the ban dropped and a lift queued", bans, lifts)
	}
}
