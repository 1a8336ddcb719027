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
	// A later save replaces the row and the address list.
	alice.Examples, alice.Addresses = 12800, []VolunteerAddress{{"127.0.0.3", t0.Add(2 * time.Minute)}}
	if err := s.SaveVolunteers(ctx, VolunteerBatch{Volunteers: []VolunteerRecord{alice}}); err != nil {
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
	if err := s.SaveVolunteers(ctx, VolunteerBatch{Volunteers: []VolunteerRecord{{ID: "a-1", Examples: 5}}}); err != nil {
		t.Fatal(err)
	}
	if vs, err := s.Volunteers(ctx); err != nil || len(vs) != 1 || vs[0].Examples != 5 {
		t.Fatalf("volunteers after migrating: %+v, %v", vs, err)
	}
}
