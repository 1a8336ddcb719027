package coordinator_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"

	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/store"
)

// A job trained on a database of schema 1 (the first schema shipped,
// store/testdata/schema-v1.sql) resumes where it was once this build
// has upgraded the database, and trains on. The job's rows are a
// coordinator's own: the tables they live in are the same in every
// schema so far, so a coordinator of schema 1 wrote them the same, but
// for its latest checkpoint's data, which schema 1 kept in the row, not
// in chunks (schema 4).
func TestJobResumesFromAnUpgradedDatabase(t *testing.T) {
	dir := t.TempDir()
	current := filepath.Join(dir, "current.db")
	db, err := store.Open(current)
	if err != nil {
		t.Fatal(err)
	}
	spec := quietJob(t)
	g := newStoredGrid(t, db, &spec)
	rc := g.joinRaw()
	n := rc.welcome.Job.NumParams
	for i := range 3 {
		l := rc.leases(1)[0]
		u := make(protocol.Floats, n)
		for k := range u {
			u[k] = float32(i+1) * 1e-3
		}
		rc.send(&protocol.Result{LeaseID: l.ID, JobID: l.JobID, BaseVersion: l.BaseVersion, Codec: protocol.CodecF32, Update: u, Examples: l.Count, LossSum: 1})
		if a := rc.ack(l.ID); !a.Accepted {
			t.Fatalf("result %d: %+v", i, a)
		}
	}
	rc.leases(1) // publishes version 3
	before := g.jobView()
	rc.conn.CloseNow()
	g.close()
	latest, err := db.LatestCheckpoint(context.Background(), before.ID)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()

	// The schema 1 database, its own rows replaced by the job's.
	old := filepath.Join(dir, "v1.db")
	schema, err := os.ReadFile(filepath.Join("..", "store", "testdata", "schema-v1.sql"))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := sql.Open("sqlite3", old)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{string(schema),
		"DELETE FROM checkpoints", "DELETE FROM metrics", "DELETE FROM workers", "DELETE FROM jobs",
		"ATTACH DATABASE '" + current + "' AS cur",
		"INSERT INTO jobs SELECT * FROM cur.jobs",
		"INSERT INTO metrics SELECT * FROM cur.metrics", "INSERT INTO workers SELECT * FROM cur.workers",
	} {
		if _, err := plain.Exec(q); err != nil {
			t.Fatalf("%.60s: %v", q, err)
		}
	}
	if _, err := plain.Exec(`INSERT INTO checkpoints SELECT job_id, version, epoch, created_at, crc32c, ?, ?, progress
		FROM cur.checkpoints WHERE job_id = ? AND version = ?`, latest.Params, latest.OptState, latest.JobID, latest.Version); err != nil {
		t.Fatalf("the latest checkpoint as schema 1 kept it: %v", err)
	}
	if _, err := plain.Exec("DETACH DATABASE cur"); err != nil {
		t.Fatal(err)
	}
	var version int
	if err := plain.QueryRow("PRAGMA user_version").Scan(&version); err != nil || version != 1 {
		t.Fatalf("user_version %d (%v), want 1", version, err)
	}
	plain.Close()

	db2, err := store.Open(old)
	if err != nil {
		t.Fatalf("opening the schema 1 database: %v", err)
	}
	t.Cleanup(func() { db2.Close() }) // after the grid's cleanup, registered below
	if db2.UpgradedFrom() != 1 {
		t.Fatalf("UpgradedFrom %d, want 1", db2.UpgradedFrom())
	}
	g2 := newStoredGrid(t, db2, nil)
	if g2.job == nil || g2.job.ID != before.ID {
		t.Fatalf("job %s not resumed from the upgraded database", before.ID)
	}
	if v := g2.jobView(); v.Version != before.Version || v.Run != 2 || v.ExamplesSeen != before.ExamplesSeen {
		t.Fatalf("resumed at version %d, run %d, %d examples; want %d, 2, %d", v.Version, v.Run, v.ExamplesSeen, before.Version, before.ExamplesSeen)
	}
	rc2 := g2.joinRaw()
	l := rc2.leases(1)[0]
	u := make(protocol.Floats, n)
	for k := range u {
		u[k] = 1e-3
	}
	rc2.send(&protocol.Result{LeaseID: l.ID, JobID: l.JobID, BaseVersion: l.BaseVersion, Codec: protocol.CodecF32,
		Update: u, Examples: l.Count, LossSum: 1})
	if a := rc2.ack(l.ID); l.BaseVersion != before.Version || !a.Accepted {
		t.Fatalf("training on after the upgrade: lease base %d, ack %+v", l.BaseVersion, a)
	}
	if _, err := db2.Volunteers(context.Background()); err != nil {
		t.Fatalf("the ledger of the upgraded database: %v", err)
	}
}
