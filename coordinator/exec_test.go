package coordinator

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// exec must not return while the loop still runs its closure, even when
// the caller's context ends meanwhile: the closure may read memory the
// caller frees on return (a connection's pooled decode buffer).
func TestExecWaitsForATakenClosureAfterCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := &Job{reqs: make(chan func()), stopped: make(chan struct{})}
		go func() {
			for f := range j.reqs {
				f()
			}
		}()
		defer close(j.reqs)
		ctx, cancel := context.WithCancel(context.Background())
		var finished atomic.Bool
		err := j.exec(ctx, func(*jobState) {
			cancel()
			time.Sleep(time.Second) // still reading the caller's buffer
			finished.Store(true)
		})
		if !finished.Load() {
			t.Fatalf("exec returned (%v) while its closure was still running", err)
		}
	})
}
