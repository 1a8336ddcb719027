package coordinator_test

import (
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
)

// A native worker keeps the data set's shards (MNIST's 47 MB fit in its
// cache), so over a home link they come down once, not once an epoch:
// into its second epoch the job has served each shard once.
func TestWorkerDownloadsShardsOncePerJob(t *testing.T) {
	testenv.Long(t, "trains MNIST into its second epoch")
	g := newTestGrid(t, quietJob(t))
	g.addWorker(2, nil)
	// Ten shards into the second epoch: with a cache of a few shards
	// those ten were evicted long ago and come down again.
	v := g.waitFor("ten shards into the second epoch", 3*time.Minute, func(v coordinator.JobView) bool {
		return v.Epoch >= 2 && v.ExamplesSeen >= 70_000
	})
	var oneEpoch int64
	// Each of the 60 MNIST shards of 1000 examples: a header, 784 pixels
	// and one label an example.
	oneEpoch = 60 * (1000*785 + 32)
	t.Logf("epoch %d: %d shard bytes served; one epoch's shards are about %d", v.Epoch, v.ShardBytesOut, oneEpoch)
	if v.ShardBytesOut > oneEpoch*21/20 {
		t.Fatalf("%d shard bytes served for one worker, %.2f epochs' worth, ten shards into its second epoch: the worker downloads its shards again every epoch",
			v.ShardBytesOut, float64(v.ShardBytesOut)/float64(oneEpoch))
	}
}
