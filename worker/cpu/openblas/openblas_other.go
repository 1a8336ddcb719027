//go:build !linux

package openblas

import "errors"

// EnvLib names the environment variable that gives the library's path; see
// the Linux build.
const EnvLib = "CROWDTRAIN_OPENBLAS"

// ErrOff is returned by Load when $CROWDTRAIN_OPENBLAS is "off".
var ErrOff = errors.New("OpenBLAS switched off by $" + EnvLib)

// Library is a loaded OpenBLAS; none can be loaded on this platform.
type Library struct{}

// Load reports that this build cannot load OpenBLAS.
func Load() (*Library, error) {
	return nil, errors.New("OpenBLAS is only loaded on Linux in this build")
}

// Path is the file that was loaded.
func (l *Library) Path() string { return "" }

// Config is OpenBLAS's own description of its build.
func (l *Library) Config() string { return "" }

// Sgemm panics: there is no library on this platform.
func (l *Library) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	panic("openblas: no library on this platform")
}
