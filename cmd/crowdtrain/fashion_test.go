package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
)

// requireFashionMNIST skips the test when Debian's dataset-fashion-mnist is
// not installed, saying so, and fails instead when
// CROWDTRAIN_REQUIRE_BROWSER=1 says CI installed its packages.
func requireFashionMNIST(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dataset.FashionMNISTDir, dataset.MNISTTrainImages+".gz")); err == nil {
		return
	}
	msg := "Fashion-MNIST is not installed in " + dataset.FashionMNISTDir + " (apt-get install " + dataset.FashionMNISTPackage + ")"
	testenv.Missing(t, msg)
}

// TestFashionCNNReachesNinetyPercent: `serve --job fashion-cnn` with two
// local workers trains on Fashion-MNIST, not MNIST, and stops at 90% test
// accuracy.
func TestFashionCNNReachesNinetyPercent(t *testing.T) {
	testenv.Long(t, "trains Fashion-MNIST to 90% (about a minute on 2 cores)")
	requireFashionMNIST(t)
	addr := freeAddr(t)
	start := time.Now()
	srv := startProc(t, "serve", "--addr", addr, "--db", "", "--job", "fashion-cnn",
		"--local-workers", "2", "--progress", "2s")
	// The job says which data it trains on: the Fashion-MNIST sets, not
	// MNIST's files of the same names.
	srv.waitLine("name=fashion-cnn", 30*time.Second) // the job-created line's attribute
	// A bound, not a speed: about a minute alone on 2 cores, but a
	// slower machine running the other packages' tests beside it took
	// over 4 minutes.
	v := waitJob(t, addr, 10*time.Minute, "fashion-cnn to finish", ended)
	acc := 0.0
	if v.Eval != nil {
		acc = v.Eval.Accuracy
	}
	t.Logf("fashion-cnn: %s after %s: test accuracy %.4f at version %d, %d examples",
		v.State, time.Since(start).Round(time.Second), acc, v.Version, v.ExamplesSeen)
	if v.State != coordinator.StateDone || acc < 0.90 {
		t.Fatalf("fashion-cnn ended %s (%s) at test accuracy %.4f, want done at >= 0.90; log:\n%s",
			v.State, v.Reason, acc, srv.logText())
	}
	if v.Spec.Dataset.Name != dataset.FashionMNIST {
		t.Fatalf("job's dataset = %q, want %q", v.Spec.Dataset, dataset.FashionMNIST)
	}
}

// Fashion-MNIST never falls back to MNIST, whose files have the same
// names: with MNIST found and Fashion-MNIST's directory empty, `serve --job
// fashion-cnn` exits 2 before training, names the directory and the
// package to install, and creates no database.
func TestServeFashionWithoutItsDataExits2(t *testing.T) {
	empty := t.TempDir()
	t.Setenv(dataset.EnvFashionMNIST, empty)
	mnist, err := dataset.FindMNIST("")
	if err != nil {
		t.Fatalf("MNIST is a declared dependency and must be found: %v", err)
	}
	t.Setenv(dataset.EnvData, mnist)
	db := filepath.Join(t.TempDir(), "ct.db")
	code, _, stderr := runCmd(t, context.Background(), "serve", "--addr", "127.0.0.1:0", "--db", db,
		"--job", "fashion-cnn", "--data", mnist)
	if code != 2 {
		t.Fatalf("exit %d, want 2; stderr:\n%s", code, stderr)
	}
	for _, want := range []string{empty, "apt-get install " + dataset.FashionMNISTPackage} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not say %q:\n%s", want, stderr)
		}
	}
	if _, err := os.Stat(db); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the database %s exists (stat: %v); a failed start must not create it", db, err)
	}
}
