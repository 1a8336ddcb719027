package dataset

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
)

// Data spec types: the `type` of a job spec's dataset object.
const (
	TypeIDX  = "idx"
	TypeNPY  = "npy"
	TypeText = "text"
	TypeTask = "task"
)

// Types lists the data spec types in documentation order.
var Types = []string{TypeIDX, TypeNPY, TypeText, TypeTask}

// DefaultValFraction is the share of a text held out for validation when
// the spec does not say.
const DefaultValFraction = 0.05

// Spec is a job spec's `dataset`: a built-in data set by Name, or files of
// a Type. In JSON and YAML it is a string (the built-in name) or an object
// {type: idx, train_images, train_labels, test_images, test_labels},
// {type: npy, train_x, train_y, test_x, test_y}, {type: text, path,
// glob, val_fraction} or {type: task, name, digits, length, examples,
// seed, val_fraction}.
type Spec struct {
	Name string `json:"-"`
	Type string `json:"type"`

	TrainImages string `json:"train_images,omitempty"`
	TrainLabels string `json:"train_labels,omitempty"`
	TestImages  string `json:"test_images,omitempty"`
	TestLabels  string `json:"test_labels,omitempty"`

	TrainX string `json:"train_x,omitempty"`
	TrainY string `json:"train_y,omitempty"`
	TestX  string `json:"test_x,omitempty"`
	TestY  string `json:"test_y,omitempty"`

	Path string `json:"path,omitempty"`
	// Glob selects the files of a text tree under Path (CheckGlob); without
	// it a directory's top-level files are read as one text.
	Glob        string  `json:"glob,omitempty"`
	ValFraction float64 `json:"val_fraction,omitempty"`

	// Type task: the problems of a verifiable task (package rltask)
	// written as text, Examples of them from the stream TaskSeed.
	Task     string `json:"name,omitempty"`
	Digits   int    `json:"digits,omitempty"`
	Length   int    `json:"length,omitempty"`
	Examples int    `json:"examples,omitempty"`
	TaskSeed uint64 `json:"seed,omitempty"`
}

// Builtin returns the spec of the built-in data set name.
func Builtin(name string) Spec { return Spec{Name: name} }

// SpecKeys lists the keys of each type's object, after `type`.
var SpecKeys = map[string][]string{
	TypeIDX:  {"train_images", "train_labels", "test_images", "test_labels"},
	TypeNPY:  {"train_x", "train_y", "test_x", "test_y"},
	TypeText: {"path", "glob", "val_fraction"},
	TypeTask: {"name", "digits", "length", "examples", "seed", "path", "val_fraction"},
}

// File is one file a spec names: its key and a pointer to its path.
type File struct {
	Key  string
	Path *string
}

// Files lists the files the spec names, by key, in documentation order
// (all of them, whatever the type, so a misplaced one can be reported).
func (s *Spec) Files() []File {
	return []File{
		{"train_images", &s.TrainImages}, {"train_labels", &s.TrainLabels},
		{"test_images", &s.TestImages}, {"test_labels", &s.TestLabels},
		{"train_x", &s.TrainX}, {"train_y", &s.TrainY}, {"test_x", &s.TestX}, {"test_y", &s.TestY},
		{"path", &s.Path},
	}
}

// IsText reports whether the spec is text (a language model's data).
func (s Spec) IsText() bool {
	return s.Type == TypeText || s.Type == TypeTask || s.Name == BibleKJV || s.Name == GoSource
}

// ReadsTextFiles reports whether the spec is text read from files (type
// text, bible-kjv, go-source), which a command's --data may replace; a
// task's text is generated.
func (s Spec) ReadsTextFiles() bool { return s.IsText() && s.Type != TypeTask }

// IsImageBuiltin reports whether the spec is a built-in 28x28 grey image
// set.
func (s Spec) IsImageBuiltin() bool { return s.Name == MNIST || s.Name == FashionMNIST }

// String is the built-in name, or the type and files.
func (s Spec) String() string {
	if s.Name != "" {
		return s.Name
	}
	parts := []string{s.Type}
	for _, f := range s.Files() {
		if *f.Path != "" {
			parts = append(parts, f.Key+"="+*f.Path)
		}
	}
	if s.Glob != "" {
		parts = append(parts, "glob="+s.Glob)
	}
	if s.Type == TypeTask {
		parts = append(parts, s.taskString())
	}
	return strings.Join(parts, " ")
}

// Key identifies the data a spec loads, for sharing one load between jobs.
func (s Spec) Key() string {
	b, _ := json.Marshal(s)
	return string(b)
}

// MarshalJSON writes a built-in data set as its name, others as objects.
func (s Spec) MarshalJSON() ([]byte, error) {
	if s.Name != "" {
		return json.Marshal(s.Name)
	}
	type plain Spec
	return json.Marshal(plain(s))
}

// UnmarshalJSON reads a name or an object (stored specs; jobspec parses
// spec files with its own key checks).
func (s *Spec) UnmarshalJSON(b []byte) error {
	var name string
	if err := json.Unmarshal(b, &name); err == nil {
		*s = Spec{Name: name}
		return nil
	}
	type plain Spec
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return fmt.Errorf("dataset: want a built-in name or an object with a type: %w", err)
	}
	*s = Spec(p)
	return nil
}

// Validate checks the spec's keys: a known built-in name, or a known type
// with every file of that type named and no key of another type. Errors
// name the key as "dataset" or "dataset.KEY".
func (s Spec) Validate() error {
	if s.Name != "" {
		if s.Type != "" {
			return &KeyError{Key: "dataset", Problem: "a built-in name has no type"}
		}
		if !slices.Contains(Builtins, s.Name) {
			return &KeyError{Key: "dataset", Problem: fmt.Sprintf("%q is not a built-in data set (want one of %s, or an object with type %s)",
				s.Name, strings.Join(Builtins, ", "), strings.Join(Types, ", "))}
		}
		return nil
	}
	keys, ok := SpecKeys[s.Type]
	if !ok {
		return &KeyError{Key: "dataset.type", Problem: fmt.Sprintf("%q is not a data set type (want %s)", s.Type, strings.Join(Types, ", "))}
	}
	for _, f := range s.Files() {
		mine := slices.Contains(keys, f.Key)
		switch {
		case mine && *f.Path == "" && s.Type != TypeTask: // a task's path is jsonl's alone (validateTask)
			return &KeyError{Key: "dataset." + f.Key, Problem: fmt.Sprintf("missing: type %s needs %s", s.Type, strings.Join(fileKeys(keys), ", "))}
		case !mine && *f.Path != "":
			return &KeyError{Key: "dataset." + f.Key, Problem: fmt.Sprintf("is not a key of type %s (its keys: %s)", s.Type, strings.Join(keys, ", "))}
		}
	}
	if err := s.validateTask(); err != nil {
		return err
	}
	hasVal := s.Type == TypeText || s.Type == TypeTask
	switch {
	case hasVal && !(s.ValFraction > 0 && s.ValFraction <= 0.5):
		return &KeyError{Key: "dataset.val_fraction", Problem: fmt.Sprintf("must be in (0, 0.5], got %v", s.ValFraction)}
	case !hasVal && s.ValFraction != 0:
		return &KeyError{Key: "dataset.val_fraction", Problem: fmt.Sprintf("is a key of types text and task, not %s", s.Type)}
	case s.Type != TypeText && s.Glob != "":
		return &KeyError{Key: "dataset.glob", Problem: fmt.Sprintf("is a key of type text, not %s", s.Type)}
	case s.Glob != "":
		if err := CheckGlob(s.Glob); err != nil {
			return &KeyError{Key: "dataset.glob", Problem: err.Error()}
		}
	}
	return nil
}

// fileKeys are the keys that name files: all but glob and val_fraction.
func fileKeys(keys []string) []string {
	return slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return k == "val_fraction" || k == "glob" })
}

// KeyError is a data spec or data file problem, naming the spec key
// ("dataset", "dataset.train_x") it comes from.
type KeyError struct {
	Key     string
	Problem string
	Err     error // the underlying error, for errors.Is
}

func (e *KeyError) Error() string { return e.Key + ": " + e.Problem }
func (e *KeyError) Unwrap() error { return e.Err }

// fileError names the key and file of a data file that cannot be used.
func fileError(key, path string, err error, fix string) error {
	var problem string
	var nr *NotRegularError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		problem = fmt.Sprintf("%s does not exist", path)
	case errors.As(err, &nr):
		problem = nr.Error()
	default:
		var pe *fs.PathError
		if errors.As(err, &pe) && pe.Path == path {
			problem = fmt.Sprintf("%s: %v", path, pe.Err)
		} else {
			problem = fmt.Sprintf("%s: %v", path, err)
		}
	}
	if fix != "" {
		problem += ". Fix: " + fix
	}
	if key != "dataset" {
		key = "dataset." + key
	}
	return &KeyError{Key: key, Problem: problem, Err: err}
}

// Resolve makes the spec's relative paths relative to dir (the directory
// of the spec file that names them).
func (s *Spec) Resolve(dir string) {
	for _, f := range s.Files() {
		if *f.Path != "" && !filepath.IsAbs(*f.Path) {
			*f.Path = filepath.Join(dir, *f.Path)
		}
	}
}

// ResolveUnder resolves the spec's paths against root, as a coordinator
// does for a spec submitted over its API: a relative path is joined to
// root, and every path must name an existing file (or, for text, a
// directory) inside root once symlinks are followed, so a submitted spec
// cannot read other files of the coordinator's machine, and a regular one
// (not a FIFO or a device, which could block a load or never end it). Paths become
// absolute and symlink-free.
func (s *Spec) ResolveUnder(root string) error {
	if s.Name != "" {
		return nil
	}
	absRoot, err := filepath.Abs(root)
	if err != nil {
		return fmt.Errorf("dataset: data root %s: %w", root, err)
	}
	realRoot, err := filepath.EvalSymlinks(absRoot)
	if err != nil {
		return fmt.Errorf("dataset: data root %s: %w (start the coordinator with --data-root naming an existing directory)", root, err)
	}
	for _, f := range s.Files() {
		if *f.Path == "" {
			continue
		}
		real, err := resolveUnder(absRoot, realRoot, "dataset."+f.Key, *f.Path, s.Type == TypeText && f.Key == "path")
		if err != nil {
			return err
		}
		*f.Path = real
	}
	return nil
}

// ResolveFileUnder resolves one file a spec names under key (such as
// "tokenizer") against root, by the rules of Spec.ResolveUnder: inside
// root once symlinks are followed, existing, and a regular file (or a
// directory, with dirOK). It returns the absolute, symlink-free path;
// errors are *KeyError naming key.
func ResolveFileUnder(root, key, path string, dirOK bool) (string, error) {
	absRoot, err := filepath.Abs(root)
	if err != nil {
		return "", fmt.Errorf("%s: data root %s: %w", key, root, err)
	}
	realRoot, err := filepath.EvalSymlinks(absRoot)
	if err != nil {
		return "", fmt.Errorf("%s: data root %s: %w (start the coordinator with --data-root naming an existing directory)", key, root, err)
	}
	return resolveUnder(absRoot, realRoot, key, path, dirOK)
}

// resolveUnder is one path of ResolveUnder: key is the full spec key.
func resolveUnder(absRoot, realRoot, key, path string, dirOK bool) (string, error) {
	p := path
	if !filepath.IsAbs(p) {
		p = filepath.Join(absRoot, p)
	}
	p = filepath.Clean(p)
	outside := fmt.Sprintf("%s is outside the coordinator's data root %s: name a file under it (or start the coordinator with another --data-root)", path, absRoot)
	if !within(absRoot, p) && !within(realRoot, p) {
		return "", &KeyError{Key: key, Problem: outside}
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", rekey(fileError("", path, err, "name a file under the coordinator's data root "+absRoot), key)
	}
	if !within(realRoot, real) {
		return "", &KeyError{Key: key, Problem: fmt.Sprintf("%s leads (through a symlink) to %s, outside the coordinator's data root %s", path, real, absRoot)}
	}
	// A FIFO, a device or a socket could block the load for ever or
	// never end: refused here, before anything opens it.
	if err := CheckRegular(real, dirOK); err != nil {
		return "", rekey(fileError("", path, err, "name a regular file under the coordinator's data root "+absRoot), key)
	}
	return real, nil
}

// rekey gives a *KeyError from fileError the full key it belongs to.
func rekey(err error, key string) error {
	if ke, ok := err.(*KeyError); ok {
		ke.Key = key
	}
	return err
}

// within reports whether path is root or below it (both clean, absolute).
func within(root, path string) bool {
	rel, err := filepath.Rel(root, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}
