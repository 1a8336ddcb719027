package coordinator

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/nn"
)

// dataSets holds the data sets the server's jobs train on, by what their
// specs name (and, for text, the context the windows are cut to). Each is
// loaded at most once and shared: Fashion-MNIST is 55 MB of pixels, and
// jobs never write to a Set. Safe for concurrent use.
type dataSets struct {
	load LoadDataFunc

	mu   sync.Mutex // held while loading, so a data set is loaded once
	sets map[string]dataPair
}

type dataPair struct{ train, test *dataset.Set }

// LoadDataFunc loads the data a job spec names (dataset.Load, say).
type LoadDataFunc func(d dataset.Spec, o dataset.Options) (train, test *dataset.Set, err error)

// newDataSets returns the server's data sets: train and test, when both
// are set, are `mnist`; load loads any other (nil: no other).
func newDataSets(train, test *dataset.Set, load LoadDataFunc) *dataSets {
	d := &dataSets{load: load, sets: map[string]dataPair{}}
	if train != nil && test != nil {
		d.sets[dataKey(dataset.Builtin(dataset.MNIST), 0)] = dataPair{train, test}
	}
	return d
}

func dataKey(d dataset.Spec, context int) string {
	if !d.IsText() {
		context = 0
	}
	return fmt.Sprintf("%s@%d", d.Key(), context)
}

// contextOf is the window a text data set is cut to: the model's input
// [t].
func contextOf(spec JobSpec) (int, error) {
	if !spec.Dataset.IsText() {
		return 0, nil
	}
	if len(spec.Model.Input) != 1 {
		return 0, specErr("model.input", "is %s; a model of text reads [t] tokens (the context, e.g. [128])", dataset.ShapeString(spec.Model.Input))
	}
	return spec.Model.Input[0], nil
}

// DataOptions are the options the data spec names is loaded with (the
// context text is cut to).
func DataOptions(spec JobSpec) (dataset.Options, error) {
	c, err := contextOf(spec)
	return dataset.Options{Context: c}, err
}

// CheckData checks that spec's model fits train, as AddJob does, so that
// a command can refuse a job before it changes anything. A model without
// an input takes the shape of train's examples (jobspec.InputFromData).
func CheckData(spec *JobSpec, train *dataset.Set) error {
	if len(spec.Model.Input) == 0 {
		spec.Model.Input = jobspec.InputFromData(train.Shape)
		if err := spec.Validate(); err != nil {
			return err
		}
	}
	model, err := nn.NewModel(spec.Model)
	if err != nil {
		return &SpecError{Key: "model", Problem: err.Error()}
	}
	return fitsData(model, *spec, train)
}

// get returns the data set spec names, loading it on first use. A failed
// load is not remembered: installing the package or fixing the file and
// submitting again works without a restart.
func (d *dataSets) get(spec JobSpec) (train, test *dataset.Set, err error) {
	context, err := contextOf(spec)
	if err != nil {
		return nil, nil, err
	}
	key := dataKey(spec.Dataset, context)
	d.mu.Lock()
	defer d.mu.Unlock()
	if p, ok := d.sets[key]; ok {
		return p.train, p.test, nil
	}
	if d.load == nil {
		return nil, nil, specErr("dataset", "%s is not loaded on this coordinator (it has: %s)", spec.Dataset, d.namesLocked())
	}
	train, test, err = d.load(spec.Dataset, dataset.Options{Context: context})
	if err != nil {
		se := SpecError{Key: "dataset", Problem: err.Error()}
		var ke *dataset.KeyError
		if errors.As(err, &ke) {
			se = SpecError{Key: ke.Key, Problem: ke.Problem}
		}
		return nil, nil, &dataLoadError{se, err}
	}
	d.sets[key] = dataPair{train, test}
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
	var names []string
	for k := range d.sets {
		names = append(names, strings.TrimSuffix(k, "@0"))
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// resolveData confines the files a spec submitted over the API names to
// the coordinator's data root, resolving relative paths against it.
func (s *Server) resolveData(spec *JobSpec) error {
	root := s.cfg.DataRoot
	if root == "" {
		root = "."
	}
	if err := spec.Dataset.ResolveUnder(root); err != nil {
		var ke *dataset.KeyError
		if errors.As(err, &ke) {
			return &SpecError{Key: ke.Key, Problem: ke.Problem}
		}
		return &SpecError{Key: "dataset", Problem: err.Error()}
	}
	return nil
}
