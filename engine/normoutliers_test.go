package engine

import (
	"math/rand/v2"
	"testing"
)

// hardBatch is the large update every honest worker computes for one
// task, moved a little by the version it starts from.
func hardBatch(rng *rand.Rand, base []float32) []float32 {
	out := make([]float32, len(base))
	for i, v := range base {
		out[i] = v + 0.05*float32(rng.NormFloat64())
	}
	return out
}

func randomUpdate(rng *rand.Rand, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(rng.NormFloat64())
	}
	return out
}

// The gate's outliers: a worker with a clean record is taken at its word;
// a new one's outlier waits for a second computation that agrees, from
// another connection or from itself at another version; garbage, random
// or the same at every version, is never applied.
func TestNormOutliersAdmitHardBatchesNotGarbage(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 5000
	hard := randomUpdate(rng, n)
	task := Task{Shard: 3, Start: 64, Count: 64}
	var o normOutliers

	// A new worker is not trusted: its first outlier is refused, and the
	// same result again from the same version proves nothing.
	if o.admit(task, "new", 10, 1, hardBatch(rng, hard)) {
		t.Fatal("a new worker's first outlier was admitted")
	}
	if o.admit(task, "new", 10, 1, hardBatch(rng, hard)) {
		t.Fatal("the same worker's second computation from the same version was taken as a witness")
	}
	// Another connection computes it alike: admitted, witness used up.
	if !o.admit(task, "other", 12, 1.1, hardBatch(rng, hard)) {
		t.Fatal("a second worker's agreeing computation did not admit the hard batch")
	}
	if _, ok := o.byTask[task]; ok {
		t.Fatal("the witness was not used up")
	}
	// The same worker from a later version, its record not broken.
	if o.admit(task, "new", 20, 1, hardBatch(rng, hard)) || !o.admit(task, "new", 21, 0.9, hardBatch(rng, hard)) {
		t.Fatal("a worker's own recomputation from a later version did not admit its hard batch")
	}
	// A norm 3x the first, or another direction, is no agreement.
	o.admit(task, "new", 30, 1, hardBatch(rng, hard))
	if o.admit(task, "other", 31, 3, hardBatch(rng, hard)) {
		t.Fatal("norms 3x apart agreed")
	}
	if o.admit(task, "third", 32, 3, randomUpdate(rng, n)) {
		t.Fatal("an update in another direction agreed")
	}

	// Clean results earn trust: then an outlier is taken at its word.
	for range 10 {
		o.note("new", false)
	}
	if !o.trusted("new") || !o.admit(Task{Shard: 9}, "new", 40, 1, hardBatch(rng, hard)) {
		t.Fatal("a worker with ten clean results in a row was not taken at its word")
	}

	// Random garbage, from one worker or two, never agrees.
	for i := range 50 {
		tk := Task{Shard: 100 + i}
		if o.admit(tk, "noisy", int64(i), 5, randomUpdate(rng, n)) || o.admit(tk, "noisy2", int64(i+1), 5, randomUpdate(rng, n)) {
			t.Fatalf("random garbage admitted at task %d", i)
		}
	}
	// Garbage that is the same at every version is refused for a few
	// tasks and then is not its own witness: its share of flagged tasks
	// passes brokenRefusals.
	fixed := randomUpdate(rng, n)
	admitted := 0
	for i := range 50 {
		tk := Task{Shard: 200 + i}
		o.admit(tk, "stuck", int64(2*i), 5, fixed)
		if o.admit(tk, "stuck", int64(2*i+1), 5, fixed) {
			admitted++
		}
	}
	if admitted > 3 || o.trusted("stuck") {
		t.Fatalf("a worker sending the same garbage for every task had %d of 50 admitted (trusted %v)", admitted, o.trusted("stuck"))
	}
}

// The memory of refused tasks and of workers' records is bounded.
func TestNormOutliersBounded(t *testing.T) {
	var o normOutliers
	u := []float32{1, 2, 3}
	for i := range 10 * outlierTasks {
		o.admit(Task{Shard: i}, "w", 0, 5, u)
	}
	if len(o.byTask) > outlierTasks || len(o.order) > 2*outlierTasks {
		t.Fatalf("%d witnesses, %d names kept; want at most %d and %d", len(o.byTask), len(o.order), outlierTasks, 2*outlierTasks)
	}
	for i := range 2 * trustWorkers {
		o.note(string(rune(i)), i%2 == 0)
	}
	if len(o.refusals) > trustWorkers {
		t.Fatalf("%d workers' records kept, want at most %d", len(o.refusals), trustWorkers)
	}
}
