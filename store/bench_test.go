package store

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkSaveCheckpoint writes checkpoints as the coordinator does, with
// Adam's state (two vectors the size of the parameters) and keep=5. The
// database holds 5 checkpoints before timing starts, so every timed save
// also prunes one: the steady state.
func BenchmarkSaveCheckpoint(b *testing.B) {
	for _, n := range []int{235_146, 10_000_000} { // mnist-mlp; a 10M-parameter model
		b.Run(fmt.Sprintf("params=%d", n), func(b *testing.B) {
			ctx := context.Background()
			s := openTemp(b)
			mustCreateJob(b, s, "j")
			params, opt, prog := pattern(1, 4*n), pattern(2, 8*n+12), []byte(`{"epoch":1,"tasks":[]}`)
			const keep = 5
			save := func(v int64) {
				err := s.SaveCheckpoint(ctx, Checkpoint{JobID: "j", Version: v, CreatedAt: time.Now(),
					Params: params, OptState: opt, Progress: prog}, keep)
				if err != nil {
					b.Fatal(err)
				}
			}
			for v := range int64(keep) {
				save(v)
			}
			b.SetBytes(int64(len(params) + len(opt) + len(prog)))
			b.ResetTimer()
			for i := range b.N {
				save(int64(keep + i))
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/ckpt")
		})
	}
}
