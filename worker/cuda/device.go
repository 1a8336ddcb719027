//go:build linux || windows

package cuda

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"

	"github.com/crowdtrain/crowdtrain/worker/cuda/driver"
)

//go:embed kernels.cu
var kernelSource string

// thread runs closures on one goroutine locked to its OS thread: the CUDA
// context is current on that thread only, and cuBLAS's handle belongs to it.
type thread struct {
	calls chan func()
	done  chan struct{}
}

func startThread() *thread {
	t := &thread{calls: make(chan func()), done: make(chan struct{})}
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		defer close(t.done)
		for f := range t.calls {
			f()
		}
	}()
	return t
}

// do runs f on the thread and waits for it.
func (t *thread) do(f func() error) error {
	errc := make(chan error, 1)
	t.calls <- func() {
		defer func() {
			if r := recover(); r != nil {
				errc <- fmt.Errorf("cuda: panic on the device thread: %v", r)
			}
		}()
		errc <- f()
	}
	return <-errc
}

func (t *thread) stop() {
	close(t.calls)
	<-t.done
}

// kernelNames are the kernels of kernels.cu the backend launches.
var kernelNames = []string{
	"add_bias", "relu_forward", "relu_backward", "im2row", "row2im", "conv_output", "conv_grad_rows",
	"column_sums", "maxpool_forward", "maxpool_backward", "softmax_xent", "sum_losses", "sgd_step", "pseudo_gradient", "adamw_step",
	"grad_sumsq_partial", "clip_scale", "scale_by",
	"embedding_forward", "embedding_backward_gather", "embedding_backward_scatter", "embedding_backward_positions",
	"layernorm_forward", "layernorm_backward", "layernorm_param_grads", "gelu_forward", "gelu_backward",
	"attention_softmax", "attention_softmax_backward", "add", "dropout_apply",
}

// chooseArch picks what to compile for: the device's own architecture when
// NVRTC supports it, else the newest it supports below the device's. It
// returns the architecture (e.g. 90) and whether to ask for machine code
// (cubin runs only on its own major architecture; PTX is JIT-compiled by
// the driver for any newer one).
func chooseArch(major, minor int, supported []int, hasCUBIN bool) (arch int, cubin bool, err error) {
	cc := major*10 + minor
	arch = cc
	if len(supported) > 0 {
		arch = 0
		for _, a := range supported {
			if a <= cc && a > arch {
				arch = a
			}
		}
		if arch == 0 {
			return 0, false, fmt.Errorf("the GPU's compute capability %d.%d is older than any this NVRTC compiles for (oldest %d.%d): use an older NVRTC (set %s) or a newer GPU",
				major, minor, slices.Min(supported)/10, slices.Min(supported)%10, driver.EnvLibs)
		}
	}
	return arch, hasCUBIN && arch/10 == major, nil
}

// compileKernels compiles kernels.cu for the device, or reads the result of
// an earlier compile from cacheDir (when not empty), and loads it.
func compileKernels(d *driver.Driver, nv *driver.NVRTC, info driver.DeviceInfo, driverVersion int, cacheDir string, logf func(string, ...any)) (driver.Module, error) {
	arch, cubin, err := chooseArch(info.Major, info.Minor, nv.SupportedArchs(), nv.HasCUBIN())
	if err != nil {
		return 0, err
	}
	for _, asCUBIN := range []bool{cubin, false} {
		opts := []string{fmt.Sprintf("--gpu-architecture=compute_%d", arch), "--std=c++14"}
		format := "ptx"
		if asCUBIN {
			opts[0] = fmt.Sprintf("-arch=sm_%d", arch)
			format = "cubin"
		}
		key := sha256.Sum256(fmt.Appendf(nil, "%s\x00%v\x00nvrtc %d.%d\x00driver %d\x00%s", kernelSource, opts, nv.Major, nv.Minor, driverVersion, format))
		cacheFile := ""
		if cacheDir != "" {
			cacheFile = filepath.Join(cacheDir, "kernels-"+hex.EncodeToString(key[:12])+"."+format)
		}
		image, err := os.ReadFile(cacheFile)
		cached := err == nil && len(image) > 0
		if !cached {
			image, err = nv.Compile(kernelSource, "kernels.cu", opts, asCUBIN)
			if err != nil {
				return 0, fmt.Errorf("compiling the kernels with NVRTC %d.%d (%s) for sm_%d: %w", nv.Major, nv.Minor, nv.Path, arch, err)
			}
		}
		m, err := d.LoadModule(image)
		if err != nil {
			var ce *driver.Error
			if errors.As(err, &ce) && asCUBIN {
				logf("cuda: the driver refused the cubin (%v); trying PTX", err)
				continue
			}
			if errors.As(err, &ce) && (ce.Code == 222 || ce.Code == 218) { // UNSUPPORTED_PTX_VERSION, INVALID_PTX
				return 0, fmt.Errorf("the driver (CUDA %d.%d) cannot load PTX from NVRTC %d.%d: %w; update the NVIDIA driver, or point %s at an NVRTC no newer than %d.%d",
					driverVersion/1000, driverVersion%1000/10, nv.Major, nv.Minor, err, driver.EnvLibs, driverVersion/1000, driverVersion%1000/10)
			}
			return 0, fmt.Errorf("loading the compiled kernels: %w", err)
		}
		if !cached && cacheFile != "" {
			if os.MkdirAll(cacheDir, 0o755) == nil {
				tmp := cacheFile + ".tmp"
				if os.WriteFile(tmp, image, 0o644) == nil {
					_ = os.Rename(tmp, cacheFile)
				}
			}
		}
		how := "compiled"
		if cached {
			how = "cached"
		}
		logf("cuda: kernels %s as %s for sm_%d by NVRTC %d.%d", how, format, arch, nv.Major, nv.Minor)
		return m, nil
	}
	return 0, errors.New("no kernel image the driver accepts")
}
