package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func fileHash(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// foreign runs statements on path with the plain mattn driver, as
// another application (or the sqlite3 shell) would.
func foreign(t *testing.T, path string, stmts ...string) {
	t.Helper()
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// header reads application_id, user_version and the journal mode through
// the store's own writer connection.
func header(t *testing.T, s *Store) (appID, version int64, mode string) {
	t.Helper()
	for q, p := range map[string]any{"PRAGMA application_id": &appID, "PRAGMA user_version": &version, "PRAGMA journal_mode": &mode} {
		if err := s.w.QueryRow(q).Scan(p); err != nil {
			t.Fatal(err)
		}
	}
	return
}

func checkInitialised(t *testing.T, path string) {
	t.Helper()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if app, v, mode := header(t, s); app != ApplicationID || v != int64(SchemaVersion()) || mode != "wal" {
		t.Errorf("application_id %#x, user_version %d, journal_mode %s; want %#x, %d, wal", app, v, mode, ApplicationID, SchemaVersion())
	}
	mustCreateJob(t, s, "j")
}

func TestOpenCreates(t *testing.T) {
	dir := t.TempDir()
	checkInitialised(t, filepath.Join(dir, "new.db"))
	// Characters that mean something in a SQLite URI.
	odd := filepath.Join(dir, "a?b#c%20d.db")
	checkInitialised(t, odd)
	if _, err := os.Stat(odd); err != nil {
		t.Errorf("database not created under its exact name: %v", err)
	}
	// Reopening an initialised database works and keeps the data.
	s, err := Open(odd)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Job(context.Background(), "j"); err != nil {
		t.Error(err)
	}
}

func TestOpenEmptyFiles(t *testing.T) {
	dir := t.TempDir()
	zero := filepath.Join(dir, "zero.db")
	if err := os.WriteFile(zero, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	checkInitialised(t, zero)

	// A SQLite database with no tables and no application_id: nothing to lose.
	empty := filepath.Join(dir, "empty.db")
	foreign(t, empty, "CREATE TABLE t (x)", "DROP TABLE t")
	if fi, err := os.Stat(empty); err != nil || fi.Size() == 0 {
		t.Fatalf("setup: %v %v", fi, err)
	}
	checkInitialised(t, empty)
}

// refused checks that Open fails with want and leaves the file as it was.
func refused(t *testing.T, path string, want error, msg ...string) {
	t.Helper()
	before := fileHash(t, path)
	s, err := Open(path)
	if err == nil {
		s.Close()
		t.Fatalf("Open(%s) succeeded, want %v", path, want)
	}
	if !errors.Is(err, want) {
		t.Errorf("Open: %v, want %v", err, want)
	}
	for _, m := range append(msg, path) {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("error %q does not mention %q", err, m)
		}
	}
	if fileHash(t, path) != before {
		t.Errorf("Open changed %s", path)
	}
	if fi, err := os.Stat(path + "-wal"); err == nil && fi.Size() > 0 {
		t.Errorf("Open left a %d-byte WAL beside %s", fi.Size(), path)
	}
	t.Log(err)
}

func TestOpenNotCrowdtrain(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, "other.db")
	foreign(t, other, "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)", "INSERT INTO notes (body) VALUES ('keep me')")
	refused(t, other, ErrNotCrowdtrain, "another application")

	// Another application's id, tables or not.
	claimed := filepath.Join(dir, "claimed.db")
	foreign(t, claimed, "PRAGMA application_id = 1234")
	refused(t, claimed, ErrNotCrowdtrain, "0x000004d2")
	foreign(t, claimed, "CREATE TABLE t (x)")
	refused(t, claimed, ErrNotCrowdtrain)
}

func TestOpenNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "newer.db")
	checkInitialised(t, path)
	foreign(t, path, "PRAGMA user_version = 99")
	refused(t, path, ErrNewerSchema, "schema 99", fmt.Sprintf("this build knows %d", SchemaVersion()), "upgrade crowdtrain")
}

func TestOpenNotADatabase(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 8192)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	fakeHeader := append([]byte("SQLite format 3\x00"), random[:4080]...)
	for name, content := range map[string][]byte{
		"random.db": random,
		"text.db":   []byte("# crowdtrain config\nlisten: :8080\n"),
		"short.db":  []byte("SQLite"),
		"header.db": fakeHeader, // the magic, then garbage
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name)
			if err := os.WriteFile(path, content, 0o644); err != nil {
				t.Fatal(err)
			}
			refused(t, path, ErrCorrupt)
		})
	}
}

// damaged builds a crowdtrain database with ~2 MiB of checkpoints (none
// pruned, so no free pages, whose content SQLite does not check) and
// returns its path once closed.
func damaged(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "damaged.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	mustCreateJob(t, s, "j")
	for v := int64(1); v <= 8; v++ {
		if err := s.SaveCheckpoint(ctx, Checkpoint{JobID: "j", Version: v, Params: pattern(v, 256<<10)}, 10); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + "-wal"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("WAL still there after Close (%v): damage to the main file would not be seen", err)
	}
	return path
}

func overwrite(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// TestOpenCorruptPage damages a page of a real crowdtrain database, as a
// bad disk or a stray write would.
func TestOpenCorruptPage(t *testing.T) {
	garbage := make([]byte, 4096)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range garbage {
		garbage[i] = byte(rng.Uint32())
	}
	t.Run("at 64KiB", func(t *testing.T) {
		path := damaged(t)
		overwrite(t, path, 64<<10, garbage)
		refused(t, path, ErrCorrupt, "quick_check", ".recover")
	})
	t.Run("in the middle", func(t *testing.T) {
		path := damaged(t)
		fi, _ := os.Stat(path)
		overwrite(t, path, fi.Size()/2/pageSize*pageSize, garbage)
		refused(t, path, ErrCorrupt, "quick_check")
	})
}

// TestCorruptBlob flips bytes inside a checkpoint's data, where SQLite's
// checks cannot see it: the checksum must.
func TestCorruptBlob(t *testing.T) {
	ctx := context.Background()
	path := damaged(t)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	snippet := pattern(8, 256<<10)[100<<10 : 100<<10+16] // from the middle of v8's parameters
	off := bytes.Index(b, snippet)
	if off < 0 || bytes.Index(b[off+1:], snippet) >= 0 {
		t.Fatalf("setup: snippet found at %d", off)
	}
	overwrite(t, path, int64(off)+5, []byte{^snippet[5]})
	s, err := Open(path) // quick_check does not read BLOB content
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.LatestCheckpoint(ctx, "j"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("LatestCheckpoint of damaged v8 = %v, want ErrCorrupt", err)
	} else {
		t.Log(err)
	}
	if c, err := s.Checkpoint(ctx, "j", 7); err != nil || !bytes.Equal(c.Params, pattern(7, 256<<10)) {
		t.Errorf("undamaged v7: %v", err)
	}
}

func TestOpenBadPaths(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "no", "such", "dir", "c.db")
	_, err := Open(missing)
	if err == nil || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "does not exist") ||
		!errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open(missing directory) = %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "no")); !errors.Is(err, fs.ErrNotExist) {
		t.Error("Open created directories")
	}

	_, err = Open(dir)
	if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("Open(directory) = %v", err)
	}

	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	under := filepath.Join(file, "c.db")
	if _, err := Open(under); err == nil || !strings.Contains(err.Error(), under) {
		t.Errorf("Open(path under a file) = %v", err)
	}

	if _, err := Open(""); err == nil {
		t.Error("Open(\"\") succeeded")
	}

	// A WAL without its database: refuse rather than let SQLite replay it.
	orphan := filepath.Join(dir, "orphan.db")
	if err := os.WriteFile(orphan+"-wal", []byte("frames of a lost database"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(orphan); err == nil || !strings.Contains(err.Error(), "-wal") {
		t.Errorf("Open(orphaned WAL) = %v", err)
	}
	if _, err := os.Stat(orphan); !errors.Is(err, fs.ErrNotExist) {
		t.Error("Open created the database beside an orphaned WAL")
	}
}

func TestOpenReadOnlyDir(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root ignores directory permissions")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "c.db")
	checkInitialised(t, path) // exists, but SQLite cannot create its -wal and -shm
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(dir, 0o755)
	if s, err := Open(path); err == nil {
		s.Close()
		t.Error("Open in a read-only directory succeeded")
	} else if !strings.Contains(err.Error(), path) {
		t.Errorf("error %q does not name %s", err, path)
	} else {
		t.Log(err)
	}
	if _, err := Open(filepath.Join(dir, "new.db")); err == nil || !strings.Contains(err.Error(), "writable") {
		t.Errorf("Open(new file in read-only dir) = %v", err)
	}

	// A read-only file in a writable directory.
	os.Chmod(dir, 0o755)
	if err := os.Chmod(path, 0o444); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(path); err == nil {
		s.Close()
		t.Error("Open of a read-only file succeeded")
	} else if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "permissions") {
		t.Errorf("Open(read-only file) = %v", err)
	} else {
		t.Log(err)
	}
}

// journalHeader is a rollback journal's header, as SQLite writes it
// when a transaction starts on a database of origPages pages.
func journalHeader(origPages uint32) []byte {
	h := make([]byte, 512)
	copy(h, "\xd9\xd5\x05\xf9\x20\xa1\x63\xd7")
	binary.BigEndian.PutUint32(h[12:], 0x94f994ee) // nonce
	binary.BigEndian.PutUint32(h[16:], origPages)
	binary.BigEndian.PutUint32(h[20:], 512)  // sector size
	binary.BigEndian.PutUint32(h[24:], 4096) // page size
	return h
}

// TestOpenInterruptedCreation: a process killed inside the transaction
// that creates a database (the only one with a rollback journal) leaves
// one page and a hot journal saying the file was empty. Open must not be
// wedged by it.
func TestOpenInterruptedCreation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.db")
	foreign(t, path, "PRAGMA journal_mode = WAL") // writes page 1 only
	if fi, err := os.Stat(path); err != nil || fi.Size() != 4096 {
		t.Fatalf("setup: %v, %v", fi, err)
	}
	if err := os.WriteFile(path+"-journal", journalHeader(0), 0o644); err != nil {
		t.Fatal(err)
	}
	checkInitialised(t, path)
	if _, err := os.Stat(path + "-journal"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("journal still there: %v", err)
	}
}

// TestOpenHotJournal: another application's database with an unfinished
// transaction is refused, and neither file is touched.
func TestOpenHotJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "other.db")
	foreign(t, path, "CREATE TABLE t (x)", "INSERT INTO t VALUES (1)")
	journal := journalHeader(2)
	if err := os.WriteFile(path+"-journal", journal, 0o644); err != nil {
		t.Fatal(err)
	}
	refused(t, path, ErrNotCrowdtrain, "-journal")
	if b, err := os.ReadFile(path + "-journal"); err != nil || !bytes.Equal(b, journal) {
		t.Errorf("journal changed: %v", err)
	}
}
