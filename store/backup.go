package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/mattn/go-sqlite3"
)

// ErrBackupExists: Backup's destination exists and force is not set.
var ErrBackupExists = errors.New("the backup file exists")

// BackupResult describes a finished backup.
type BackupResult struct {
	Pages int   // pages copied
	Bytes int64 // the copy's size
}

// Backup copies the crowdtrain database at src to dst with SQLite's online
// backup API, safe while a coordinator writes src: the copy is one
// consistent read of the database (in WAL mode a reader neither blocks the
// writer nor sees half a commit), the WAL's committed frames included. The
// copy is written beside dst, must pass PRAGMA integrity_check, and only
// then takes dst's name, so a failed backup leaves no file that looks like
// one. An existing dst is refused unless force.
func Backup(ctx context.Context, src, dst string, force bool) (BackupResult, error) {
	var res BackupResult
	srcAbs, err := filepath.Abs(src)
	if err != nil {
		return res, err
	}
	dstAbs, err := filepath.Abs(dst)
	if err != nil {
		return res, err
	}
	if srcAbs == dstAbs {
		return res, fmt.Errorf("store: backup of %s onto itself: give --out another path", src)
	}
	if _, err := os.Stat(src); err != nil {
		return res, fmt.Errorf("store: backup: %w", err)
	}
	if !force {
		if _, err := os.Lstat(dst); err == nil {
			return res, fmt.Errorf("store: %s: %w: pass --force to replace it, or choose another path", dst, ErrBackupExists)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return res, fmt.Errorf("store: %w", err)
		}
	}

	from, err := sql.Open(driverRO, fileURI(srcAbs)+fmt.Sprintf("?mode=ro&_busy_timeout=%d", busyTimeoutMs))
	if err != nil {
		return res, fmt.Errorf("store: %s: %w", src, err)
	}
	defer from.Close()
	var appID int64
	if err := from.QueryRowContext(ctx, "PRAGMA application_id").Scan(&appID); err != nil {
		return res, classify(src, "reading it", err)
	}
	if appID != ApplicationID {
		return res, fmt.Errorf("store: %s: %w (application_id %#x): give the --db file of `crowdtrain serve`", src, ErrNotCrowdtrain, appID)
	}

	tmp, err := os.CreateTemp(filepath.Dir(dstAbs), "."+filepath.Base(dstAbs)+".partial-*")
	if err != nil {
		return res, fmt.Errorf("store: cannot write beside %s: %w", dst, err)
	}
	tmpPath := tmp.Name()
	tmp.Close()
	keep := false
	defer func() {
		if !keep {
			for _, suffix := range []string{"", "-wal", "-shm", "-journal"} {
				os.Remove(tmpPath + suffix)
			}
		}
	}()
	if res.Pages, err = copyDatabase(ctx, from, tmpPath); err != nil {
		return res, fmt.Errorf("store: backing up %s: %w", src, err)
	}
	if err := checkCopy(ctx, tmpPath); err != nil {
		return res, fmt.Errorf("store: the copy of %s fails its check, so it is not kept: %w", src, err)
	}
	if err := syncFile(tmpPath); err != nil {
		return res, fmt.Errorf("store: %w", err)
	}
	if force {
		err = os.Rename(tmpPath, dstAbs)
	} else if err = os.Link(tmpPath, dstAbs); err == nil { // refuses a dst made meanwhile
		os.Remove(tmpPath)
	}
	if err != nil {
		return res, fmt.Errorf("store: %w", err)
	}
	keep = true
	if d, err := os.Open(filepath.Dir(dstAbs)); err == nil {
		d.Sync()
		d.Close()
	}
	if fi, err := os.Stat(dstAbs); err == nil {
		res.Bytes = fi.Size()
	}
	return res, nil
}

// copyDatabase copies from into a new database at path in one step: one
// read transaction, so one commit's state.
func copyDatabase(ctx context.Context, from *sql.DB, path string) (int, error) {
	to, err := sql.Open(driverRO, fileURI(path)) // no mode=ro: read-write
	if err != nil {
		return 0, err
	}
	defer to.Close()
	srcConn, err := from.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer srcConn.Close()
	dstConn, err := to.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer dstConn.Close()
	pages := 0
	err = dstConn.Raw(func(d any) error {
		return srcConn.Raw(func(s any) error {
			dc, ok1 := d.(*sqlite3.SQLiteConn)
			sc, ok2 := s.(*sqlite3.SQLiteConn)
			if !ok1 || !ok2 {
				return errors.New("not a SQLite connection")
			}
			b, err := dc.Backup("main", sc, "main")
			if err != nil {
				return err
			}
			done, err := b.Step(-1)
			pages = b.PageCount()
			if ferr := b.Finish(); err == nil {
				err = ferr
			}
			if err == nil && !done {
				err = errors.New("the backup stopped before the last page")
			}
			return err
		})
	})
	return pages, err
}

// checkCopy runs PRAGMA integrity_check on the copy and checks it is a
// crowdtrain database.
func checkCopy(ctx context.Context, path string) error {
	db, err := sql.Open(driverRO, fileURI(path)+"?mode=ro")
	if err != nil {
		return err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "PRAGMA integrity_check")
	if err != nil {
		return err
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return err
		}
		if line != "ok" {
			problems = append(problems, line)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: integrity_check: %s", ErrCorrupt, strings.Join(problems, "; "))
	}
	var appID int64
	if err := db.QueryRowContext(ctx, "PRAGMA application_id").Scan(&appID); err != nil {
		return err
	}
	if appID != ApplicationID {
		return fmt.Errorf("%w (application_id %#x)", ErrNotCrowdtrain, appID)
	}
	return nil
}

func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
