package coordinator

import (
	"sync"

	"github.com/crowdtrain/crowdtrain/dataset"
)

// dataSets holds the data sets the server's jobs train on, by the name
// their specs give. Each is loaded at most once and shared: Fashion-MNIST
// is 55 MB of pixels, and jobs never write to a Set. Safe for concurrent
// use.
type dataSets struct {
	load func(name string) (train, test *dataset.Set, err error)

	mu   sync.Mutex // held while loading, so a name is loaded once
	sets map[string]dataPair
}

type dataPair struct{ train, test *dataset.Set }

// newDataSets returns the server's data sets: train and test, when both
// are set, are `mnist`; load loads any other name (nil: no other).
func newDataSets(train, test *dataset.Set, load func(string) (*dataset.Set, *dataset.Set, error)) *dataSets {
	d := &dataSets{load: load, sets: map[string]dataPair{}}
	if train != nil && test != nil {
		d.sets[dataset.MNIST] = dataPair{train, test}
	}
	return d
}

// get returns the named data set, loading it on first use. A failed load
// is not remembered: installing the package and submitting again works
// without a restart.
func (d *dataSets) get(name string) (train, test *dataset.Set, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if p, ok := d.sets[name]; ok {
		return p.train, p.test, nil
	}
	if d.load == nil {
		return nil, nil, specErr("dataset", "%q is not loaded on this coordinator (it has: %s)", name, d.namesLocked())
	}
	train, test, err = d.load(name)
	if err != nil {
		return nil, nil, &dataLoadError{SpecError{Key: "dataset", Problem: err.Error()}, err}
	}
	d.sets[name] = dataPair{train, test}
	return train, test, nil
}

// dataLoadError is a spec's data set that cannot be loaded: a *SpecError
// naming the `dataset` key (so the API answers 400 with the loader's
// advice), that also wraps the loader's error for errors.Is.
type dataLoadError struct {
	SpecError
	err error
}

func (e *dataLoadError) Unwrap() []error { return []error{&e.SpecError, e.err} }

func (d *dataSets) namesLocked() string {
	out := ""
	for _, n := range dataset.Builtins {
		if _, ok := d.sets[n]; ok {
			if out != "" {
				out += ", "
			}
			out += n
		}
	}
	if out == "" {
		return "none"
	}
	return out
}
