package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/crowdtrain/crowdtrain/internal/testdisk"
)

// chunkRows counts the chunk rows of the job's checkpoint version.
func chunkRows(t *testing.T, s *Store, job string, version int64) int {
	t.Helper()
	var n int
	if err := s.r.QueryRow(`SELECT count(*) FROM checkpoint_chunks WHERE job_id = ? AND version = ?`, job, version).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func sameCheckpoint(t *testing.T, what string, got, want Checkpoint) {
	t.Helper()
	if got.Version != want.Version || !bytes.Equal(got.Params, want.Params) || !bytes.Equal(got.OptState, want.OptState) || !bytes.Equal(got.Progress, want.Progress) {
		t.Fatalf("%s: v%d with %d+%d+%d bytes, want v%d with %d+%d+%d, bit for bit", what, got.Version, len(got.Params), len(got.OptState), len(got.Progress),
			want.Version, len(want.Params), len(want.OptState), len(want.Progress))
	}
}

// A checkpoint spread over many chunks (an odd last one in each part)
// reads back bit for bit; its listing counts every byte; saving the
// version again replaces its chunks; pruning drops the pruned versions'
// chunks too.
func TestCheckpointChunksRoundTrip(t *testing.T) {
	s := openTemp(t)
	s.chunkSize = 1000
	ctx := context.Background()
	mustCreateJob(t, s, "j")
	c := Checkpoint{JobID: "j", Version: 1, Params: pattern(1, 10_007), OptState: pattern(2, 3_333), Progress: []byte(`{"epoch":1}`)}
	if err := s.SaveCheckpoint(ctx, c, 2); err != nil {
		t.Fatal(err)
	}
	if n := chunkRows(t, s, "j", 1); n != 11+4 {
		t.Errorf("%d chunk rows, want 11 of parameters and 4 of optimizer state", n)
	}
	got, err := s.LatestCheckpoint(ctx, "j")
	if err != nil {
		t.Fatal(err)
	}
	sameCheckpoint(t, "read back", got, c)
	if infos, err := s.Checkpoints(ctx, "j"); err != nil || len(infos) != 1 || infos[0].Bytes != 10_007+3_333+int64(len(c.Progress)) {
		t.Errorf("listing: %+v, %v", infos, err)
	}

	c.Params, c.OptState = pattern(3, 2_500), nil // saved again, smaller
	if err := s.SaveCheckpoint(ctx, c, 2); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Checkpoint(ctx, "j", 1); err != nil {
		t.Fatal(err)
	} else {
		sameCheckpoint(t, "replaced", got, c)
	}
	if n := chunkRows(t, s, "j", 1); n != 3 {
		t.Errorf("%d chunk rows after replacing, want the new 3", n)
	}

	for v := int64(2); v <= 4; v++ {
		c.Version, c.Params = v, pattern(v, 1_500)
		if err := s.SaveCheckpoint(ctx, c, 2); err != nil {
			t.Fatal(err)
		}
	}
	for v, want := range map[int64]int{1: 0, 2: 0, 3: 2, 4: 2} {
		if n := chunkRows(t, s, "j", v); n != want {
			t.Errorf("version %d: %d chunk rows, want %d (keep 2)", v, n, want)
		}
	}
}

// A save that fails halfway through its chunks leaves the previous
// checkpoint as it was and none of the failed one: the row, its chunks and
// the pruning are one transaction. The next save goes through.
func TestCheckpointFailingHalfwayKeepsThePrevious(t *testing.T) {
	s := openTemp(t)
	s.chunkSize = 4096
	ctx := context.Background()
	mustCreateJob(t, s, "j")
	old := Checkpoint{JobID: "j", Version: 1, Params: pattern(1, 40_000), OptState: pattern(2, 80_000), Progress: []byte(`{"v":1}`)}
	if err := s.SaveCheckpoint(ctx, old, 1); err != nil {
		t.Fatal(err)
	}
	next := Checkpoint{JobID: "j", Version: 2, Params: pattern(3, 40_000), OptState: pattern(4, 80_000), Progress: []byte(`{"v":2}`)}
	written := 0
	errDisk := errors.New("the disk went away")
	s.beforeChunk = func(part, seq int) error {
		if part == partOptState && seq == 10 { // half of the 30 chunks
			return errDisk
		}
		written++
		return nil
	}
	if err := s.SaveCheckpoint(ctx, next, 1); !errors.Is(err, errDisk) {
		t.Fatalf("save failing halfway: %v", err)
	}
	if written != 20 {
		t.Fatalf("%d chunks written before the failure, want 20", written)
	}
	got, err := s.LatestCheckpoint(ctx, "j")
	if err != nil {
		t.Fatal(err)
	}
	sameCheckpoint(t, "after a failed save", got, old)
	if n := chunkRows(t, s, "j", 2); n != 0 {
		t.Errorf("%d chunks of the failed save left behind", n)
	}
	s.beforeChunk = nil
	if err := s.SaveCheckpoint(ctx, next, 1); err != nil {
		t.Fatal(err)
	}
	if got, err := s.LatestCheckpoint(ctx, "j"); err != nil {
		t.Fatal(err)
	} else {
		sameCheckpoint(t, "the next save", got, next)
	}
}

// On a disk that fills up while a checkpoint is being written (its chunks
// spill to the WAL, then the commit writes the rest), the save fails with
// the disk's error and the previous checkpoint stays whole; once space is
// freed the save goes through.
func TestCheckpointOnAFullDiskKeepsThePrevious(t *testing.T) {
	dir := testdisk.Mount(t, 16)
	s, err := Open(filepath.Join(dir, "crowdtrain.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	mustCreateJob(t, s, "j")
	old := Checkpoint{JobID: "j", Version: 1, Params: pattern(1, 3<<20), OptState: pattern(2, 1<<20), Progress: []byte(`{"v":1}`)}
	if err := s.SaveCheckpoint(ctx, old, 1); err != nil {
		t.Fatal(err)
	}
	// About 6 MB free: the next checkpoint's 10 MB of chunks cannot fit,
	// and its first chunks can.
	reserve := filepath.Join(dir, "reserve")
	if err := os.WriteFile(reserve, make([]byte, 6<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	free := testdisk.Fill(t, dir)
	if err := os.Remove(reserve); err != nil {
		t.Fatal(err)
	}
	next := Checkpoint{JobID: "j", Version: 2, Params: pattern(3, 6<<20), OptState: pattern(4, 4<<20), Progress: []byte(`{"v":2}`)}
	chunks := 0
	s.beforeChunk = func(int, int) error { chunks++; return nil }
	err = s.SaveCheckpoint(ctx, next, 1)
	if err == nil {
		t.Fatal("a 10 MB checkpoint was saved in 6 MB of free space")
	}
	t.Logf("failed after %d chunks: %v", chunks, err)
	if chunks < 2 {
		t.Errorf("the save failed before its second chunk: the test shows no failure part-way")
	}
	got, err := s.LatestCheckpoint(ctx, "j")
	if err != nil {
		t.Fatal(err)
	}
	sameCheckpoint(t, "after the disk filled", got, old)
	free()
	if err := s.SaveCheckpoint(ctx, next, 1); err != nil {
		t.Fatal(fmt.Errorf("after freeing the disk: %w", err))
	}
	if got, err := s.LatestCheckpoint(ctx, "j"); err != nil {
		t.Fatal(err)
	} else {
		sameCheckpoint(t, "after freeing the disk", got, next)
	}
}

// With KeepVersion0 (an RL job's KL reference) the pruning keeps version
// 0 beside the newest keep; without it version 0 goes as any old one.
func TestCheckpointKeepVersion0(t *testing.T) {
	ctx := context.Background()
	for _, keep0 := range []bool{true, false} {
		s := openTemp(t)
		mustCreateJob(t, s, "j")
		first := Checkpoint{JobID: "j", Version: 0, Params: pattern(7, 1_000), KeepVersion0: keep0}
		if err := s.SaveCheckpoint(ctx, first, 2); err != nil {
			t.Fatal(err)
		}
		for v := int64(1); v <= 4; v++ {
			if err := s.SaveCheckpoint(ctx, Checkpoint{JobID: "j", Version: v, Params: pattern(v, 1_000), KeepVersion0: keep0}, 2); err != nil {
				t.Fatal(err)
			}
		}
		infos, err := s.Checkpoints(ctx, "j")
		if err != nil {
			t.Fatal(err)
		}
		var versions []int64
		for _, in := range infos {
			versions = append(versions, in.Version)
		}
		want := "[4 3]"
		if keep0 {
			want = "[4 3 0]"
		}
		if fmt.Sprint(versions) != want {
			t.Errorf("KeepVersion0 %v: versions %v after 5 saves with keep 2, want %s", keep0, versions, want)
		}
		if keep0 {
			got, err := s.Checkpoint(ctx, "j", 0)
			if err != nil {
				t.Fatal(err)
			}
			sameCheckpoint(t, "version 0", got, first)
		}
	}
}
