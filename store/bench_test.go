package store

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkSaveCheckpoint writes checkpoints as the coordinator does, with
// Adam's state (two vectors the size of the parameters) and keep=5. The
// database holds 5 checkpoints before timing starts, so every timed save
// also prunes one: the steady state. mode=durable is what Open does
// (synchronous=FULL, WAL truncated after each checkpoint); mode=fast is the
// older synchronous=NORMAL, the baseline it costs against.
func BenchmarkSaveCheckpoint(b *testing.B) {
	for _, n := range []int{235_146, 10_000_000} { // mnist-mlp; a 10M-parameter model
		for _, m := range []struct {
			name string
			mode writeMode
		}{{"durable", durableWrites}, {"fast", fastWrites}} {
			b.Run(fmt.Sprintf("params=%d/mode=%s", n, m.name), func(b *testing.B) {
				ctx := context.Background()
				s, err := open(filepath.Join(b.TempDir(), "crowdtrain.db"), m.mode, true)
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
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
}
