//go:build linux || windows

package driver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ebitengine/purego"
)

// EnvLibs names the environment variable with extra folders to search
// first, in the OS's list form (colons on Linux, semicolons on Windows).
const EnvLibs = "CROWDTRAIN_CUDA_LIBS"

// envDirs are the folders $CROWDTRAIN_CUDA_LIBS names.
func envDirs() []string {
	var dirs []string
	for _, d := range filepath.SplitList(os.Getenv(EnvLibs)) {
		if d != "" {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// LibraryError says a library could not be found or opened.
type LibraryError struct {
	Names []string // the file names tried, best first
	Hint  string   // what to install
	Tried []string // paths tried and why they failed
}

func (e *LibraryError) Error() string {
	return fmt.Sprintf("%s not found: %s (looked in $%s, the system loader's path and %d folders; set %s to the folder that has it)",
		e.Names[0], e.Hint, EnvLibs, len(SearchDirs()), EnvLibs)
}

// SymbolError says a library lacks a function this package needs, which
// means it is too old.
type SymbolError struct {
	Library, Path, Symbol, Hint string
}

func (e *SymbolError) Error() string {
	return fmt.Sprintf("%s (%s) has no symbol %s: %s", e.Library, e.Path, e.Symbol, e.Hint)
}

// library is one opened shared object.
type library struct {
	name   string // the candidate name that matched, e.g. libcuda.so.1
	path   string // where it was opened from
	handle uintptr
	hint   string
}

// openLibrary opens the first of names found in extra folders, by the
// system loader, or in SearchDirs. dirs, when non-nil, replaces every
// search location (tests use it). Files matching the companions patterns
// in a library's folder are opened first, so that the libraries it loads
// by name (cuBLAS's libcublasLt, NVRTC's builtins) are found even where
// that folder is not on the loader's path.
func openLibrary(names []string, dirs []string, hint string, companions ...string) (*library, error) {
	e := &LibraryError{Names: names, Hint: hint}
	try := func(name, path string) *library {
		if filepath.IsAbs(path) {
			for _, pat := range companions {
				m, _ := filepath.Glob(filepath.Join(filepath.Dir(path), pat))
				for _, c := range m {
					_, _ = dlopen(c)
				}
			}
		}
		h, err := dlopen(path)
		if err != nil {
			e.Tried = append(e.Tried, fmt.Sprintf("%s: %v", path, err))
			return nil
		}
		return &library{name: name, path: path, handle: h, hint: hint}
	}
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	if dirs != nil {
		for _, name := range names {
			for _, d := range dirs {
				if p := filepath.Join(d, name); exists(p) {
					if l := try(name, p); l != nil {
						return l, nil
					}
				}
			}
		}
		return nil, e
	}
	for _, name := range names {
		for _, d := range envDirs() {
			if p := filepath.Join(d, name); exists(p) {
				if l := try(name, p); l != nil {
					return l, nil
				}
			}
		}
		if path, ok := systemPath(name); ok {
			if l := try(name, path); l != nil {
				l.path = loadedPath(name, path)
				return l, nil
			}
		}
		for _, d := range SearchDirs() {
			if p := filepath.Join(d, name); exists(p) {
				if l := try(name, p); l != nil {
					return l, nil
				}
			}
		}
	}
	return nil, e
}

// bind points fptr at the named function.
func (l *library) bind(fptr any, symbol string) error {
	addr, err := dlsym(l.handle, symbol)
	if err != nil || addr == 0 {
		return &SymbolError{Library: l.name, Path: l.path, Symbol: symbol, Hint: l.hint}
	}
	purego.RegisterFunc(fptr, addr)
	return nil
}

// bindAll binds each symbol to its function pointer and returns the
// first missing one.
func (l *library) bindAll(syms map[string]any) error {
	var errs []error
	for name, f := range syms {
		if err := l.bind(f, name); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		// Report one, deterministically: the alphabetically first.
		first := errs[0]
		for _, e := range errs[1:] {
			if e.(*SymbolError).Symbol < first.(*SymbolError).Symbol {
				first = e
			}
		}
		return first
	}
	return nil
}

// ErrOutOfMemory is wrapped by every error that reports the device (or
// pinned host memory) running out of memory.
var ErrOutOfMemory = errors.New("out of memory")

// Error is a call that returned a failure code.
type Error struct {
	Func string // the C function, e.g. cuMemAlloc_v2
	Code int
	Name string // the library's name for Code, e.g. CUDA_ERROR_OUT_OF_MEMORY
	oom  bool
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s (%d)", e.Func, e.Name, e.Code) }

// Unwrap lets errors.Is(err, ErrOutOfMemory) find out-of-memory failures.
func (e *Error) Unwrap() error {
	if e.oom {
		return ErrOutOfMemory
	}
	return nil
}

// goString copies a NUL-terminated C string.
func goString(p *byte) string {
	if p == nil {
		return ""
	}
	n := 0
	for *(*byte)(unsafeAdd(p, n)) != 0 {
		n++
	}
	return string(unsafeSlice(p, n))
}
