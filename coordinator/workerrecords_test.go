package coordinator_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	_ "github.com/mattn/go-sqlite3" // the "sqlite3" driver, for a second, lock-holding connection

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/store"
)

// A storm of short sessions leaves at most MaxWorkerRecords rows, the
// most recent ones, however many workers came and went.
func TestWorkerStormLeavesBoundedRecords(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "ct.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	spec := quietJob(t)
	const maxRows, sessions = 40, 300
	g := newStoredGridWith(t, db, &spec, func(c *coordinator.Config) {
		c.MaxWorkerRecords = maxRows
		c.HelloRate = 1e6 // one address storms on purpose, past the default hello rate
	})
	var last string
	for range sessions {
		rc := g.joinRaw()
		last = rc.welcome.WorkerID
		rc.conn.Close(websocket.StatusNormalClosure, "")
	}
	if err := g.srv.Close(); err != nil {
		t.Fatal(err)
	}
	list, err := db.Workers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(list) == 0 || len(list) > maxRows {
		t.Fatalf("%d sessions left %d worker records; want 1..%d", sessions, len(list), maxRows)
	}
	if !slices.ContainsFunc(list, func(w store.WorkerRecord) bool { return w.ID == last }) {
		t.Fatalf("the last worker, %s, has no record: pruning must keep the most recent", last)
	}
	t.Logf("%d sessions, %d records kept", sessions, len(list))
}

// holdWriteLock starts a transaction on a second connection to the
// database, as another process could, so every write of the coordinator
// waits for SQLite's write lock (up to its busy timeout, 10s). The
// returned func lets go.
func holdWriteLock(t *testing.T, path string) func() {
	t.Helper()
	other, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := other.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	release := func() {
		conn.ExecContext(context.Background(), "ROLLBACK")
		conn.Close()
		other.Close()
	}
	t.Cleanup(release)
	return release
}

// With the store's writes blocked, a worker still gets its welcome at
// once (its record waits, off the join path), and shutdown ends within
// StoreShutdownTimeout, saying what it could not write.
func TestBlockedStoreDelaysNeitherJoinNorShutdown(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ct.db")
	db, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	spec := quietJob(t)
	const shutdownTimeout = 2 * time.Second
	// Writes blocked at shutdown finish after the test: their logs must not
	// reach a finished test.
	var logMu sync.Mutex
	testOver := false
	defer func() { logMu.Lock(); testOver = true; logMu.Unlock() }()
	g := newStoredGridWith(t, db, &spec, func(c *coordinator.Config) {
		c.StoreShutdownTimeout = shutdownTimeout
		c.Logf = func(format string, args ...any) {
			logMu.Lock()
			defer logMu.Unlock()
			if !testOver {
				t.Logf(format, args...)
			}
		}
	})
	g.waitFor("the first checkpoint", 10*time.Second, func(v coordinator.JobView) bool { return v.LastCheckpoint != nil })
	release := holdWriteLock(t, path)

	for i := range 3 {
		start := time.Now()
		rc := g.joinRaw() // dials, says hello, reads the welcome
		if took := time.Since(start); took > 3*time.Second {
			t.Fatalf("worker %d got its welcome %v after joining with the store blocked; want it at once", i, took.Round(time.Millisecond))
		}
		if i < 2 {
			rc.conn.Close(websocket.StatusNormalClosure, "")
			continue
		}
		// One accepted update, so shutdown has a final checkpoint to write.
		l := rc.leases(1)[0]
		rc.send(&protocol.Result{LeaseID: l.ID, JobID: l.JobID, BaseVersion: l.BaseVersion, Codec: protocol.CodecF32,
			Update: smallUpdate(rc.welcome.Job.NumParams), Examples: l.Count, LossSum: 1})
		if a := rc.ack(l.ID); !a.Accepted {
			t.Fatalf("result: %+v", a)
		}
		rc.conn.CloseNow()
	}

	start := time.Now()
	err = g.srv.Close()
	took := time.Since(start)
	if took > shutdownTimeout+2*time.Second {
		t.Fatalf("Close took %v with the store blocked; want it bounded by StoreShutdownTimeout (%v)", took.Round(time.Millisecond), shutdownTimeout)
	}
	if err == nil || !strings.Contains(err.Error(), "did not finish writing the final checkpoints within 2s") {
		t.Fatalf("Close with the store blocked returned %v; want it to say the final checkpoints were not written", err)
	}
	t.Logf("Close returned after %v: %v", took.Round(time.Millisecond), err)
	release()
	db.Close()
}
