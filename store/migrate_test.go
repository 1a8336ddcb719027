package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fromFixture builds a database from testdata/schema-vN.sql with the plain
// SQLite driver, as a coordinator of schema N left it.
func fromFixture(t *testing.T, n int) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("testdata", fmt.Sprintf("schema-v%d.sql", n)))
	if err != nil {
		t.Fatalf("schema %d has shipped, so testdata must keep it: %v", n, err)
	}
	path := filepath.Join(t.TempDir(), fmt.Sprintf("v%d.db", n))
	foreign(t, path, string(src))
	if v := plainVersion(t, path); v != int64(n) {
		t.Fatalf("fixture schema-v%d.sql sets user_version %d", n, v)
	}
	return path
}

// plainVersion reads user_version without the store.
func plainVersion(t *testing.T, path string) int64 {
	t.Helper()
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v int64
	if err := db.QueryRow("PRAGMA user_version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// plainObjects lists the tables and indexes of path without the store.
func plainObjects(t *testing.T, path string) []string {
	t.Helper()
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query("SELECT name FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%' ORDER BY name")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	return names
}

// Every schema this repository has shipped upgrades to the current one
// with its data whole, and the upgraded database works as a new one
// does: the unfinished job resumes from its latest checkpoint, and new
// checkpoints, metrics, workers and volunteers are written.
func TestMigrateFromEveryKeptSchema(t *testing.T) {
	for n := 1; n < SchemaVersion(); n++ {
		t.Run(fmt.Sprintf("v%d", n), func(t *testing.T) {
			ctx := context.Background()
			path := fromFixture(t, n)
			s, err := Open(path)
			if err != nil {
				t.Fatalf("opening a schema %d database: %v", n, err)
			}
			defer s.Close()
			if _, v, _ := header(t, s); v != int64(SchemaVersion()) || s.UpgradedFrom() != n {
				t.Fatalf("user_version %d after migrating from %d (UpgradedFrom says %d), want %d", v, n, s.UpgradedFrom(), SchemaVersion())
			}

			jobs, err := s.Jobs(ctx)
			if err != nil || len(jobs) != 2 {
				t.Fatalf("jobs after migrating: %+v, %v", jobs, err)
			}
			var run JobRecord
			for _, j := range jobs {
				if j.ID == "job-run" {
					run = j
				}
			}
			if run.State != "running" || run.Name != "fixture" || run.Incarnation != 2 ||
				!run.CreatedAt.Equal(time.Unix(0, 1764400000000000000)) || !strings.Contains(string(run.Spec), "mnist-mlp") {
				t.Fatalf("the running job after migrating: %+v", run)
			}
			done, err := s.Job(ctx, "job-done")
			if err != nil || done.State != "done" || done.DoneAt.IsZero() || done.Reason != "target accuracy reached" {
				t.Fatalf("the finished job after migrating: %+v, %v", done, err)
			}

			// What ResumeJobs does: the next incarnation, then the latest
			// checkpoint, its checksum verified.
			if inc, err := s.NextIncarnation(ctx, "job-run"); err != nil || inc != 3 {
				t.Fatalf("NextIncarnation: %d, %v; want 3", inc, err)
			}
			c, err := s.LatestCheckpoint(ctx, "job-run")
			if err != nil {
				t.Fatalf("latest checkpoint after migrating: %v", err)
			}
			if c.Version != 20 || c.Epoch != 1 || !bytes.Equal(c.Params, []byte{9, 8, 7, 6}) || string(c.Progress) != `{"shard":7}` {
				t.Fatalf("latest checkpoint: %+v", c)
			}
			if old, err := s.Checkpoint(ctx, "job-run", 10); err != nil || !bytes.Equal(old.OptState, []byte{5, 6}) {
				t.Fatalf("checkpoint 10: %+v, %v", old, err)
			}
			if ms, err := s.Metrics(ctx, "job-run", 10); err != nil || len(ms) != 2 {
				t.Fatalf("metrics after migrating: %+v, %v", ms, err)
			}
			if ws, err := s.Workers(ctx); err != nil || len(ws) != 1 || ws[0].Examples != 6400 || ws[0].Threads != 4 {
				t.Fatalf("workers after migrating: %+v, %v", ws, err)
			}

			// Writing goes on as on a new database.
			if err := s.SaveVolunteers(ctx, VolunteerBatch{Volunteers: []VolunteerRecord{{ID: "v-1", Name: "v"}}}); err != nil {
				t.Fatal(err)
			}
			err = s.SaveCheckpoint(ctx, Checkpoint{JobID: "job-run", Version: 30, Epoch: 2, Params: []byte{1}, Progress: []byte(`{}`),
				Credits: []VolunteerCredit{{Volunteer: "v-1", Examples: 64}}}, 2)
			if err != nil {
				t.Fatal(err)
			}
			if infos, err := s.Checkpoints(ctx, "job-run"); err != nil || len(infos) != 2 || infos[0].Version != 30 || infos[1].Version != 20 {
				t.Fatalf("checkpoints after a new one (keep 2): %+v, %v", infos, err)
			}
			if err := s.AddMetric(ctx, Metric{JobID: "job-run", Version: 30, ExamplesPerSec: 1}); err != nil {
				t.Fatal(err)
			}
			if err := s.UpsertWorker(ctx, WorkerRecord{ID: "w-2", JobID: "job-run"}); err != nil {
				t.Fatal(err)
			}
			if n, err := s.PruneWorkers(ctx, 1, time.Unix(0, 0)); err != nil || n != 1 {
				t.Fatalf("PruneWorkers: %d, %v; want the fixture's older worker pruned", n, err)
			}
			if vs, err := s.Volunteers(ctx); err != nil || len(vs) != 1 || vs[0].Examples != 64 {
				t.Fatalf("volunteers: %+v, %v", vs, err)
			}
			if err := s.IntegrityCheck(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A disk that fails part-way through an upgrade leaves the database at
// the version it had, with none of the newer tables: the migrations and
// the version bump are one transaction. The next start upgrades it.
func TestMigrationFailureLeavesTheOldSchema(t *testing.T) {
	path := fromFixture(t, 1)
	before := plainObjects(t, path)
	all := migrations
	// A last step that runs into a full disk: max_page_count caps the
	// file, and SQLite answers SQLITE_FULL as it would for a full file
	// system, after the steps before it have run in the transaction.
	migrations = append(all[:len(all):len(all)], `
PRAGMA max_page_count = 1;
CREATE TABLE filler (x BLOB) STRICT;
INSERT INTO filler VALUES (zeroblob(1000000));`)
	s, err := Open(path)
	migrations = all
	if err == nil {
		s.Close()
		t.Fatal("Open succeeded with a migration that fills the disk")
	}
	for _, want := range []string{path, fmt.Sprintf("from version %d to %d", len(all), len(all)+1), "free disk space", "left at schema 1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	t.Log(err)
	if v := plainVersion(t, path); v != 1 {
		t.Fatalf("user_version %d after a failed upgrade, want 1 (untouched)", v)
	}
	if after := plainObjects(t, path); strings.Join(after, ",") != strings.Join(before, ",") {
		t.Fatalf("tables and indexes after a failed upgrade: %v, want those of schema 1: %v", after, before)
	}

	s, err = Open(path)
	if err != nil {
		t.Fatalf("upgrading after the failure: %v", err)
	}
	defer s.Close()
	if _, v, _ := header(t, s); v != int64(SchemaVersion()) || s.UpgradedFrom() != 1 {
		t.Fatalf("user_version %d, upgraded from %d; want %d, from 1", v, s.UpgradedFrom(), SchemaVersion())
	}
	if c, err := s.LatestCheckpoint(context.Background(), "job-run"); err != nil || c.Version != 20 {
		t.Fatalf("latest checkpoint after the upgrade: %+v, %v", c, err)
	}
}

// OpenNoUpgrade (export's) refuses an older schema by both versions and
// leaves the file as it was; Open then upgrades it.
func TestOpenNoUpgradeRefusesAnOlderSchema(t *testing.T) {
	path := fromFixture(t, 1)
	before := fileHash(t, path)
	s, err := OpenNoUpgrade(path)
	if err == nil {
		s.Close()
		t.Fatal("OpenNoUpgrade opened a schema 1 database")
	}
	for _, want := range []string{path, "schema 1", fmt.Sprintf("this build writes %d", SchemaVersion()), "back it up first"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if !errors.Is(err, ErrOlderSchema) {
		t.Errorf("error %v is not ErrOlderSchema", err)
	}
	if fileHash(t, path) != before {
		t.Fatal("OpenNoUpgrade changed the file")
	}
	if s, err = Open(path); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// Current and new databases open as with Open.
	if s, err = OpenNoUpgrade(path); err != nil {
		t.Fatalf("OpenNoUpgrade of a current database: %v", err)
	}
	s.Close()
	if s, err = OpenNoUpgrade(filepath.Join(t.TempDir(), "new.db")); err != nil {
		t.Fatalf("OpenNoUpgrade of a new database: %v", err)
	}
	if s.UpgradedFrom() != 0 {
		t.Errorf("a new database reports an upgrade from %d", s.UpgradedFrom())
	}
	s.Close()
}
