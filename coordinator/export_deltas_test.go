package coordinator

// SetSnapshotCacheBytes bounds j's snapshot cache to n bytes (it still
// keeps the current version), for the tests of deltas and rebasing.
func SetSnapshotCacheBytes(j *Job, n int64) { j.snaps.setLimit(n) }

// DeltasMade is how many deltas j has encoded.
func DeltasMade(j *Job) int {
	j.snaps.mu.Lock()
	defer j.snaps.mu.Unlock()
	return j.snaps.made
}

// FreeDeltas is freeDeltas, for tests.
const FreeDeltas = freeDeltas
