//go:build !linux && !windows

package cuda

import (
	"errors"
	"runtime"

	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/worker"
)

// errUnsupported: the CUDA binding is built for Linux and Windows only.
var errUnsupported = errors.New("the CUDA backend runs on Linux and Windows only, not " + runtime.GOOS)

// Backend exists so callers build everywhere; Open always fails here.
type Backend struct{}

func Open(device int) (*Backend, error)         { return nil, errUnsupported }
func (b *Backend) MemoryMB() int                { return 0 }
func OpenWith(o Options) (*Backend, error)      { return nil, errUnsupported }
func (b *Backend) Close() error                 { return nil }
func (b *Backend) Name() string                 { return "cuda" }
func (b *Backend) Threads() int                 { return 1 }
func (b *Backend) Describe() string             { return "unsupported" }
func (b *Backend) Prepare(*nn.Model, int) error { return errUnsupported }
func (b *Backend) Gradient(params, x []float32, labels []int32, grad []float32) (float64, int, error) {
	return 0, 0, errUnsupported
}
func (b *Backend) Steps(worker.SnapshotID, []float32, []float32, []int32, worker.InnerSteps, []float32) (float64, int, error) {
	return 0, 0, errUnsupported
}
