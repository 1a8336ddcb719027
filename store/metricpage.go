package store

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
)

// A job's metrics history can hold hundreds of thousands of rows, so it
// is read a page at a time (MetricsAfter) or as a sample for a chart
// (MetricsSampled), never whole.

// MetricCursor is a place in a job's metrics history; the zero cursor is
// before the first row.
type MetricCursor struct{ at, id int64 }

// String is the cursor as an API client passes it back.
func (c MetricCursor) String() string { return fmt.Sprintf("%d.%d", c.at, c.id) }

// ParseMetricCursor reads a cursor written by String; "" is the start.
func ParseMetricCursor(s string) (MetricCursor, error) {
	if s == "" {
		return MetricCursor{}, nil
	}
	a, b, ok := strings.Cut(s, ".")
	at, err1 := strconv.ParseInt(a, 10, 64)
	id, err2 := strconv.ParseInt(b, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return MetricCursor{}, fmt.Errorf("store: metrics cursor %q is not one this server gave out; start again without it", s)
	}
	return MetricCursor{at, id}, nil
}

const metricCols = `at, version, accuracy, loss, examples_per_sec, updates_per_sec, note, id`

// MetricsAfter returns up to n rows of the job's history after cursor,
// oldest first, and the cursor of the last row returned (cursor itself
// when none is). ErrNotFound if the job does not exist.
func (s *Store) MetricsAfter(ctx context.Context, jobID string, after MetricCursor, n int) ([]Metric, MetricCursor, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+metricCols+` FROM metrics
		WHERE job_id = ? AND (at > ? OR (at = ? AND id > ?)) ORDER BY at, id LIMIT ?`,
		jobID, after.at, after.at, after.id, n)
	if err != nil {
		return nil, after, s.wrap("reading metrics of job "+jobID, err)
	}
	list, last, err := s.scanMetrics(ctx, rows, jobID)
	if err != nil {
		return nil, after, err
	}
	if len(list) == 0 {
		return list, after, nil
	}
	return list, last, nil
}

// MetricsSampled returns at most n (>= 2) rows spread over the job's whole
// history, oldest first: the first and the last row, then evenly spaced
// rows, where rows with an evaluation or a note share the budget so that
// they are never crowded out by the many plain progress rows (all of them
// when they fit in half of it). ErrNotFound if the job does not exist.
func (s *Store) MetricsSampled(ctx context.Context, jobID string, n int) ([]Metric, error) {
	if n < 2 {
		return nil, fmt.Errorf("store: MetricsSampled: n is %d; a sample spanning the history needs at least 2 rows", n)
	}
	var total, marked int64
	err := s.r.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(accuracy IS NOT NULL OR note != ''), 0)
		FROM metrics WHERE job_id = ?`, jobID).Scan(&total, &marked)
	if err != nil {
		return nil, s.wrap("counting metrics of job "+jobID, err)
	}
	if total <= int64(n) {
		list, _, err := s.MetricsAfter(ctx, jobID, MetricCursor{}, n)
		return list, err
	}
	budget := int64(n) - 2 // besides the first and the last
	plain := total - marked
	markedBudget := min(marked, max(budget/2, budget-plain))
	plainBudget := budget - markedBudget
	step := func(count, budget int64) int64 { // 0 takes none
		if budget <= 0 || count == 0 {
			return 0
		}
		return (count + budget - 1) / budget
	}
	stepMarked, stepPlain := step(marked, markedBudget), step(plain, plainBudget)
	// One pass over the ids in order picks the rows (SQLite's window
	// functions sort the whole history, several times slower); a second
	// reads the picked ones.
	ids, err := s.r.QueryContext(ctx, `SELECT id, accuracy IS NOT NULL OR note != '' FROM metrics
		WHERE job_id = ? ORDER BY at, id`, jobID)
	if err != nil {
		return nil, s.wrap("sampling metrics of job "+jobID, err)
	}
	defer ids.Close()
	var picked []any
	var rn, kMarked, kPlain int64
	for ids.Next() {
		var id int64
		var isMarked bool
		if err := ids.Scan(&id, &isMarked); err != nil {
			return nil, s.wrap("sampling metrics of job "+jobID, err)
		}
		rn++
		take := rn == 1 || rn == total
		if isMarked {
			take = take || stepMarked > 0 && kMarked%stepMarked == 0
			kMarked++
		} else {
			take = take || stepPlain > 0 && kPlain%stepPlain == 0
			kPlain++
		}
		if take && len(picked) < n { // rows added since the count wait for the next sample
			picked = append(picked, id)
		}
	}
	if err := ids.Err(); err != nil {
		return nil, s.wrap("sampling metrics of job "+jobID, err)
	}
	ids.Close()
	rows, err := s.r.QueryContext(ctx, `SELECT `+metricCols+` FROM metrics
		WHERE id IN (SELECT value FROM json_each(?)) ORDER BY at, id`, jsonInts(picked))
	if err != nil {
		return nil, s.wrap("sampling metrics of job "+jobID, err)
	}
	list, _, err := s.scanMetrics(ctx, rows, jobID)
	return list, err
}

// jsonInts writes ids as a JSON array, for json_each.
func jsonInts(ids []any) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(id.(int64), 10))
	}
	b.WriteByte(']')
	return b.String()
}

// scanMetrics reads rows of metricCols and closes them; an empty result
// is ErrNotFound when the job does not exist.
func (s *Store) scanMetrics(ctx context.Context, rows *sql.Rows, jobID string) ([]Metric, MetricCursor, error) {
	defer rows.Close()
	list := []Metric{}
	var last MetricCursor
	for rows.Next() {
		m := Metric{JobID: jobID}
		var acc, loss sql.NullFloat64
		if err := rows.Scan(&last.at, &m.Version, &acc, &loss, &m.ExamplesPerSec, &m.UpdatesPerSec, &m.Note, &last.id); err != nil {
			return nil, last, s.wrap("reading metrics of job "+jobID, err)
		}
		m.At = fromNanos(last.at)
		if acc.Valid {
			m.Accuracy = &acc.Float64
		}
		if loss.Valid {
			m.Loss = &loss.Float64
		}
		list = append(list, m)
	}
	if err := rows.Err(); err != nil {
		return nil, last, s.wrap("reading metrics of job "+jobID, err)
	}
	if len(list) == 0 {
		if err := s.requireJob(ctx, jobID); err != nil {
			return nil, last, err
		}
	}
	return list, last, nil
}
