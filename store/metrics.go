package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/mattn/go-sqlite3"
)

// Metric is one row of a job's metrics history. At comes back in UTC.
type Metric struct {
	JobID          string    `json:"-"`
	At             time.Time `json:"at"`
	Version        int64     `json:"version"`
	Accuracy       *float64  `json:"accuracy"` // nil when this row has no evaluation
	Loss           *float64  `json:"loss"`
	ExamplesPerSec float64   `json:"examples_per_sec"`
	UpdatesPerSec  float64   `json:"updates_per_sec"`
	Note           string    `json:"note,omitempty"`
}

// AddMetric appends a row to the job's history. A zero At is set to now.
// Values must be finite: SQLite would store NaN as NULL (indistinguishable
// from "no evaluation"), and JSON cannot carry NaN or Inf.
// ErrNotFound if the job does not exist.
func (s *Store) AddMetric(ctx context.Context, m Metric) error {
	if m.JobID == "" {
		return errors.New("store: AddMetric: empty job ID: set Metric.JobID")
	}
	for _, f := range []struct {
		name string
		v    *float64
	}{{"accuracy", m.Accuracy}, {"loss", m.Loss}, {"examples_per_sec", &m.ExamplesPerSec}, {"updates_per_sec", &m.UpdatesPerSec}} {
		if f.v != nil && (math.IsNaN(*f.v) || math.IsInf(*f.v, 0)) {
			return fmt.Errorf("store: metric of job %q: %s is %v: store finite values only "+
				"(leave Accuracy/Loss nil and say what happened in Note)", m.JobID, f.name, *f.v)
		}
	}
	at, err := nanos(orNow(m.At), "metric time")
	if err != nil {
		return err
	}
	_, err = s.w.ExecContext(ctx, `INSERT INTO metrics
		(job_id, at, version, accuracy, loss, examples_per_sec, updates_per_sec, note) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		m.JobID, at, m.Version, nullFloat(m.Accuracy), nullFloat(m.Loss), m.ExamplesPerSec, m.UpdatesPerSec, m.Note)
	if constraint(err, sqlite3.ErrConstraintForeignKey) {
		return fmt.Errorf("store: metric: job %q: %w: create the job with CreateJob first", m.JobID, ErrNotFound)
	}
	return s.wrap("adding a metric of job "+m.JobID, err)
}

func nullFloat(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// Metrics returns the job's history, oldest first; only the newest limit
// rows if limit > 0. ErrNotFound if the job does not exist.
func (s *Store) Metrics(ctx context.Context, jobID string, limit int) ([]Metric, error) {
	q := `SELECT ` + metricCols + ` FROM metrics WHERE job_id = ? ORDER BY at, id`
	args := []any{jobID}
	if limit > 0 {
		q = `SELECT * FROM (SELECT ` + metricCols + ` FROM metrics WHERE job_id = ? ORDER BY at DESC, id DESC LIMIT ?) ORDER BY at, id`
		args = append(args, limit)
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, s.wrap("reading metrics of job "+jobID, err)
	}
	list, _, err := s.scanMetrics(ctx, rows, jobID)
	return list, err
}
