package store

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mattn/go-sqlite3"
)

// Errors Open and the methods wrap (test with errors.Is). The wrapping
// error names the file or record and says what to do.
var (
	// ErrNotFound: no such job, checkpoint or version.
	ErrNotFound = errors.New("not found")
	// ErrExists: CreateJob with an ID already taken.
	ErrExists = errors.New("already exists")
	// ErrNotCrowdtrain: a SQLite database of another application.
	ErrNotCrowdtrain = errors.New("not a crowdtrain database")
	// ErrNewerSchema: a crowdtrain database of a schema this build does
	// not know.
	ErrNewerSchema = errors.New("written by a newer crowdtrain")
	// ErrOlderSchema: OpenNoUpgrade found a database of an older schema,
	// which Open would upgrade.
	ErrOlderSchema = errors.New("written by an older crowdtrain")
	// ErrCorrupt: not a SQLite database at all, one that fails SQLite's
	// checks, or a checkpoint whose data fails its checksum.
	ErrCorrupt = errors.New("corrupt or not a database")
)

const (
	driverRW = "crowdtrain-sqlite3-rw"
	driverRO = "crowdtrain-sqlite3-ro"

	// busyTimeoutMs bounds how long a statement waits for another
	// process's lock (a second coordinator, the sqlite3 shell) before
	// failing with SQLITE_BUSY. Within one Store writes queue in Go.
	busyTimeoutMs = 10000
	// pageSize applies to new databases only. Checkpoints dominate what
	// we write, and 64 KiB pages (SQLite's largest) make them about 3x
	// faster than 4 KiB for an MNIST MLP (fewer pages per BLOB, fewer WAL
	// checkpoints and fsyncs) and 1.4x for 10M parameters. The cost, a
	// 64 KiB WAL frame per small write, is nothing at the coordinator's
	// few metric rows a second.
	pageSize = 65536
	// walSizeLimit: after a WAL checkpoint the WAL file is truncated back
	// to this size instead of keeping its high-water mark.
	walSizeLimit = 4 << 20
	// walAutocheckpointPages: SQLite copies the WAL into the main file
	// once it holds this many pages (16 MiB at 64 KiB pages; SQLite's
	// default of 1000 pages would be 64 MiB). With synchronous=FULL
	// nothing in the WAL is unsynced; this bounds its size between the
	// explicit checkpoints SaveCheckpoint runs.
	walAutocheckpointPages = 256
	// readConns is the size of the read-only pool: WAL readers see the
	// last commit and never wait for the writer.
	readConns = 4
	// maxRowBytes is SQLite's limit on a row (SQLITE_MAX_LENGTH, 1e9),
	// less room for the record header and the small columns.
	maxRowBytes = 1_000_000_000 - 1<<16
)

func init() {
	// The writer's per-connection settings, applied on every (re)connect.
	// Durability: synchronous=FULL (in the DSN) with WAL fsyncs the WAL at
	// every commit, so a transaction that Commit reported is on the disk:
	// it survives the process being killed, the file system going
	// read-only and the power going out. (synchronous=NORMAL would fsync
	// only at WAL checkpoints, every walAutocheckpointPages, and an OS
	// crash could take back megabytes of commits: a job reported created
	// or a checkpoint reported written could vanish.)
	sql.Register(driverRW, &sqlite3.SQLiteDriver{ConnectHook: func(c *sqlite3.SQLiteConn) error {
		for _, q := range []string{
			fmt.Sprintf("PRAGMA page_size = %d", pageSize), // before WAL: fixed afterwards
			"PRAGMA journal_mode = WAL",
			fmt.Sprintf("PRAGMA journal_size_limit = %d", walSizeLimit),
			fmt.Sprintf("PRAGMA wal_autocheckpoint = %d", walAutocheckpointPages),
		} {
			if _, err := c.Exec(q, nil); err != nil {
				return err
			}
		}
		return nil
	}})
	sql.Register(driverRO, &sqlite3.SQLiteDriver{})
}

// Store is a crowdtrain database. All methods are safe for concurrent use.
type Store struct {
	path string
	// w has one connection: SQLite allows one writer at a time anyway,
	// and queueing in database/sql instead of in SQLite means writers of
	// this Store never see SQLITE_BUSY.
	w *sql.DB
	// r holds read-only (mode=ro) connections, so reading a large
	// checkpoint does not hold up the writer, and no read can write.
	r    *sql.DB
	mode writeMode
	// upgradedFrom is the schema version Open upgraded the database
	// from; 0 when it was current or new.
	upgradedFrom int
	// Tests: chunkSize overrides CheckpointChunkBytes, and beforeChunk,
	// when set, runs before each chunk is written and fails the save
	// with its error (a write that fails part-way).
	chunkSize   int
	beforeChunk func(part, seq int) error
}

// writeMode is how the writer trades speed for durability. Open uses
// durableWrites; the benchmarks compare it with the older fastWrites.
type writeMode struct {
	// synchronous is the writer's PRAGMA synchronous (see init).
	synchronous string
	// truncateWAL: after each checkpoint, copy the WAL into the main file
	// and truncate it (see truncateWAL).
	truncateWAL bool
}

var (
	durableWrites = writeMode{synchronous: "FULL", truncateWAL: true}
	fastWrites    = writeMode{synchronous: "NORMAL"}
)

// Open opens the crowdtrain database at path, creating it if the file does
// not exist or is empty, and brings its schema up to date.
//
// An existing file is inspected read-only first, and Open fails without
// writing to it when it is another application's SQLite database
// (ErrNotCrowdtrain), a crowdtrain database of a newer schema
// (ErrNewerSchema), or not a database or damaged (ErrCorrupt). Paths that
// cannot be created or written get an error naming the path and the fix.
func Open(path string) (*Store, error) { return open(path, durableWrites, true) }

// OpenNoUpgrade is Open for commands that only read a coordinator's
// database (export): a database of an older schema is refused
// (ErrOlderSchema) rather than upgraded, so that running one beside an
// older serve never changes the schema under it. An upgrade is serve's to
// make, after a backup.
func OpenNoUpgrade(path string) (*Store, error) { return open(path, durableWrites, false) }

func open(path string, mode writeMode, upgrade bool) (*Store, error) {
	if path == "" {
		return nil, errors.New("store: empty database path: give a file path such as crowdtrain.db")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("store: %s: %w", path, err)
	}
	created, err := prepare(path, abs)
	if err != nil {
		return nil, err
	}
	if !created {
		if err := inspect(path, abs, upgrade); err != nil {
			return nil, err
		}
		// SQLite silently opens a write-protected file read-only, and
		// would fail only at the first checkpoint.
		f, err := os.OpenFile(abs, os.O_RDWR, 0)
		if err != nil {
			return nil, fmt.Errorf("store: cannot open %s for writing: %w: fix its permissions (crowdtrain writes "+
				"checkpoints to it), or choose another path", path, err)
		}
		f.Close()
	}
	s, err := openPools(path, abs, mode)
	if err == nil {
		if err = s.migrate(context.Background(), upgrade); err != nil {
			s.Close()
		}
	}
	if err != nil {
		if created { // ours, and holding nothing: leave no half-made file behind
			for _, p := range []string{abs, abs + "-wal", abs + "-shm", abs + "-journal"} {
				os.Remove(p)
			}
		}
		return nil, err
	}
	return s, nil
}

// Close closes the database. The writer closes last so that SQLite
// checkpoints the WAL into the main file and removes it.
func (s *Store) Close() error {
	return errors.Join(s.r.Close(), s.w.Close())
}

// UpgradedFrom returns the schema version Open upgraded the database
// from, for the caller to log; 0 when it was already current or new.
func (s *Store) UpgradedFrom() int { return s.upgradedFrom }

// Path returns the path Open was given.
func (s *Store) Path() string { return s.path }

// IntegrityCheck runs PRAGMA integrity_check (reads the whole file) and
// returns nil only if it says "ok"; otherwise an ErrCorrupt error with
// SQLite's first findings.
func (s *Store) IntegrityCheck(ctx context.Context) error {
	problems, err := check(ctx, s.r, "integrity_check")
	if err != nil {
		return classify(s.path, "integrity check", err)
	}
	if problems != "" {
		return fmt.Errorf("store: %s: %w: integrity_check: %s: %s", s.path, ErrCorrupt, problems, salvage(s.path))
	}
	return nil
}

// prepare checks the path and creates the file when it does not exist, so
// that mistakes get errors of ours rather than SQLite's "unable to open
// database file". created reports whether prepare made the (empty) file.
func prepare(path, abs string) (created bool, err error) {
	fi, err := os.Stat(abs)
	switch {
	case err == nil:
		if fi.IsDir() {
			return false, fmt.Errorf("store: %s is a directory: give the path of a database file, such as %s",
				path, filepath.Join(path, "crowdtrain.db"))
		}
		if !fi.Mode().IsRegular() {
			return false, fmt.Errorf("store: %s is not a regular file (%v): give the path of a database file", path, fi.Mode().Type())
		}
		return false, nil
	case errors.Is(err, fs.ErrNotExist):
	default:
		return false, fmt.Errorf("store: cannot use %s: %w: check the path and its permissions", path, err)
	}
	dir := filepath.Dir(abs)
	if di, err := os.Stat(dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("store: cannot create %s: directory %s does not exist: create it (mkdir -p %s) or choose another path: %w",
				path, dir, dir, fs.ErrNotExist)
		}
		return false, fmt.Errorf("store: cannot create %s: %w: check the path and its permissions", path, err)
	} else if !di.IsDir() {
		return false, fmt.Errorf("store: cannot create %s: %s is not a directory: choose another path", path, dir)
	}
	if err := staleWAL(path, abs); err != nil {
		return false, err
	}
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) { // someone else just created it: inspect theirs
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("store: cannot create %s: %w: make %s writable by this user, or choose another path", path, err, dir)
	}
	return true, f.Close()
}

// staleWAL refuses a missing or empty database file that has a non-empty
// write-ahead log next to it: the log of a database moved or deleted
// without it, which SQLite could replay into the new one.
func staleWAL(path, abs string) error {
	if fi, err := os.Stat(abs + "-wal"); err == nil && fi.Size() > 0 {
		return fmt.Errorf("store: %s: found %s-wal (%d bytes) but no database: it is the write-ahead log of a database "+
			"moved or deleted without it; move %s-wal and %s-shm away, or put the database back", path, path, fi.Size(), path, path)
	}
	return nil
}

// inspect vets an existing file without writing to it: a read-only
// connection, and no PRAGMA that writes. An empty file passes (Open
// initialises it). Without upgrade, a database of an older schema is
// refused too.
func inspect(path, abs string, upgrade bool) error {
	f, err := os.Open(abs)
	if err != nil {
		return fmt.Errorf("store: cannot read %s: %w: check its permissions", path, err)
	}
	var hdr [100]byte
	n, err := io.ReadFull(f, hdr[:])
	f.Close()
	if n == 0 && err == io.EOF {
		return staleWAL(path, abs)
	}
	if interruptedCreation(abs) {
		return nil // SQLite's rollback, on the read-write open, empties the file
	}
	if n < len(hdr) || string(hdr[:16]) != "SQLite format 3\x00" {
		return fmt.Errorf("store: %s: %w: the file is not a SQLite database (no SQLite header): "+
			"give the path of a crowdtrain database, or a new path to start one", path, ErrCorrupt)
	}

	db, err := sql.Open(driverRO, fileURI(abs)+fmt.Sprintf("?mode=ro&_busy_timeout=%d", busyTimeoutMs))
	if err != nil {
		return fmt.Errorf("store: %s: %w", path, err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	var appID, version, objects int64
	err = db.QueryRowContext(ctx, "PRAGMA application_id").Scan(&appID)
	if err == nil {
		err = db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version)
	}
	if err == nil {
		err = db.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_schema").Scan(&objects)
	}
	if se := (sqlite3.Error{}); errors.As(err, &se) && se.ExtendedCode == sqlite3.ErrReadonlyRollback {
		return fmt.Errorf("store: %s: %w: it has an unfinished transaction in %s-journal, which crowdtrain databases "+
			"(always in WAL mode) never have, so it belongs to another application: let that application, or "+
			"`sqlite3 %s 'PRAGMA quick_check'`, roll the transaction back; crowdtrain leaves it untouched",
			path, ErrNotCrowdtrain, path, path)
	}
	if err != nil {
		return classify(path, "inspecting it read-only", err)
	}
	if appID != ApplicationID {
		if appID == 0 && objects == 0 {
			return nil // an empty database: ours to initialise
		}
		what := "it has no crowdtrain application_id"
		if appID != 0 {
			what = fmt.Sprintf("its application_id is %#08x, not crowdtrain's %#08x", appID, ApplicationID)
		}
		return fmt.Errorf("store: %s: %w: %s, and it holds %d tables or indexes, so it belongs to another application "+
			"and crowdtrain leaves it untouched: give the path of a crowdtrain database, or a new path to start one",
			path, ErrNotCrowdtrain, what, objects)
	}
	if version > int64(len(migrations)) {
		return newerErr(path, version)
	}
	if !upgrade && version > 0 && version < int64(len(migrations)) {
		return olderErr(path, version)
	}
	problems, err := check(ctx, db, "quick_check")
	if err != nil {
		return classify(path, "quick_check", err)
	}
	if problems != "" {
		return fmt.Errorf("store: %s: %w: quick_check: %s: %s", path, ErrCorrupt, problems, salvage(path))
	}
	return nil
}

func salvage(path string) string {
	return fmt.Sprintf("the file was left as it is; restore it from a backup, or salvage what is readable "+
		"with `sqlite3 %s .recover | sqlite3 NEW.db`", path)
}

// interruptedCreation reports whether the file is what a process killed
// while creating a database leaves. The one transaction a crowdtrain
// database ever runs with a rollback journal is its first, which writes
// page 1 (one page) and switches to WAL. Killed before it deleted its
// journal, it leaves a hot journal whose header records an original size
// of 0 pages: nothing in the file was ever committed, and SQLite rolls it
// back, on the next read-write open, to an empty file. A read-only
// connection cannot roll back (it fails with SQLITE_READONLY_ROLLBACK),
// so inspect must recognise the case itself. The size limit keeps
// anything bigger than our first transaction out of it.
func interruptedCreation(abs string) bool {
	fi, err := os.Stat(abs)
	if err != nil || fi.Size() > pageSize {
		return false
	}
	f, err := os.Open(abs + "-journal")
	if err != nil {
		return false
	}
	defer f.Close()
	// Journal header: 8-byte magic, record count, nonce, then the database
	// size in pages before the transaction (big-endian), at offset 16.
	var h [20]byte
	if _, err := io.ReadFull(f, h[:]); err != nil {
		return false
	}
	return string(h[:8]) == "\xd9\xd5\x05\xf9\x20\xa1\x63\xd7" && binary.BigEndian.Uint32(h[16:]) == 0
}

func newerErr(path string, version int64) error {
	return fmt.Errorf("store: %s: %w (schema %d, this build knows %d): upgrade crowdtrain; the file was left as it is",
		path, ErrNewerSchema, version, len(migrations))
}

func olderErr(path string, version int64) error {
	return fmt.Errorf("store: %s: %w (schema %d, this build writes %d): `crowdtrain serve` of this version upgrades it "+
		"when it opens it (back it up first: crowdtrain backup), or use the crowdtrain that wrote it; the file was left as it is",
		path, ErrOlderSchema, version, len(migrations))
}

// check runs PRAGMA quick_check or integrity_check and returns "" for ok,
// otherwise its first findings.
func check(ctx context.Context, db *sql.DB, pragma string) (string, error) {
	rows, err := db.QueryContext(ctx, "PRAGMA "+pragma)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var found []string
	for rows.Next() {
		var text string
		if err := rows.Scan(&text); err != nil {
			return "", err
		}
		for _, line := range strings.Split(text, "\n") { // one row may hold many findings
			if line = strings.TrimSpace(line); line != "" && line != "*** in database main ***" {
				found = append(found, line)
			}
		}
	}
	if err := rows.Err(); err != nil {
		return "", err
	}
	switch {
	case len(found) == 1 && found[0] == "ok":
		return "", nil
	case len(found) == 0:
		return "no result", nil
	case len(found) > 4:
		found = append(found[:4], fmt.Sprintf("and %d more", len(found)-4))
	}
	return strings.Join(found, "; "), nil
}

// classify turns SQLite's errors about the file as a whole into ours.
func classify(path, doing string, err error) error {
	var se sqlite3.Error
	if errors.As(err, &se) {
		switch se.Code {
		case sqlite3.ErrNotADB:
			return fmt.Errorf("store: %s: %w: %s: %v: the file was left as it is; give the path of a crowdtrain "+
				"database, or a new path to start one", path, ErrCorrupt, doing, err)
		case sqlite3.ErrCorrupt:
			return fmt.Errorf("store: %s: %w: %s: %v: %s", path, ErrCorrupt, doing, err, salvage(path))
		case sqlite3.ErrCantOpen, sqlite3.ErrPerm, sqlite3.ErrReadonly, sqlite3.ErrAuth:
			return fmt.Errorf("store: cannot open %s for writing: %s: %v: SQLite needs to write the file and to "+
				"create %s-wal and %s-shm beside it: fix the permissions of the file and its directory, "+
				"or choose another path", path, doing, err, path, path)
		case sqlite3.ErrFull:
			return fmt.Errorf("store: %s: %s: %v: free disk space", path, doing, err)
		}
	}
	return fmt.Errorf("store: %s: %s: %w", path, doing, err)
}

// fileURI makes the SQLite URI for an absolute path; the URI lets us pass
// mode=ro. '?', '#' and '%' in the path must be escaped.
func fileURI(abs string) string {
	p := filepath.ToSlash(abs)
	if !strings.HasPrefix(p, "/") {
		p = "/" + p // Windows: file:/C:/...
	}
	return "file:" + strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(p)
}

func openPools(path, abs string, mode writeMode) (*Store, error) {
	uri := fileURI(abs)
	w, err := sql.Open(driverRW, uri+fmt.Sprintf(
		"?_busy_timeout=%d&_foreign_keys=on&_synchronous=%s&_txlock=immediate", busyTimeoutMs, mode.synchronous))
	if err != nil {
		return nil, fmt.Errorf("store: %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	r, err := sql.Open(driverRO, uri+fmt.Sprintf("?mode=ro&_busy_timeout=%d", busyTimeoutMs))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("store: %s: %w", path, err)
	}
	r.SetMaxOpenConns(readConns)
	r.SetMaxIdleConns(readConns)
	s := &Store{path: path, w: w, r: r, mode: mode}
	var journal string
	if err := w.QueryRow("PRAGMA journal_mode").Scan(&journal); err != nil {
		s.Close()
		return nil, classify(path, "switching to WAL mode", err)
	}
	if journal != "wal" {
		s.Close()
		return nil, fmt.Errorf("store: %s: SQLite could not switch the database to WAL mode (journal_mode is %q): "+
			"its file system may lack shared memory or locking (network file systems do): put it on a local disk", path, journal)
	}
	return s, nil
}

// migrate brings the database up to SchemaVersion in one transaction:
// every migration it lacks, the new user_version and, for a new
// database, the application id commit together or not at all, so a
// failing disk or a crash mid-upgrade leaves the database at the version
// it had, never half-migrated. (SQLite's DDL is transactional.) Without
// upgrade, an existing database of an older schema is refused untouched;
// a new one is still created.
func (s *Store) migrate(ctx context.Context, upgrade bool) error {
	tx, err := s.w.BeginTx(ctx, nil) // BEGIN IMMEDIATE: re-read under the write lock
	if err != nil {
		return classify(s.path, "starting the schema migration", err)
	}
	defer tx.Rollback()
	var version, appID, objects int64
	err = tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version)
	if err == nil {
		err = tx.QueryRowContext(ctx, "PRAGMA application_id").Scan(&appID)
	}
	if err == nil {
		err = tx.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_schema").Scan(&objects)
	}
	if err != nil {
		return classify(s.path, "reading the schema version", err)
	}
	// Another process may have changed the file since inspect.
	if appID != ApplicationID && (appID != 0 || objects > 0) {
		return fmt.Errorf("store: %s: %w: another application wrote to it while crowdtrain was opening it; "+
			"the file was left as it is", s.path, ErrNotCrowdtrain)
	}
	target := int64(len(migrations))
	if version > target {
		return newerErr(s.path, version)
	}
	if version == target {
		return nil
	}
	if version > 0 && !upgrade {
		return olderErr(s.path, version)
	}
	from := version
	failed := func(doing string, err error) error {
		err = classify(s.path, doing, err)
		if from == 0 {
			return err
		}
		return fmt.Errorf("%w: the database was left at schema %d, as it was", err, from)
	}
	for ; version < target; version++ {
		if _, err := tx.ExecContext(ctx, migrations[version]); err != nil {
			return failed(fmt.Sprintf("migrating the schema from version %d to %d", version, version+1), err)
		}
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", target)); err != nil {
		return failed("setting the schema version", err)
	}
	if from == 0 {
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA application_id = %d", ApplicationID)); err != nil {
			return failed("setting the application id", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return failed(fmt.Sprintf("committing schema version %d", target), err)
	}
	s.upgradedFrom = int(from)
	return nil
}

// Helpers shared by the record methods.

// nanos converts a time for storage as INTEGER unix nanoseconds (UTC).
func nanos(t time.Time, what string) (int64, error) {
	if y := t.Year(); y < 1678 || y > 2261 {
		return 0, fmt.Errorf("store: %s %v is outside the years 1678-2261 that int64 nanoseconds hold: pass a real time", what, t)
	}
	return t.UnixNano(), nil
}

// nullNanos is nanos with the zero time stored as NULL.
func nullNanos(t time.Time, what string) (any, error) {
	if t.IsZero() {
		return nil, nil
	}
	return nanos(t, what)
}

func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

func fromNullNanos(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return fromNanos(n.Int64)
}

// orNow returns t, or the current time when t is zero.
func orNow(t time.Time) time.Time {
	if t.IsZero() {
		return time.Now()
	}
	return t
}

// blob makes nil an empty BLOB: the driver binds nil as NULL.
func blob(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// ownedBytes scans a BLOB without database/sql's defensive copy.
// mattn/go-sqlite3 hands each row a fresh C.GoBytes slice that nothing
// else references, and checkpoint BLOBs can be 100+ MB.
type ownedBytes struct{ p *[]byte }

func (o ownedBytes) Scan(src any) error {
	switch v := src.(type) {
	case []byte:
		*o.p = v
	case nil:
		*o.p = nil
	default:
		return fmt.Errorf("store: expected a BLOB, got %T", src)
	}
	return nil
}

func constraint(err error, ext sqlite3.ErrNoExtended) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && se.ExtendedCode == ext
}

// wrap adds context to a SQLite error from a record method.
func (s *Store) wrap(doing string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("store: %s: %s: %w", s.path, doing, err)
}
