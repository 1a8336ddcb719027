//go:build linux

package openblas

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// EnvLib names the environment variable that gives the library's path (or
// a folder holding it); the value "off" keeps OpenBLAS out entirely.
const EnvLib = "CROWDTRAIN_OPENBLAS"

// names are tried in order with the system loader, then in dirs.
var (
	names = []string{"libopenblas.so.0", "libopenblas.so", "libopenblasp.so.0", "libopenblaso.so.0"}
	dirs  = []string{
		"/usr/lib/x86_64-linux-gnu/openblas-openmp", "/usr/lib/x86_64-linux-gnu/openblas-pthread",
		"/usr/lib/aarch64-linux-gnu/openblas-openmp", "/usr/lib/aarch64-linux-gnu/openblas-pthread",
		"/usr/lib64", "/usr/lib", "/usr/local/lib", "/opt/OpenBLAS/lib",
	}
)

// ErrOff is returned by Load when $CROWDTRAIN_OPENBLAS is "off".
var ErrOff = errors.New("OpenBLAS switched off by $" + EnvLib)

// Library is a loaded OpenBLAS. Its Sgemm may be called from several
// goroutines at once.
type Library struct {
	path     string
	config   string
	sgemm    uintptr // Fortran sgemm_: every argument by pointer
	setupErr error
}

var (
	loadOnce sync.Once
	loaded   *Library
	loadErr  error
)

// Load opens OpenBLAS once per process and sets it to one thread. The
// error says where it looked when there is none.
func Load() (*Library, error) {
	loadOnce.Do(func() { loaded, loadErr = load() })
	return loaded, loadErr
}

func load() (*Library, error) {
	env := os.Getenv(EnvLib)
	if env == "off" {
		return nil, ErrOff
	}
	var tried []string
	try := func(path string) (uintptr, bool) {
		h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err != nil {
			tried = append(tried, err.Error()) // dlerror names the path
			return 0, false
		}
		return h, true
	}
	var handle uintptr
	var path string
	var candidates []string
	if env != "" {
		if st, err := os.Stat(env); err == nil && st.IsDir() {
			for _, n := range names {
				candidates = append(candidates, filepath.Join(env, n))
			}
		} else {
			candidates = append(candidates, env)
		}
	} else {
		candidates = append(candidates, names...)
		for _, d := range dirs {
			for _, n := range names {
				candidates = append(candidates, filepath.Join(d, n))
			}
		}
	}
	for _, c := range candidates {
		if h, ok := try(c); ok {
			handle, path = h, c
			break
		}
	}
	if handle == 0 {
		return nil, fmt.Errorf("OpenBLAS not found (install libopenblas0, or set $%s to its path); tried %d paths, first: %s", EnvLib, len(candidates), firstOr(tried, "none"))
	}
	sym := func(name string) uintptr {
		a, err := purego.Dlsym(handle, name)
		if err != nil {
			return 0
		}
		return a
	}
	l := &Library{path: path, sgemm: sym("sgemm_")}
	if l.sgemm == 0 {
		return nil, fmt.Errorf("%s has no sgemm_: not a BLAS library", path)
	}
	// A BLAS without openblas_set_num_threads is not OpenBLAS, and we
	// could not keep it to one thread.
	set := sym("openblas_set_num_threads")
	if set == 0 {
		return nil, fmt.Errorf("%s has no openblas_set_num_threads: not OpenBLAS, and its threads could not be limited", path)
	}
	purego.SyscallN(set, 1)
	if get := sym("openblas_get_config"); get != 0 {
		r, _, _ := purego.SyscallN(get)
		l.config = cString(r)
	}
	if p := loadedPath(path); p != "" {
		l.path = p
	}
	return l, nil
}

// Path is the file that was loaded.
func (l *Library) Path() string { return l.path }

// Config is OpenBLAS's own description of its build (version, core).
func (l *Library) Config() string { return l.config }

// args holds sgemm_'s by-pointer scalars. They must not live on a
// goroutine stack (which may move), so they come from a pool: after
// warm-up a call allocates nothing.
type args struct {
	transA, transB byte
	m, n, k        int32
	lda, ldb, ldc  int32
	alpha, beta    float32
	// ptrs is SyscallN's argument list; a fresh one would escape (to the
	// heap) on every call.
	ptrs [13]uintptr
	keep [3][]float32 // the operands, during a call
}

var argPool = sync.Pool{New: func() any { return new(args) }}

// Sgemm is an nn.SgemmFunc on row-major matrices. The Fortran interface
// is column-major, where row-major C = op(A)·op(B) reads as
// Cᵀ = op(B)ᵀ·op(A)ᵀ: the same call with the operands swapped.
func (l *Library) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m <= 0 || n <= 0 {
		return
	}
	_ = c[(m-1)*ldc+n-1]
	if k <= 0 || alpha == 0 {
		scale(beta, m, n, c, ldc)
		return
	}
	// Bounds, checked here because C code would not.
	if transA {
		_ = a[(k-1)*lda+m-1]
	} else {
		_ = a[(m-1)*lda+k-1]
	}
	if transB {
		_ = b[(n-1)*ldb+k-1]
	} else {
		_ = b[(k-1)*ldb+n-1]
	}
	p := argPool.Get().(*args)
	p.transA, p.transB = trans(transA), trans(transB)
	p.m, p.n, p.k = int32(m), int32(n), int32(k)
	p.lda, p.ldb, p.ldc = int32(lda), int32(ldb), int32(ldc)
	p.alpha, p.beta = alpha, beta
	// The addresses are taken outside the call expression: written inside
	// it, go:uintptrescapes on SyscallN costs an allocation per pointer.
	// That is safe because everything pointed at is on the heap, which
	// does not move: p comes from the pool, and storing a, b and c in it
	// makes escape analysis put them there in every caller; p holds them
	// until the call returns.
	p.keep = [3][]float32{a, b, c}
	for i, v := range [13]unsafe.Pointer{
		unsafe.Pointer(&p.transB), unsafe.Pointer(&p.transA),
		unsafe.Pointer(&p.n), unsafe.Pointer(&p.m), unsafe.Pointer(&p.k),
		unsafe.Pointer(&p.alpha),
		unsafe.Pointer(&b[0]), unsafe.Pointer(&p.ldb),
		unsafe.Pointer(&a[0]), unsafe.Pointer(&p.lda),
		unsafe.Pointer(&p.beta),
		unsafe.Pointer(&c[0]), unsafe.Pointer(&p.ldc),
	} {
		p.ptrs[i] = uintptr(v)
	}
	purego.SyscallN(l.sgemm, p.ptrs[:]...)
	runtime.KeepAlive(p)
	p.keep = [3][]float32{}
	argPool.Put(p)
}

func trans(t bool) byte {
	if t {
		return 'T'
	}
	return 'N'
}

// scale sets C = beta*C (what sgemm does when k = 0).
func scale(beta float32, m, n int, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		for j := range row {
			if beta == 0 {
				row[j] = 0
			} else {
				row[j] *= beta
			}
		}
	}
}

func firstOr(s []string, def string) string {
	if len(s) == 0 {
		return def
	}
	return s[0]
}

// cString copies a NUL-terminated C string.
func cString(p uintptr) string {
	if p == 0 {
		return ""
	}
	ptr := *(**byte)(unsafe.Pointer(&p)) // a C pointer, never moved by Go
	n := 0
	for n < 4096 && *(*byte)(unsafe.Add(unsafe.Pointer(ptr), n)) != 0 {
		n++
	}
	return strings.TrimSpace(string(unsafe.Slice(ptr, n)))
}

// loadedPath returns the file the loader opened for path (the system
// loader resolves bare names and Debian's alternatives links), read from
// /proc/self/maps, or "".
func loadedPath(path string) string {
	if real, err := filepath.EvalSymlinks(path); err == nil && filepath.IsAbs(path) {
		return real
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(maps), "\n") {
		f := strings.Fields(line)
		if len(f) >= 6 && strings.HasPrefix(filepath.Base(f[len(f)-1]), "libopenblas") {
			return f[len(f)-1]
		}
	}
	return ""
}
