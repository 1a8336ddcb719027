//go:build unix

package nn

import (
	"math/rand/v2"
	"syscall"
	"testing"
	"time"
)

func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestCPUPerStepLocal(t *testing.T) {
	m := mustPreset(t, "charlm")
	r := rand.New(rand.NewPCG(1, 2))
	params := make([]float32, m.NumParams)
	grad := make([]float32, m.NumParams)
	m.Init(params, 1)
	x, labels := randomData(r, m, 32)
	ws := m.NewWorkspace(32)
	for i := 0; i < 2; i++ {
		m.Gradient(ws, params, x, labels, grad)
	}
	const n = 8
	c0, w0 := cpuNow(), time.Now()
	for i := 0; i < n; i++ {
		m.Gradient(ws, params, x, labels, grad)
		SGDStep(params, grad, 0.01)
	}
	c, w := cpuNow()-c0, time.Since(w0)
	t.Logf("ours: cpu %d ms/step, wall %d ms/step, %.1f sequences per cpu-second", c.Milliseconds()/n, w.Milliseconds()/n, float64(32*n)/c.Seconds())
}
