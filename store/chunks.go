package store

import (
	"context"
	"database/sql"
	"fmt"
)

// CheckpointChunkBytes is the most bytes of a checkpoint's parameters or
// optimizer state one row of checkpoint_chunks holds: small enough that
// the copies SQLite makes of a value it binds (and of the record it
// builds) stay about a MB whatever the model, large enough that gpt-small's
// 147 MB checkpoint is a few hundred rows. Writing gpt-small's, a
// process's peak memory grew by about 30 MB on the first write (SQLite's
// and malloc's pools warming up) and by under 11 MB on each after, where
// the one-row write grew it by 200 MB every time.
const CheckpointChunkBytes = 1 << 20

// Parts of a checkpoint kept in chunks (checkpoint_chunks.part).
const (
	partParams   = 0
	partOptState = 1
)

// writeChunks writes c's parameters and optimizer state as chunks, within
// tx. Each chunk is a slice of the caller's buffer, bound as it is.
func (s *Store) writeChunks(ctx context.Context, tx *sql.Tx, c Checkpoint) error {
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO checkpoint_chunks (job_id, version, part, seq, data) VALUES (?, ?, ?, ?, ?)`)
	if err != nil {
		return err
	}
	defer stmt.Close()
	for part, b := range [][]byte{partParams: c.Params, partOptState: c.OptState} {
		for seq := 0; len(b) > 0; seq++ {
			n := min(len(b), s.chunkBytes())
			if s.beforeChunk != nil {
				if err := s.beforeChunk(part, seq); err != nil {
					return err
				}
			}
			if _, err := stmt.ExecContext(ctx, c.JobID, c.Version, part, seq, b[:n:n]); err != nil {
				return fmt.Errorf("chunk %d of part %d: %w", seq, part, err)
			}
			b = b[n:]
		}
	}
	return nil
}

// chunkBytes is the chunk size (CheckpointChunkBytes unless a test set
// another).
func (s *Store) chunkBytes() int {
	if s.chunkSize > 0 {
		return s.chunkSize
	}
	return CheckpointChunkBytes
}

// readChunks reads c's parameters and optimizer state from its chunks,
// within tx, into buffers of exactly their size: no chunk's copy outlives
// the loop, so a read holds the checkpoint once plus one chunk.
func readChunks(ctx context.Context, tx *sql.Tx, c *Checkpoint) error {
	sizes := [2]int64{}
	rows, err := tx.QueryContext(ctx, `SELECT part, sum(length(data)) FROM checkpoint_chunks
		WHERE job_id = ? AND version = ? GROUP BY part`, c.JobID, c.Version)
	if err != nil {
		return err
	}
	for rows.Next() {
		var part int
		var n int64
		if err := rows.Scan(&part, &n); err != nil {
			rows.Close()
			return err
		}
		if part != partParams && part != partOptState {
			rows.Close()
			return fmt.Errorf("checkpoint v%d has chunks of an unknown part %d", c.Version, part)
		}
		sizes[part] = n
	}
	if err := rows.Close(); err != nil {
		return err
	}
	bufs := [2][]byte{make([]byte, 0, sizes[partParams]), make([]byte, 0, sizes[partOptState])}
	rows, err = tx.QueryContext(ctx, `SELECT part, seq, data FROM checkpoint_chunks
		WHERE job_id = ? AND version = ? ORDER BY part, seq`, c.JobID, c.Version)
	if err != nil {
		return err
	}
	defer rows.Close()
	next := [2]int{}
	for rows.Next() {
		var part, seq int
		var data sql.RawBytes
		if err := rows.Scan(&part, &seq, &data); err != nil {
			return err
		}
		if seq != next[part] {
			return fmt.Errorf("checkpoint v%d: chunk %d of part %d is missing", c.Version, next[part], part)
		}
		next[part]++
		bufs[part] = append(bufs[part], data...)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	c.Params, c.OptState = bufs[partParams], bufs[partOptState]
	return nil
}
