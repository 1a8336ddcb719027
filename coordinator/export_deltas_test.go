package coordinator

// SetSnapshotHistoryBytes bounds j's snapshot history to n bytes (it
// still keeps the two newest versions), for the tests of deltas.
func SetSnapshotHistoryBytes(j *Job, n int) {
	j.snapMu.Lock()
	j.history.limit = n
	j.snapMu.Unlock()
}

// DeltasMade is how many deltas j has encoded.
func DeltasMade(j *Job) int {
	j.deltas.mu.Lock()
	defer j.deltas.mu.Unlock()
	return j.deltas.made
}

// FreeDeltas is freeDeltas, for tests.
const FreeDeltas = freeDeltas
