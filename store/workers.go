package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// WorkerRecord is a worker the coordinator has seen. Times come back in UTC.
type WorkerRecord struct {
	ID, JobID, Kind, Backend, Client, Remote string
	Threads                                  int
	FirstSeen, LastSeen                      time.Time
	Examples, Accepted, Rejected             int64
}

// UpsertWorker inserts the worker or updates every field but FirstSeen,
// which stays as first inserted. A zero LastSeen is set to now; a zero
// FirstSeen on insert is set to LastSeen.
func (s *Store) UpsertWorker(ctx context.Context, w WorkerRecord) error {
	return s.UpsertWorkers(ctx, []WorkerRecord{w})
}

// UpsertWorkers is UpsertWorker for many workers in one transaction (one
// fsync for all of them).
func (s *Store) UpsertWorkers(ctx context.Context, list []WorkerRecord) error {
	type row struct {
		w           WorkerRecord
		first, last int64
	}
	rows := make([]row, 0, len(list))
	for _, w := range list {
		if w.ID == "" {
			return errors.New("store: UpsertWorker: empty worker ID: set WorkerRecord.ID")
		}
		w.LastSeen = orNow(w.LastSeen)
		if w.FirstSeen.IsZero() {
			w.FirstSeen = w.LastSeen
		}
		first, err := nanos(w.FirstSeen, "worker "+w.ID+" first_seen")
		if err != nil {
			return err
		}
		last, err := nanos(w.LastSeen, "worker "+w.ID+" last_seen")
		if err != nil {
			return err
		}
		rows = append(rows, row{w, first, last})
	}
	if len(rows) == 0 {
		return nil
	}
	doing := fmt.Sprintf("saving %d workers", len(rows))
	if len(rows) == 1 {
		doing = "saving worker " + rows[0].w.ID
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return s.wrap(doing, err)
	}
	defer tx.Rollback()
	for _, r := range rows {
		w := r.w
		_, err = tx.ExecContext(ctx, `INSERT INTO workers
		(id, job_id, kind, backend, client, remote, threads, first_seen, last_seen, examples, accepted, rejected)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET job_id = excluded.job_id, kind = excluded.kind, backend = excluded.backend,
			client = excluded.client, remote = excluded.remote, threads = excluded.threads,
			last_seen = excluded.last_seen, examples = excluded.examples, accepted = excluded.accepted,
			rejected = excluded.rejected`,
			w.ID, w.JobID, w.Kind, w.Backend, w.Client, w.Remote, w.Threads, r.first, r.last, w.Examples, w.Accepted, w.Rejected)
		if err != nil {
			return s.wrap(doing, err)
		}
	}
	return s.wrap(doing, tx.Commit())
}

// PruneWorkers deletes the records of workers last seen before
// olderThan (a zero time keeps any age), then all but the maxRows most
// recently seen (maxRows < 1 keeps any number). It returns how many
// records it deleted.
func (s *Store) PruneWorkers(ctx context.Context, maxRows int, olderThan time.Time) (int64, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, s.wrap("pruning workers", err)
	}
	defer tx.Rollback()
	var n int64
	if !olderThan.IsZero() {
		cut, err := nanos(olderThan, "worker prune cut-off")
		if err != nil {
			return 0, err
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM workers WHERE last_seen < ?`, cut)
		if err != nil {
			return 0, s.wrap("pruning workers by age", err)
		}
		k, _ := res.RowsAffected()
		n += k
	}
	if maxRows > 0 {
		res, err := tx.ExecContext(ctx, `DELETE FROM workers WHERE id IN
			(SELECT id FROM workers ORDER BY last_seen DESC, id DESC LIMIT -1 OFFSET ?)`, maxRows)
		if err != nil {
			return 0, s.wrap("pruning workers by number", err)
		}
		k, _ := res.RowsAffected()
		n += k
	}
	if err := tx.Commit(); err != nil {
		return 0, s.wrap("pruning workers", err)
	}
	return n, nil
}

// Workers returns every worker seen, in the order first seen.
func (s *Store) Workers(ctx context.Context) ([]WorkerRecord, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id, job_id, kind, backend, client, remote, threads,
		first_seen, last_seen, examples, accepted, rejected FROM workers ORDER BY first_seen, id`)
	if err != nil {
		return nil, s.wrap("listing workers", err)
	}
	defer rows.Close()
	list := []WorkerRecord{}
	for rows.Next() {
		var w WorkerRecord
		var first, last int64
		if err := rows.Scan(&w.ID, &w.JobID, &w.Kind, &w.Backend, &w.Client, &w.Remote, &w.Threads,
			&first, &last, &w.Examples, &w.Accepted, &w.Rejected); err != nil {
			return nil, s.wrap("listing workers", err)
		}
		w.FirstSeen, w.LastSeen = fromNanos(first), fromNanos(last)
		list = append(list, w)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap("listing workers", err)
	}
	return list, nil
}
