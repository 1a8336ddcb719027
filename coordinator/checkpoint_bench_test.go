package coordinator

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/store"
)

// BenchmarkCheckpoint measures, per checkpoint, the pause of the update
// loop (copying the state, the only part done on the loop) and the SQLite
// write that follows off the loop, for mnist-mlp and a 10M-parameter model
// with Adam (parameters plus two moment vectors).
func BenchmarkCheckpoint(b *testing.B) {
	mlp, _ := nn.Preset("mnist-mlp")
	big := nn.ModelSpec{Input: []int{1, 28, 28}, Layers: []nn.LayerSpec{
		{Type: "dense", Units: 4096}, {Type: "relu"}, {Type: "dense", Units: 1700}, {Type: "relu"}, {Type: "dense", Units: 10}}}
	for _, c := range []struct {
		name  string
		model nn.ModelSpec
	}{{"mnist-mlp", mlp}, {"10M-params", big}} {
		b.Run(c.name, func(b *testing.B) { benchCheckpoint(b, c.model) })
	}
}

func benchCheckpoint(b *testing.B, model nn.ModelSpec) {
	set := &dataset.Set{Name: "synthetic", Elem: dataset.Pixels, Kind: dataset.ClassLabels, N: 200, Shape: []int{1, 28, 28}, Classes: 10,
		U8: make([]byte, 200*784), Labels: make([]int32, 200)}
	spec := defaultSpec()
	spec.Name, spec.Model = "bench", model
	spec.ShardSize = 100
	var ids atomic.Uint64
	j, err := newJob("bench", spec, set, set, &ids, LogfLogger(b.Logf))
	if err != nil {
		b.Fatal(err)
	}
	db, err := store.Open(filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if err := db.CreateJob(ctx, store.JobRecord{ID: j.ID, Name: "bench", Spec: []byte("{}"), State: StateRunning, CreatedAt: time.Now()}); err != nil {
		b.Fatal(err)
	}
	var pause, write time.Duration
	var bytes int64
	j.ckptPool = make(chan *ckptBuffers, 2)
	b.ResetTimer()
	for i := range b.N {
		j.st.model.Version = int64(i + 1)
		t0 := time.Now()
		bufs := j.getBuffers()
		c := j.copyState(bufs)
		t1 := time.Now()
		if err := db.SaveCheckpoint(ctx, c, 5); err != nil {
			b.Fatal(err)
		}
		j.putBuffers(bufs)
		pause += t1.Sub(t0)
		write += time.Since(t1)
		bytes = int64(len(c.Params) + len(c.OptState) + len(c.Progress))
	}
	b.ReportMetric(float64(pause.Microseconds())/1000/float64(b.N), "pause-ms")
	b.ReportMetric(float64(write.Microseconds())/1000/float64(b.N), "write-ms")
	b.ReportMetric(float64(bytes)/1e6, "MB")
}
