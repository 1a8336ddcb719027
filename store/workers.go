package store

import (
	"context"
	"errors"
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
	_, err = s.w.ExecContext(ctx, `INSERT INTO workers
		(id, job_id, kind, backend, client, remote, threads, first_seen, last_seen, examples, accepted, rejected)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET job_id = excluded.job_id, kind = excluded.kind, backend = excluded.backend,
			client = excluded.client, remote = excluded.remote, threads = excluded.threads,
			last_seen = excluded.last_seen, examples = excluded.examples, accepted = excluded.accepted,
			rejected = excluded.rejected`,
		w.ID, w.JobID, w.Kind, w.Backend, w.Client, w.Remote, w.Threads, first, last, w.Examples, w.Accepted, w.Rejected)
	return s.wrap("saving worker "+w.ID, err)
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
