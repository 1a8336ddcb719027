package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/mattn/go-sqlite3"
)

// Checkpoint is everything a resumed job needs. Params and OptState are
// written in chunks of CheckpointChunkBytes (rows of checkpoint_chunks),
// Progress as one BLOB.
type Checkpoint struct {
	JobID     string
	Version   int64
	Epoch     int
	CreatedAt time.Time
	Params    []byte // little-endian float32s, opaque to store
	OptState  []byte // opaque
	Progress  []byte // opaque (JSON)
	// Credits is the volunteers' credit for the results applied since the
	// job's previous checkpoint: the save adds it to their rows in the
	// same transaction, so a volunteer's credit is never durable before
	// the model that holds the work. Written only; readers leave it nil.
	Credits []VolunteerCredit
	// KeepVersion0 keeps the job's version 0 out of the pruning: an RL
	// job's KL reference, the policy it started from. Written only.
	KeepVersion0 bool
}

// CheckpointInfo describes a checkpoint without its data.
type CheckpointInfo struct {
	Version   int64     `json:"version"`
	Epoch     int       `json:"epoch"`
	CreatedAt time.Time `json:"created_at"`
	Bytes     int64     `json:"bytes"` // len(Params)+len(OptState)+len(Progress)
}

// SaveCheckpoint writes c and deletes all but the newest (highest
// version) keep checkpoints of the job (and version 0 with
// c.KeepVersion0), in ONE transaction: a crash leaves
// either the old set or the new one. Saving a version that already exists
// for the job replaces it; saving a version older than the newest keep is
// written and pruned at once. keep < 1 is treated as 1. A zero CreatedAt
// is set to now. ErrNotFound if the job does not exist.
//
// Params and OptState go in chunks of CheckpointChunkBytes, each bound
// straight from the caller's slices: the save allocates nothing the size
// of the model, and SQLite copies one chunk at a time. Only Progress is
// one value, which must be under SQLite's 1e9-byte limit.
func (s *Store) SaveCheckpoint(ctx context.Context, c Checkpoint, keep int) error {
	return s.saveCheckpoint(ctx, c, keep, nil)
}

// JobState is a job's state as UpdateJobState sets it.
type JobState struct {
	State, Reason string
	DoneAt        time.Time
}

// SaveCheckpointState is SaveCheckpoint and UpdateJobState in one
// transaction, so a crash never leaves a finished job's state without its
// final checkpoint or the reverse. It also drops the job's checkpoints
// newer than c.Version: a job's final model can be older than checkpoints
// taken while it was being evaluated, and the latest checkpoint must be
// the final one.
func (s *Store) SaveCheckpointState(ctx context.Context, c Checkpoint, keep int, st JobState) error {
	return s.saveCheckpoint(ctx, c, keep, &st)
}

func (s *Store) saveCheckpoint(ctx context.Context, c Checkpoint, keep int, st *JobState) error {
	if c.JobID == "" {
		return errors.New("store: SaveCheckpoint: empty job ID: set Checkpoint.JobID")
	}
	if keep < 1 {
		keep = 1
	}
	if size := len(c.Progress); size > maxRowBytes {
		return fmt.Errorf("store: checkpoint v%d of job %q has %d bytes of progress, over SQLite's limit of %d bytes for a value: "+
			"a job this big needs fewer tasks or spot checks in its state", c.Version, c.JobID, size, maxRowBytes)
	}
	created, err := nanos(orNow(c.CreatedAt), fmt.Sprintf("checkpoint v%d created_at", c.Version))
	if err != nil {
		return err
	}
	var done any
	if st != nil {
		if err := checkState(c.JobID, st.State); err != nil {
			return err
		}
		if done, err = nullNanos(st.DoneAt, "job "+c.JobID+" done_at"); err != nil {
			return err
		}
	}
	doing := fmt.Sprintf("saving checkpoint v%d of job %s", c.Version, c.JobID)
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return s.wrap(doing, err)
	}
	defer tx.Rollback()
	if st != nil {
		if _, err := tx.ExecContext(ctx, `DELETE FROM checkpoints WHERE job_id = ? AND version > ?`, c.JobID, c.Version); err != nil {
			return s.wrap(doing+": dropping newer checkpoints", err)
		}
	}
	// Credit first: whatever fails after it takes it back with the rest.
	if err := addCredits(ctx, tx, c.Credits, created); err != nil {
		return s.wrap(doing+": adding the volunteers' credit", err)
	}
	// A version saved again replaces the old one's chunks too.
	if _, err := tx.ExecContext(ctx, `DELETE FROM checkpoint_chunks WHERE job_id = ? AND version = ?`, c.JobID, c.Version); err != nil {
		return s.wrap(doing+": dropping the replaced version's chunks", err)
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO checkpoints (job_id, version, epoch, created_at, crc32c, params, opt_state, progress, chunk_bytes)
		VALUES (?, ?, ?, ?, ?, X'', X'', ?, ?)
		ON CONFLICT (job_id, version) DO UPDATE SET epoch = excluded.epoch, created_at = excluded.created_at,
			crc32c = excluded.crc32c, params = excluded.params, opt_state = excluded.opt_state, progress = excluded.progress,
			chunk_bytes = excluded.chunk_bytes`,
		c.JobID, c.Version, c.Epoch, created, int64(c.checksum()), blob(c.Progress), len(c.Params)+len(c.OptState))
	if constraint(err, sqlite3.ErrConstraintForeignKey) {
		return fmt.Errorf("store: checkpoint v%d: job %q: %w: create the job with CreateJob before saving its checkpoints",
			c.Version, c.JobID, ErrNotFound)
	}
	if err != nil {
		return s.wrap(doing, err)
	}
	if err := s.writeChunks(ctx, tx, c); err != nil {
		return s.wrap(doing+": writing its chunks", err)
	}
	// The pruned checkpoints' chunks go with them (ON DELETE CASCADE).
	_, err = tx.ExecContext(ctx, `DELETE FROM checkpoints WHERE job_id = ? AND NOT (? AND version = 0) AND version NOT IN
		(SELECT version FROM checkpoints WHERE job_id = ? ORDER BY version DESC LIMIT ?)`, c.JobID, c.KeepVersion0, c.JobID, keep)
	if err != nil {
		return s.wrap(doing+": pruning old checkpoints", err)
	}
	if st != nil {
		if _, err := tx.ExecContext(ctx, `UPDATE jobs SET state = ?, reason = ?, done_at = ? WHERE id = ?`,
			st.State, st.Reason, done, c.JobID); err != nil {
			return s.wrap(doing+": updating the job's state", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return s.wrap(doing, err)
	}
	s.truncateWAL(ctx)
	return nil
}

// truncateWAL copies the WAL into the main file and truncates it to zero
// bytes, so that the WAL holds at most about one checkpoint and the main
// file is the copy of record. It never waits for readers (busy_timeout 0
// for the call): one reading an older snapshot makes it do what it can,
// and wal_autocheckpoint catches up later. A failure here loses nothing:
// the checkpoint is already durable in the WAL.
//
// Truncating also means the next checkpoint needs new blocks for its WAL
// frames, so a full disk fails it at once with SQLITE_FULL rather than
// after it has silently reused the space of old frames: the failure is
// seen, retried and reported while there is still time to free space.
func (s *Store) truncateWAL(ctx context.Context) {
	if !s.mode.truncateWAL {
		return
	}
	c, err := s.w.Conn(ctx)
	if err != nil {
		return
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, "PRAGMA busy_timeout = 0"); err != nil {
		return
	}
	_, _ = c.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)")
	_, _ = c.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout = %d", busyTimeoutMs))
}

// LatestCheckpoint returns the job's checkpoint of the highest version;
// ErrNotFound when it has none (or the job does not exist). Data that
// fails its checksum is an ErrCorrupt error, never returned.
func (s *Store) LatestCheckpoint(ctx context.Context, jobID string) (Checkpoint, error) {
	return s.readCheckpoint(ctx, jobID, `ORDER BY version DESC LIMIT 1`, "the latest checkpoint")
}

// Checkpoint returns the job's checkpoint of the given version;
// ErrNotFound when there is none.
func (s *Store) Checkpoint(ctx context.Context, jobID string, version int64) (Checkpoint, error) {
	return s.readCheckpoint(ctx, jobID, `AND version = ?`, fmt.Sprintf("checkpoint v%d", version), version)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli) // in hardware on amd64 and arm64: ~10 GB/s

func (c *Checkpoint) checksum() uint32 {
	sum := crc32.Update(0, castagnoli, c.Params)
	sum = crc32.Update(sum, castagnoli, c.OptState)
	return crc32.Update(sum, castagnoli, c.Progress)
}

func (s *Store) readCheckpoint(ctx context.Context, jobID, tail, what string, args ...any) (Checkpoint, error) {
	c := Checkpoint{JobID: jobID}
	var created, sum, chunkBytes int64
	// One read transaction: the row and its chunks are of one commit.
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return Checkpoint{}, s.wrap(fmt.Sprintf("reading %s of job %s", what, jobID), err)
	}
	defer tx.Rollback()
	err = tx.QueryRowContext(ctx, `SELECT version, epoch, created_at, crc32c, params, opt_state, progress, chunk_bytes
		FROM checkpoints WHERE job_id = ? `+tail, append([]any{jobID}, args...)...).
		Scan(&c.Version, &c.Epoch, &created, &sum, ownedBytes{&c.Params}, ownedBytes{&c.OptState}, ownedBytes{&c.Progress}, &chunkBytes)
	if errors.Is(err, sql.ErrNoRows) {
		if ok, err := s.jobExistsIn(ctx, tx, jobID); err != nil {
			return Checkpoint{}, err
		} else if !ok {
			return Checkpoint{}, fmt.Errorf("store: %s of job %q: job %w", what, jobID, ErrNotFound)
		}
		return Checkpoint{}, fmt.Errorf("store: %s of job %q: %w (the job has no such checkpoint)", what, jobID, ErrNotFound)
	}
	if err == nil && chunkBytes > 0 {
		err = readChunks(ctx, tx, &c)
	}
	if err != nil {
		return Checkpoint{}, s.wrap(fmt.Sprintf("reading %s of job %s", what, jobID), err)
	}
	c.CreatedAt = fromNanos(created)
	if got := c.checksum(); int64(got) != sum {
		return Checkpoint{}, fmt.Errorf("store: %s: checkpoint v%d of job %q: %w: its data does not match the checksum "+
			"written with it (crc32c %08x, now %08x), so the file is damaged: resume from an older checkpoint "+
			"(Checkpoints, Checkpoint) or restore the database from a backup", s.path, c.Version, jobID, ErrCorrupt, sum, got)
	}
	return c, nil
}

// Checkpoints lists the job's checkpoints, newest first, without reading
// their data: SQLite answers length() of a BLOB from the record header.
// ErrNotFound if the job does not exist.
func (s *Store) Checkpoints(ctx context.Context, jobID string) ([]CheckpointInfo, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT version, epoch, created_at,
		length(params) + length(opt_state) + length(progress) + chunk_bytes
		FROM checkpoints WHERE job_id = ? ORDER BY version DESC`, jobID)
	if err != nil {
		return nil, s.wrap("listing checkpoints of job "+jobID, err)
	}
	defer rows.Close()
	list := []CheckpointInfo{}
	for rows.Next() {
		var ci CheckpointInfo
		var created int64
		if err := rows.Scan(&ci.Version, &ci.Epoch, &created, &ci.Bytes); err != nil {
			return nil, s.wrap("listing checkpoints of job "+jobID, err)
		}
		ci.CreatedAt = fromNanos(created)
		list = append(list, ci)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap("listing checkpoints of job "+jobID, err)
	}
	if len(list) == 0 {
		// An empty list means nothing only if the job exists.
		if err := s.requireJob(ctx, jobID); err != nil {
			return nil, err
		}
	}
	return list, nil
}
