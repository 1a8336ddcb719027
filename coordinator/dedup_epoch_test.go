package coordinator_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/worker"
)

// DiLoCo at H=64 with rounds of 4: a task is 64 batches of 64, a shard
// (4,096 examples), so MNIST's 60,000 are 15 tasks and every epoch ends in
// the middle of a round, whose remaining leases go to the next epoch's
// tasks. With seed 1, epoch 2 ends on shards 0 and 2 and epoch 3 begins
// with shard 0: leased again in the same round, from the same version, it
// gave a result bit-identical to the one accepted moments before, refused
// as a replay ("duplicate") and queued again, hundreds of times, until
// the round's timeout closed it short. A round must never lease a task it
// holds: no honest result is a duplicate, no round closes short.
func TestDiLoCoEpochEndingMidRoundHasNoDuplicates(t *testing.T) {
	testenv.Long(t, "trains MNIST end to end")
	g := newTestGrid(t, modeSpec(t, "mode: diloco\nlocal_steps: 64\nround_size: 4\ninner_optimizer:\n  type: adamw\n"+
		"batch_size: 64\nseed: 1\nmax_epochs: 3\ntarget_accuracy: 0.999\neval_every: 100000\n"))
	start := time.Now()
	for i := range 4 {
		g.addWorkerWith(1, nil, func(cfg *worker.Config) {
			cfg.VolunteerKey = fmt.Sprintf("dedup-epoch-volunteer-%02d", i)
		})
	}
	v := g.waitDone(3 * time.Minute)
	if v.Epoch < 3 {
		t.Fatalf("job ended %s (%s) in epoch %d, want 3 epochs", v.State, v.Reason, v.Epoch)
	}
	if n := v.Rejections["duplicate"]; n != 0 {
		t.Errorf("%d honest results refused as duplicates (rejections %v)", n, v.Rejections)
	}
	if v.RoundsShort != 0 {
		t.Errorf("%d rounds closed short by round_timeout", v.RoundsShort)
	}
	t.Logf("3 epochs in %.1fs: version %d, %d results, rejections %v, rounds short %d",
		time.Since(start).Seconds(), v.Version, v.UpdatesApplied, v.Rejections, v.RoundsShort)
}

// An epoch of fewer tasks than a round's leases: 2,048 examples at H=16
// are 2 tasks, rounds of 4. Every round takes both, the epoch ends, and
// the next epoch's tasks are the round's own: leased again they would be
// duplicates, and not leased the round could only wait for its timeout
// (10 minutes here). It closes with its 2 results instead.
func TestRoundLargerThanAnEpochClosesWithoutWaiting(t *testing.T) {
	testenv.Long(t, "trains on MNIST end to end")
	spec := modeSpec(t, "mode: diloco\nlocal_steps: 16\nround_size: 4\ninner_optimizer:\n  type: adamw\n"+
		"batch_size: 64\nround_timeout: 10m\nmax_epochs: 6\ntarget_accuracy: 0.999\neval_every: 100000\n")
	g := newTestGridWith(t, spec, func(c *coordinator.Config) {
		const n = 2048
		small := *c.Train
		per := len(c.Train.U8) / c.Train.N
		small.N, small.U8, small.Labels = n, c.Train.U8[:n*per:n*per], c.Train.Labels[:n:n]
		c.Train = &small
	})
	for i := range 4 {
		g.addWorkerWith(1, nil, func(cfg *worker.Config) {
			cfg.VolunteerKey = fmt.Sprintf("small-epoch-volunteer-%02d", i)
		})
	}
	v := g.waitDone(2 * time.Minute)
	if v.Epoch < 6 {
		t.Fatalf("job ended %s (%s) in epoch %d, want 6 epochs", v.State, v.Reason, v.Epoch)
	}
	if n := v.Rejections["duplicate"]; n != 0 {
		t.Errorf("%d honest results refused as duplicates (rejections %v)", n, v.Rejections)
	}
	t.Logf("6 epochs of 2 tasks: version %d, %d results, rejections %v", v.Version, v.UpdatesApplied, v.Rejections)
}
