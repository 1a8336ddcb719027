package cuda

import "errors"

// Options configure OpenWith.
type Options struct {
	Device int // CUDA device ordinal
	// LibDirs, when non-nil, are the only folders searched for the CUDA
	// libraries (tests use it); nil searches as package cuda describes.
	LibDirs []string
	// CacheDir keeps compiled kernels between starts; "" means
	// crowdtrain/ under the user's cache folder, "-" no cache.
	CacheDir string
	Logf     func(format string, args ...any)
}

// ErrNoDevice is wrapped by Open's error when the driver is installed but
// there is no usable device.
var ErrNoDevice = errors.New("no usable NVIDIA GPU")
