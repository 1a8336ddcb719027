package coordinator

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/nn"
)

// dataSets holds the data sets the server's jobs train on, by what their
// specs name (and, for text, the context the windows are cut to). Each is
// loaded at most once and shared: Fashion-MNIST is 55 MB of pixels, and
// jobs never write to a Set. Safe for concurrent use.
//
// A load runs on a goroutine of its own, outside the lock, and a caller
// waits for it at most timeout: one spec naming a slow or stuck file (a
// network file system that hangs, say) cannot hold up the submission of
// another. Callers asking for the same data share one load.
type dataSets struct {
	load    LoadDataFunc
	timeout time.Duration

	mu      sync.Mutex
	sets    map[string]dataPair
	loading map[string]*dataLoad
}

// dataLoad is a load in flight; done closes when it ends.
type dataLoad struct {
	done        chan struct{}
	train, test *dataset.Set
	err         error
	started     time.Time
}

type dataPair struct{ train, test *dataset.Set }

// LoadDataFunc loads the data a job spec names (dataset.Load, say).
type LoadDataFunc func(d dataset.Spec, o dataset.Options) (train, test *dataset.Set, err error)

// newDataSets returns the server's data sets: train and test, when both
// are set, are `mnist`; load loads any other (nil: no other).
func newDataSets(train, test *dataset.Set, load LoadDataFunc, timeout time.Duration) *dataSets {
	d := &dataSets{load: load, timeout: timeout, sets: map[string]dataPair{}, loading: map[string]*dataLoad{}}
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

// jobDataKey is dataKey with the spec's tokenizer: a tokenized text is
// other data than its bytes, and than the same text under another
// tokenizer.
func jobDataKey(spec jobspec.Spec, context int) string {
	k := dataKey(spec.Dataset, context)
	if spec.Tokenizer != nil {
		k += "/" + tokenizerKey(spec)
	}
	return k
}

// contextOf is the window a text data set is cut to: the model's input
// [t].
func contextOf(spec jobspec.Spec) (int, error) {
	if !spec.Dataset.IsText() {
		return 0, nil
	}
	if len(spec.Model.Input) != 1 {
		return 0, jobspec.Errorf("model.input", "is %s; a model of text reads [t] tokens (the context, e.g. [128])", dataset.ShapeString(spec.Model.Input))
	}
	return spec.Model.Input[0], nil
}

// DataOptions are the options the data spec names is loaded with: the
// context text is cut to and, for a tokenized job (its tokenizer
// prepared: PrepareTokenizer), the tokenizer that encodes it.
func DataOptions(spec jobspec.Spec) (dataset.Options, error) {
	c, err := contextOf(spec)
	if err != nil {
		return dataset.Options{}, err
	}
	o := dataset.Options{Context: c}
	tok, err := jobTokenizer(spec)
	if tok != nil { // never a typed nil in the interface
		o.Tokenizer = tok
	}
	return o, err
}

// CheckData checks that spec's model fits train, as AddJob does, so that
// a command can refuse a job before it changes anything. A model without
// an input takes the shape of train's examples (jobspec.InputFromData).
func CheckData(spec *jobspec.Spec, train *dataset.Set) error {
	if len(spec.Model.Input) == 0 {
		spec.Model.Input = jobspec.InputFromData(train.Shape)
		if err := spec.Validate(); err != nil {
			return err
		}
	}
	model, err := nn.NewModel(spec.Model)
	if err != nil {
		return &jobspec.Error{Key: "model", Problem: err.Error()}
	}
	return fitsData(model, *spec, train)
}

// get returns the data set spec names, loading it on first use. A failed
// load is not remembered: installing the package or fixing the file and
// submitting again works without a restart. A load that takes longer than
// the timeout is refused; it goes on, and a later call takes its result.
func (d *dataSets) get(spec jobspec.Spec) (train, test *dataset.Set, err error) {
	spec.Dataset = JobData(spec) // rljob.go: an RL job's
	opts, err := DataOptions(spec)
	if err != nil {
		return nil, nil, err
	}
	key := jobDataKey(spec, opts.Context)
	d.mu.Lock()
	if p, ok := d.sets[key]; ok {
		d.mu.Unlock()
		return p.train, p.test, nil
	}
	if d.load == nil {
		names := d.namesLocked()
		d.mu.Unlock()
		return nil, nil, jobspec.Errorf("dataset", "%s is not loaded on this coordinator (it has: %s)", spec.Dataset, names)
	}
	l := d.loading[key]
	if l == nil {
		l = &dataLoad{done: make(chan struct{}), started: time.Now()}
		d.loading[key] = l
		go d.run(key, l, spec.Dataset, opts)
	}
	d.mu.Unlock()
	var timeout <-chan time.Time
	if d.timeout > 0 {
		t := time.NewTimer(d.timeout)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-l.done:
	case <-timeout:
		return nil, nil, &jobspec.Error{Key: "dataset", Problem: fmt.Sprintf(
			"loading %s did not finish in %v (it has run for %v): a file that blocks or never ends (a named pipe, a device, "+
				"a hung network file system) or a very large one; name regular files the coordinator can read quickly, "+
				"or start it with a longer --data-load-timeout", spec.Dataset, d.timeout, time.Since(l.started).Round(time.Millisecond))}
	}
	if l.err != nil {
		se := jobspec.Error{Key: "dataset", Problem: l.err.Error()}
		var ke *dataset.KeyError
		if errors.As(l.err, &ke) {
			se = jobspec.Error{Key: ke.Key, Problem: ke.Problem}
		}
		return nil, nil, &dataLoadError{se, l.err}
	}
	return l.train, l.test, nil
}

// run loads one data set and files the result: the set when it loaded,
// nothing when it failed (the next get tries again).
func (d *dataSets) run(key string, l *dataLoad, spec dataset.Spec, o dataset.Options) {
	defer close(l.done)
	defer func() {
		if r := recover(); r != nil { // a loader's bug fails this spec, not the coordinator
			l.train, l.test, l.err = nil, nil, fmt.Errorf("loading %s failed: %v", spec, r)
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		delete(d.loading, key)
		if l.err == nil {
			d.sets[key] = dataPair{l.train, l.test}
		}
	}()
	l.train, l.test, l.err = d.load(spec, o)
}

// dataLoadError is a spec's data set that cannot be loaded: a *jobspec.Error
// naming the `dataset` key (so the API answers 400 with the loader's
// advice), that also wraps the loader's error for errors.Is.
type dataLoadError struct {
	spec jobspec.Error
	err  error
}

func (e *dataLoadError) Error() string   { return e.spec.Error() }
func (e *dataLoadError) Unwrap() []error { return []error{&e.spec, e.err} }

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

// specError is err as a spec error: a data file's problem
// (*dataset.KeyError) on the key it names, any other error on key.
func specError(err error, key string) *jobspec.Error {
	var ke *dataset.KeyError
	if errors.As(err, &ke) {
		return &jobspec.Error{Key: ke.Key, Problem: ke.Problem}
	}
	return &jobspec.Error{Key: key, Problem: err.Error()}
}

// resolveData confines the files a spec submitted over the API names
// (data, tokenizer and init) to the coordinator's data root, resolving relative
// paths against it.
func (s *Server) resolveData(spec *jobspec.Spec) error {
	root := s.cfg.DataRoot
	if root == "" {
		root = "."
	}
	if err := spec.Dataset.ResolveUnder(root); err != nil {
		return specError(err, "dataset")
	}
	if err := resolveTokenizer(spec, root); err != nil {
		return err
	}
	if err := resolveInit(spec, root); err != nil {
		return err
	}
	return resolvePolicy(spec, root) // rljob.go
}
