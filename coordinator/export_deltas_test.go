package coordinator

// SetSnapshotCacheBytes bounds the snapshot cache j shares with its
// server's other jobs to n bytes (each keeps its current version), for the
// tests of deltas and rebasing.
func SetSnapshotCacheBytes(j *Job, n int64) { j.snaps.setLimit(n) }

// DeltasMade is how many deltas j has encoded.
func DeltasMade(j *Job) int {
	p := j.snaps.lock()
	defer p.mu.Unlock()
	return j.snaps.made
}

// FreeDeltas is freeDeltas, for tests.
const FreeDeltas = freeDeltas
