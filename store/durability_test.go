package store

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// A commit reported to the caller must be on the disk, not only in the
// page cache: the writer runs with synchronous=FULL, which fsyncs the WAL
// at every commit. (NORMAL, the old setting, fsyncs only at WAL
// checkpoints, so an OS crash or a file system gone read-only could take
// back a job reported created or a checkpoint reported written.)
func TestWriterFsyncsEveryCommit(t *testing.T) {
	s := openTemp(t)
	var sync int
	if err := s.w.QueryRow("PRAGMA synchronous").Scan(&sync); err != nil {
		t.Fatal(err)
	}
	if sync != 2 { // 0 OFF, 1 NORMAL, 2 FULL, 3 EXTRA
		t.Fatalf("writer's PRAGMA synchronous = %d, want 2 (FULL): commits would not be fsynced", sync)
	}
}

// The WAL stays small however many checkpoints are written: each one is
// copied into the main file and the WAL truncated, so no megabytes pile up
// in it.
func TestWALStaysBoundedAcrossCheckpoints(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	mustCreateJob(t, s, "j")
	const size = 4 << 20
	var most int64
	for v := range int64(8) {
		if err := s.SaveCheckpoint(ctx, Checkpoint{JobID: "j", Version: v, Params: pattern(v, size), OptState: pattern(-v, size)}, 3); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(s.path + "-wal")
		if err != nil {
			t.Fatal(err)
		}
		most = max(most, fi.Size())
	}
	// Each checkpoint is 8 MiB; with the old settings the WAL held 64 MiB
	// before SQLite copied it back. 1 MiB is generous: it should be empty.
	if most > 1<<20 {
		t.Fatalf("the WAL grew to %.1f MB over 8 checkpoints of 8 MiB; want it truncated after each (under 1 MiB)", float64(most)/1e6)
	}
	if c, err := s.LatestCheckpoint(ctx, "j"); err != nil || c.Version != 7 {
		t.Fatalf("latest checkpoint v%d, %v; want v7", c.Version, err)
	}
}

func TestUpsertWorkersAndPrune(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var batch []WorkerRecord
	for i := range 50 {
		batch = append(batch, WorkerRecord{ID: fmt.Sprintf("w%02d", i), Kind: "native", LastSeen: t0.Add(time.Duration(i) * time.Minute)})
	}
	if err := s.UpsertWorkers(ctx, batch); err != nil {
		t.Fatal(err)
	}
	// Age first: everything seen before minute 10 goes (10 rows).
	n, err := s.PruneWorkers(ctx, 0, t0.Add(10*time.Minute))
	if err != nil || n != 10 {
		t.Fatalf("PruneWorkers(by age) = %d, %v; want 10", n, err)
	}
	// Then number: the 15 most recently seen stay.
	if n, err = s.PruneWorkers(ctx, 15, time.Time{}); err != nil || n != 25 {
		t.Fatalf("PruneWorkers(15 rows) = %d, %v; want 25 deleted", n, err)
	}
	list, err := s.Workers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 15 || list[0].ID != "w35" || list[14].ID != "w49" {
		t.Fatalf("after pruning: %d workers from %s; want w35..w49", len(list), list[0].ID)
	}
	if err := s.UpsertWorkers(ctx, []WorkerRecord{{ID: "ok"}, {}}); err == nil {
		t.Error("UpsertWorkers with an empty ID succeeded")
	}
	if n, err := s.PruneWorkers(ctx, 0, time.Time{}); err != nil || n != 0 {
		t.Errorf("PruneWorkers(no limits) = %d, %v; want nothing deleted", n, err)
	}
}
