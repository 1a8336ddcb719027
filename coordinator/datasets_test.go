package coordinator_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/store"
)

// countingLoader serves two small data sets by name and counts the loads
// of each: `mnist` is MNIST's test set (10 shards of 1000) and
// `fashion-mnist` its first 2000 examples under another name (2 shards),
// so a job's shard count tells which one it got.
type countingLoader struct {
	t     *testing.T
	mu    sync.Mutex
	loads map[string]int
}

func (l *countingLoader) load(d dataset.Spec, _ dataset.Options) (*dataset.Set, *dataset.Set, error) {
	name := d.Name
	l.mu.Lock()
	l.loads[name]++
	l.mu.Unlock()
	_, test := loadMNIST(l.t)
	switch name {
	case dataset.MNIST:
		return test, test, nil
	case dataset.FashionMNIST:
		sub := *test
		sub.Name, sub.N = "fashion-mnist-test", 2000
		sub.U8, sub.Labels = test.U8[:2000*test.ExampleSize()], test.Labels[:2000]
		return &sub, &sub, nil
	}
	return nil, nil, errors.New("no such data set")
}

func (l *countingLoader) count(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.loads[name]
}

// Jobs train on the data set their spec names, each data set is loaded
// once and shared by the jobs that name it, and jobs resumed from the
// database load theirs again by name.
func TestJobsLoadTheirDataSetOnceEach(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "ct.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	specs := []jobspec.Spec{
		jobSpec(t, "mnist-mlp", nil),
		jobSpec(t, "fashion-cnn", nil),
		jobSpec(t, "mnist-cnn", nil),
		jobSpec(t, "fashion-cnn", nil),
	}
	wantShards := map[string]int{dataset.MNIST: 10, dataset.FashionMNIST: 2}
	check := func(srv *coordinator.Server, l *countingLoader, when string) {
		t.Helper()
		views, err := srv.JobViews(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(views) != len(specs) {
			t.Fatalf("%s: %d jobs, want %d", when, len(views), len(specs))
		}
		for _, v := range views {
			if want := wantShards[v.Spec.Dataset.Name]; v.Shards != want {
				t.Errorf("%s: job %s (dataset %s) has %d shards, want %d: it got another data set", when, v.ID, v.Spec.Dataset, v.Shards, want)
			}
		}
		for _, name := range []string{dataset.MNIST, dataset.FashionMNIST} {
			if n := l.count(name); n != 1 {
				t.Errorf("%s: %s loaded %d times, want once", when, name, n)
			}
		}
	}

	l1 := &countingLoader{t: t, loads: map[string]int{}}
	srv, err := coordinator.New(coordinator.Config{LoadData: l1.load, Logf: t.Logf, Store: db})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		if _, err := srv.AddJob(s); err != nil {
			t.Fatal(err)
		}
	}
	check(srv, l1, "after AddJob")
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}

	l2 := &countingLoader{t: t, loads: map[string]int{}}
	srv2, err := coordinator.New(coordinator.Config{LoadData: l2.load, Logf: t.Logf, Store: db})
	if err != nil {
		t.Fatal(err)
	}
	defer srv2.Close()
	if _, err := srv2.ResumeJobs(context.Background()); err != nil {
		t.Fatal(err)
	}
	check(srv2, l2, "after ResumeJobs")
}

// A data set that cannot be loaded fails AddJob with an error naming the
// `dataset` key that still wraps the loader's error (its advice), and
// fails ResumeJobs for a stored job that names it.
func TestMissingDataSetIsASpecError(t *testing.T) {
	missing := errors.New("not installed: apt-get install dataset-fashion-mnist")
	_, test := loadMNIST(t)
	load := func(d dataset.Spec, _ dataset.Options) (*dataset.Set, *dataset.Set, error) {
		if d.Name == dataset.FashionMNIST {
			return nil, nil, missing
		}
		return test, test, nil
	}
	db, err := store.Open(filepath.Join(t.TempDir(), "ct.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	srv, err := coordinator.New(coordinator.Config{LoadData: load, Logf: t.Logf, Store: db})
	if err != nil {
		t.Fatal(err)
	}
	_, err = srv.AddJob(jobSpec(t, "fashion-cnn", nil))
	var se *jobspec.Error
	if !errors.As(err, &se) || se.Key != "dataset" || !errors.Is(err, missing) {
		t.Fatalf("AddJob(fashion-cnn) = %v, want a *jobspec.Error for key dataset wrapping the loader's error", err)
	}
	if views, _ := srv.JobViews(context.Background()); len(views) != 0 {
		t.Fatalf("a job was added anyway: %+v", views)
	}
	srv.Close()

	// A job stored while the data was there, resumed where it is not.
	ok := &countingLoader{t: t, loads: map[string]int{}}
	srv, err = coordinator.New(coordinator.Config{LoadData: ok.load, Logf: t.Logf, Store: db})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.AddJob(jobSpec(t, "fashion-cnn", nil)); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	srv, err = coordinator.New(coordinator.Config{LoadData: load, Logf: t.Logf, Store: db})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if _, err := srv.ResumeJobs(context.Background()); !errors.Is(err, missing) {
		t.Fatalf("ResumeJobs = %v, want the loader's error", err)
	}
}
