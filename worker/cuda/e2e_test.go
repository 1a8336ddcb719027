//go:build linux && cgo

package cuda_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/worker"
	"github.com/crowdtrain/crowdtrain/worker/cuda"
)

// A real coordinator on loopback and one GPU worker train mnist-mlp on real
// MNIST to the job's 97% target.
func TestGPUWorkerTrainsMLPTo97(t *testing.T) {
	testenv.Long(t, "trains MNIST end to end")
	b, err := cuda.Open(0)
	if err != nil {
		t.Skipf("no usable GPU: %v", err)
	}
	defer b.Close()
	t.Logf("GPU: %s", b.Describe())
	train, test, err := dataset.LoadMNIST("")
	if err != nil {
		t.Fatalf("MNIST: %v", err)
	}
	srv, err := coordinator.New(coordinator.Config{Train: train, Test: test, Logf: t.Logf, IdleRetry: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	spec, err := jobspec.Load("mnist-mlp")
	if err != nil {
		t.Fatal(err)
	}
	job, err := srv.AddJob(spec)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	w, err := worker.New(worker.Config{
		Coordinator: "ws" + strings.TrimPrefix(hs.URL, "http") + "/ws", Backend: b, Kind: protocol.KindGPU, Client: "test", Logf: t.Logf,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = w.Run(ctx) }()
	defer func() { cancel(); wg.Wait() }()

	start := time.Now()
	var v coordinator.JobView
	for {
		resp, err := http.Get(hs.URL + "/api/v1/jobs/" + job.ID)
		if err != nil {
			t.Fatal(err)
		}
		json.NewDecoder(resp.Body).Decode(&v)
		resp.Body.Close()
		if v.State != coordinator.StateRunning {
			break
		}
		if time.Since(start) > 4*time.Minute {
			t.Fatalf("not done after 4 minutes: epoch %d, version %d, eval %+v", v.Epoch, v.Version, v.Eval)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if v.State != coordinator.StateDone || v.Eval == nil || v.Eval.Accuracy < 0.97 {
		t.Fatalf("job ended %s (%s) with eval %+v, want done at >= 0.97", v.State, v.Reason, v.Eval)
	}
	if v.Rejections["invalid"] != 0 {
		t.Errorf("%d results rejected as invalid", v.Rejections["invalid"])
	}
	s := w.Stats()
	el := time.Since(start)
	t.Logf("mnist-mlp on the GPU: accuracy %.4f at version %d, epoch %d, %d examples in %v (%.0f examples/s), %d accepted, %d rejected",
		v.Eval.Accuracy, v.Eval.Version, v.Epoch, v.ExamplesSeen, el.Round(time.Millisecond), float64(s.Computed)/el.Seconds(), s.Accepted, s.Rejected)
}
