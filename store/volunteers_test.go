package store

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// Credit, addresses and bans written by one Store are read back whole by
// the next one to open the file.
func TestVolunteersSurviveReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "crowdtrain.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	alice := VolunteerRecord{
		ID: "k-00112233", Name: "Alice ✓", Examples: 6400, FLOPs: 3.9e12, RefutedExamples: 64, RefutedFLOPs: 3.9e10,
		Strikes: 1, FirstSeen: t0, LastSeen: t0.Add(time.Hour),
		Addresses: []VolunteerAddress{{"127.0.0.2", t0}, {"127.0.0.3", t0.Add(time.Minute)}},
	}
	mallory := VolunteerRecord{ID: "t-abcd", TokenID: "abcd", Strikes: 3, Banned: true, BanReason: "3 spot-check strikes",
		FirstSeen: t0, LastSeen: t0, Addresses: []VolunteerAddress{{"127.0.0.9", t0}}}
	err = s.SaveVolunteers(ctx, VolunteerBatch{
		Volunteers: []VolunteerRecord{alice, mallory},
		Bans:       []AddressBan{{Address: "127.0.0.9", Volunteer: "t-abcd", Reason: "3 spot-check strikes", BannedAt: t0}},
	})
	if err != nil {
		t.Fatal(err)
	}
	// A later save replaces the row and the address list, but not the
	// credit: that comes only with a checkpoint.
	alice.Examples, alice.Addresses = 12800, []VolunteerAddress{{"127.0.0.3", t0.Add(2 * time.Minute)}}
	if err := s.SaveVolunteers(ctx, VolunteerBatch{Volunteers: []VolunteerRecord{alice}}); err != nil {
		t.Fatal(err)
	}
	mustCreateJob(t, s, "j")
	err = s.SaveCheckpoint(ctx, Checkpoint{JobID: "j", Version: 1, Params: []byte{1}, Credits: []VolunteerCredit{
		{Volunteer: alice.ID, Examples: 12800, FLOPs: 3.9e12, RefutedExamples: 64, RefutedFLOPs: 3.9e10}}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.Volunteers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, []VolunteerRecord{alice, mallory}) {
		t.Fatalf("volunteers after reopen:\n got %+v\nwant %+v", got, []VolunteerRecord{alice, mallory})
	}
	bans, err := s.AddressBans(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(bans) != 1 || bans[0].Address != "127.0.0.9" || bans[0].Volunteer != "t-abcd" || bans[0].Reason != "3 spot-check strikes" {
		t.Fatalf("address bans after reopen: %+v", bans)
	}

	// A pardon lifts the address bans; a ban in the same batch stays.
	mallory.Banned, mallory.BanReason = false, ""
	err = s.SaveVolunteers(ctx, VolunteerBatch{Volunteers: []VolunteerRecord{mallory}, LiftBansOf: []string{"t-abcd", "k-00112233"},
		Bans: []AddressBan{{Address: "127.0.0.3", Volunteer: "k-00112233", Reason: "operator"}}})
	if err != nil {
		t.Fatal(err)
	}
	bans, err = s.AddressBans(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(bans) != 1 || bans[0].Address != "127.0.0.3" {
		t.Fatalf("address bans after a pardon and a ban: %+v", bans)
	}
}

func TestJoinTokens(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tok := JoinToken{ID: "a1b2", Name: "alice", SecretHash: []byte{1, 2, 3}, CreatedAt: t0}
	if err := s.CreateJoinToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateJoinToken(ctx, tok); !errors.Is(err, ErrExists) {
		t.Fatalf("second token with the id: %v, want ErrExists", err)
	}
	if err := s.RevokeJoinToken(ctx, "nope", t0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("revoking an unknown token: %v, want ErrNotFound", err)
	}
	if err := s.RevokeJoinToken(ctx, "a1b2", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeJoinToken(ctx, "a1b2", t0.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	list, err := s.JoinTokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tok.RevokedAt = t0.Add(time.Hour) // the first revocation stands
	if !reflect.DeepEqual(list, []JoinToken{tok}) {
		t.Fatalf("tokens: %+v, want %+v", list, []JoinToken{tok})
	}
}

// A database of the schema before the ledger gains its tables and keeps
// its jobs and workers.
func TestMigrateToVolunteers(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	all := migrations
	migrations = all[:2] // the schema before the volunteer tables
	s, err := Open(path)
	if err == nil {
		mustCreateJob(t, s, "j1")
		err = s.UpsertWorker(ctx, WorkerRecord{ID: "w1", JobID: "j1"})
		s.Close()
	}
	migrations = all
	if err != nil {
		t.Fatal(err)
	}
	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, v, _ := header(t, s); v != int64(len(all)) {
		t.Fatalf("user_version %d after migrating, want %d", v, len(all))
	}
	if jobs, err := s.Jobs(ctx); err != nil || len(jobs) != 1 {
		t.Fatalf("jobs after migrating: %v, %v", jobs, err)
	}
	if ws, err := s.Workers(ctx); err != nil || len(ws) != 1 {
		t.Fatalf("workers after migrating: %v, %v", ws, err)
	}
	if err := s.SaveVolunteers(ctx, VolunteerBatch{Volunteers: []VolunteerRecord{{ID: "a-1", Name: "a"}}}); err != nil {
		t.Fatal(err)
	}
	err = s.SaveCheckpoint(ctx, Checkpoint{JobID: "j1", Version: 1, Params: []byte{1}, Credits: []VolunteerCredit{{Volunteer: "a-1", Examples: 5}}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if vs, err := s.Volunteers(ctx); err != nil || len(vs) != 1 || vs[0].Examples != 5 || vs[0].Name != "a" {
		t.Fatalf("volunteers after migrating: %+v, %v", vs, err)
	}
}

// credited reads v's credited examples and FLOPs as a fresh reader of the
// file sees them.
func credited(t *testing.T, path, v string) (int64, float64, int64) {
	t.Helper()
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	vols, err := r.Volunteers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range vols {
		if rec.ID == v {
			return rec.Examples, rec.FLOPs, rec.RefutedExamples
		}
	}
	return 0, 0, 0
}

// Credit lands with the checkpoint that holds the work, in its
// transaction: a save that fails adds none, one that commits adds it all,
// and SaveVolunteers (written behind, at any moment) never moves it. The
// writer is never closed, as if the process had been killed after each
// step; a second Store reads what the file holds.
func TestCreditCommitsWithCheckpoint(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "crowdtrain.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	mustCreateJob(t, s, "j")
	mustCreateJob(t, s, "k")

	// The book's standing runs ahead of the model; its row does not.
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	live := VolunteerRecord{ID: "k-alice", Name: "alice", Examples: 640, FLOPs: 1e9, FirstSeen: t0, LastSeen: t0}
	if err := s.SaveVolunteers(ctx, VolunteerBatch{Volunteers: []VolunteerRecord{live}}); err != nil {
		t.Fatal(err)
	}
	if ex, _, _ := credited(t, path, "k-alice"); ex != 0 {
		t.Fatalf("after SaveVolunteers alone the row holds %d credited examples, want 0 (no checkpoint holds the work yet)", ex)
	}

	// A checkpoint the database refuses inside its transaction (its job is
	// gone), after the credit was added, takes the credit back with it.
	orphan := Checkpoint{JobID: "gone", Version: 1, Params: []byte{1},
		Credits: []VolunteerCredit{{Volunteer: "k-alice", Examples: 640, FLOPs: 1e9}}}
	if err := s.SaveCheckpoint(ctx, orphan, 2); !errors.Is(err, ErrNotFound) {
		t.Fatalf("checkpoint of a missing job: %v, want ErrNotFound", err)
	}
	if ex, _, _ := credited(t, path, "k-alice"); ex != 0 {
		t.Fatalf("after a failed checkpoint the row holds %d credited examples, want 0", ex)
	}

	// Retried, it commits once with its credit; a volunteer without a row
	// (bob) gets one. Two jobs add to the same row.
	ok := Checkpoint{JobID: "j", Version: 1, Params: []byte{1}, Credits: []VolunteerCredit{
		{Volunteer: "k-alice", Examples: 640, FLOPs: 1e9}, {Volunteer: "k-bob", Examples: 64, FLOPs: 1e8}}}
	if err := s.SaveCheckpointState(ctx, ok, 2, JobState{State: "running"}); err != nil {
		t.Fatal(err)
	}
	other := Checkpoint{JobID: "k", Version: 3, Params: []byte{1}, Credits: []VolunteerCredit{{Volunteer: "k-alice", Examples: 128, FLOPs: 2e8}}}
	if err := s.SaveCheckpoint(ctx, other, 2); err != nil {
		t.Fatal(err)
	}
	if ex, fl, _ := credited(t, path, "k-alice"); ex != 768 || fl != 1.2e9 {
		t.Fatalf("alice after checkpoints of j (640) and k (128): %d examples, %g FLOPs; want 768, 1.2e9", ex, fl)
	}
	if ex, _, _ := credited(t, path, "k-bob"); ex != 64 {
		t.Fatalf("bob: %d examples, want 64", ex)
	}

	// The book writes alice's row again with its live figures: the credit
	// stays, and the name arrives on bob's row made by the checkpoint.
	live.Examples = 99999
	bob := VolunteerRecord{ID: "k-bob", Name: "bob", FirstSeen: t0, LastSeen: t0}
	if err := s.SaveVolunteers(ctx, VolunteerBatch{Volunteers: []VolunteerRecord{live, bob}}); err != nil {
		t.Fatal(err)
	}
	// A refutation moves credit to the refuted columns with the next
	// checkpoint.
	refute := Checkpoint{JobID: "j", Version: 2, Params: []byte{2}, Credits: []VolunteerCredit{
		{Volunteer: "k-alice", Examples: -64, FLOPs: -1e8, RefutedExamples: 64, RefutedFLOPs: 1e8}}}
	if err := s.SaveCheckpoint(ctx, refute, 2); err != nil {
		t.Fatal(err)
	}
	if ex, _, ref := credited(t, path, "k-alice"); ex != 704 || ref != 64 {
		t.Fatalf("alice after a refutation of 64: %d examples, %d refuted; want 704, 64", ex, ref)
	}
	vols, err := s.Volunteers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vols {
		if v.ID == "k-bob" && (v.Name != "bob" || !v.FirstSeen.Equal(t0)) {
			t.Fatalf("bob's row after SaveVolunteers: name %q, first seen %v; want bob, %v", v.Name, v.FirstSeen, t0)
		}
	}
}
