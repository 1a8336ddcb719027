package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mattn/go-sqlite3"
)

// JobRecord is a job as the coordinator stores it. Times come back in UTC.
type JobRecord struct {
	ID          string
	Name        string
	Spec        []byte // JSON, opaque to store
	State       string // running, paused, done, failed, stopped
	Reason      string
	CreatedAt   time.Time
	DoneAt      time.Time // zero while not done
	Incarnation int64     // how many times the job has been (re)started by a coordinator
}

// JobStates are the states a job may be in.
var JobStates = []string{"running", "paused", "done", "failed", "stopped"}

func checkState(id, state string) error {
	if !slices.Contains(JobStates, state) {
		return fmt.Errorf("store: job %q: unknown state %q: use one of %s", id, state, strings.Join(JobStates, ", "))
	}
	return nil
}

// CreateJob stores a new job; ErrExists if the ID is taken. A zero
// CreatedAt is set to now.
func (s *Store) CreateJob(ctx context.Context, j JobRecord) error {
	if j.ID == "" {
		return errors.New("store: CreateJob: empty job ID: give the job an ID")
	}
	if err := checkState(j.ID, j.State); err != nil {
		return err
	}
	created, err := nanos(orNow(j.CreatedAt), "job "+j.ID+" created_at")
	if err != nil {
		return err
	}
	done, err := nullNanos(j.DoneAt, "job "+j.ID+" done_at")
	if err != nil {
		return err
	}
	_, err = s.w.ExecContext(ctx, `INSERT INTO jobs (id, name, spec, state, reason, created_at, done_at, incarnation)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, j.ID, j.Name, blob(j.Spec), j.State, j.Reason, created, done, j.Incarnation)
	if constraint(err, sqlite3.ErrConstraintPrimaryKey) || constraint(err, sqlite3.ErrConstraintUnique) {
		return fmt.Errorf("store: job %q: %w: choose another ID, or load the existing job with Job", j.ID, ErrExists)
	}
	return s.wrap("creating job "+j.ID, err)
}

// UpdateJobState sets a job's state, reason and done time (zero: not
// done); ErrNotFound if there is no such job.
func (s *Store) UpdateJobState(ctx context.Context, id, state, reason string, doneAt time.Time) error {
	if err := checkState(id, state); err != nil {
		return err
	}
	done, err := nullNanos(doneAt, "job "+id+" done_at")
	if err != nil {
		return err
	}
	res, err := s.w.ExecContext(ctx, `UPDATE jobs SET state = ?, reason = ?, done_at = ? WHERE id = ?`, state, reason, done, id)
	if err != nil {
		return s.wrap("updating job "+id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return s.wrap("updating job "+id, err)
	} else if n == 0 {
		return notFoundJob(id)
	}
	return nil
}

// UpdateJobSpec replaces a job's stored spec (its settings changed while it
// runs; a resumed job keeps them); ErrNotFound if there is no such job.
func (s *Store) UpdateJobSpec(ctx context.Context, id string, spec []byte) error {
	res, err := s.w.ExecContext(ctx, `UPDATE jobs SET spec = ? WHERE id = ?`, spec, id)
	if err != nil {
		return s.wrap("updating job "+id+"'s spec", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return s.wrap("updating job "+id+"'s spec", err)
	} else if n == 0 {
		return notFoundJob(id)
	}
	return nil
}

func notFoundJob(id string) error {
	return fmt.Errorf("store: job %q: %w: create it with CreateJob first", id, ErrNotFound)
}

// NextIncarnation atomically increments the job's incarnation and returns
// the new value; ErrNotFound if there is no such job.
func (s *Store) NextIncarnation(ctx context.Context, id string) (int64, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, s.wrap("starting a transaction", err)
	}
	defer tx.Rollback()
	var n int64
	err = tx.QueryRowContext(ctx, `UPDATE jobs SET incarnation = incarnation + 1 WHERE id = ? RETURNING incarnation`, id).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, notFoundJob(id)
	}
	if err != nil {
		return 0, s.wrap("incrementing the incarnation of job "+id, err)
	}
	if err := tx.Commit(); err != nil {
		return 0, s.wrap("incrementing the incarnation of job "+id, err)
	}
	return n, nil
}

const jobColumns = `id, name, spec, state, reason, created_at, done_at, incarnation`

func scanJob(row interface{ Scan(...any) error }) (JobRecord, error) {
	var j JobRecord
	var created int64
	var done sql.NullInt64
	if err := row.Scan(&j.ID, &j.Name, &j.Spec, &j.State, &j.Reason, &created, &done, &j.Incarnation); err != nil {
		return JobRecord{}, err
	}
	j.CreatedAt, j.DoneAt = fromNanos(created), fromNullNanos(done)
	return j, nil
}

// Jobs returns all jobs, oldest first.
func (s *Store) Jobs(ctx context.Context) ([]JobRecord, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+jobColumns+` FROM jobs ORDER BY created_at, rowid`)
	if err != nil {
		return nil, s.wrap("listing jobs", err)
	}
	defer rows.Close()
	jobs := []JobRecord{}
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, s.wrap("listing jobs", err)
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap("listing jobs", err)
	}
	return jobs, nil
}

// Job returns one job; ErrNotFound if there is no such job.
func (s *Store) Job(ctx context.Context, id string) (JobRecord, error) {
	j, err := scanJob(s.r.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return JobRecord{}, fmt.Errorf("store: job %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return JobRecord{}, s.wrap("reading job "+id, err)
	}
	return j, nil
}

// rowQuerier is a pool or a transaction: what reads one row.
type rowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// jobExists tells a missing job from a job without the rows asked for.
func (s *Store) jobExists(ctx context.Context, id string) (bool, error) {
	return s.jobExistsIn(ctx, s.r, id)
}

// jobExistsIn is jobExists read through q: a caller inside a read
// transaction asks in it, never for a second connection of the pool,
// which as many such callers as the pool has connections would wait
// for for ever.
func (s *Store) jobExistsIn(ctx context.Context, q rowQuerier, id string) (bool, error) {
	var one int
	err := q.QueryRowContext(ctx, `SELECT 1 FROM jobs WHERE id = ?`, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, s.wrap("reading job "+id, err)
}

// requireJob returns ErrNotFound (wrapped) unless the job exists.
func (s *Store) requireJob(ctx context.Context, id string) error {
	ok, err := s.jobExists(ctx, id)
	if err != nil {
		return err
	}
	if !ok {
		return notFoundJob(id)
	}
	return nil
}
