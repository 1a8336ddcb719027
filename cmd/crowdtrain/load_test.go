package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/loadgen"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
)

// The load generator of make bench-load, small: 200 idle and 20 active
// volunteers (each returning a result every 500 ms) from 20 addresses
// stay connected to a real coordinator, leases come, and results are
// applied.
func TestLoadGeneratorHoldsACrowd(t *testing.T) {
	testenv.Long(t, "runs a coordinator process")
	dir := t.TempDir()
	spec := filepath.Join(dir, "job.yaml")
	os.WriteFile(spec, []byte("name: load\nmodel: mnist-mlp\nspot_check: 0\nmax_epochs: 1000\n"), 0o644)
	addr := freeAddr(t)
	startProc(t, "serve", "--addr", addr, "--db", "", "--job", spec, "--hellos-per-second", "1000")
	const idle, active = 200, 20
	cfg := loadgen.Config{Coordinator: "ws://" + addr + "/ws", Idle: idle, Active: active, Every: 500 * time.Millisecond,
		Ramp: 2 * time.Second, Logf: t.Logf}
	for i := range 20 {
		cfg.Binds = append(cfg.Binds, fmt.Sprintf("127.0.0.%d", i+2))
	}
	load, err := loadgen.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { load.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(time.Minute)
	for {
		st := load.Stats()
		if st.IdleConnected == idle && st.ActiveConnected == active && st.Accepted >= 2*active {
			lat, _ := load.Window()
			t.Logf("%d idle and %d active connected, %d leases, %d results, %d accepted, rejected %v; lease p99 %v",
				st.IdleConnected, st.ActiveConnected, st.Leases, st.Results, st.Accepted, st.Rejected, loadgen.Quantile(lat, 0.99))
			break
		}
		if time.Now().After(deadline) {
			_, lastErr := load.Window()
			t.Fatalf("after a minute: %+v (last session error %q)", st, lastErr)
		}
		time.Sleep(200 * time.Millisecond)
	}
	v := waitJob(t, addr, 10*time.Second, "the results to be applied", func(v coordinator.JobView) bool { return v.Version > 0 })
	t.Logf("the job is at version %d", v.Version)
}
