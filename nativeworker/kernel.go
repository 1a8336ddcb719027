package nativeworker

import (
	"fmt"
	"os"
	"strings"

	"github.com/crowdtrain/crowdtrain/nativeworker/openblas"
	"github.com/crowdtrain/crowdtrain/nn"
)

// KernelAuto asks UseKernel for the fastest kernel this machine has.
const KernelAuto = "auto"

// autoOrder is the order KernelAuto tries kernels in (the first one
// present wins): measured on an AMD Zen 5 (docs/BENCHMARKS.md), our AVX-512
// kernel beats OpenBLAS 0.3.21 (which runs its Haswell AVX2 kernels there)
// on both presets, and OpenBLAS beats our AVX2 kernel.
var autoOrder = []string{nn.KernelAVX512, nn.KernelOpenBLAS, nn.KernelAVX2, nn.KernelGonum, nn.KernelGo}

// UseKernel chooses the GEMM kernel that CPU training in this process runs
// on and returns a line saying which and why, for the log. name is
// KernelAuto or one of nn's kernel names; "openblas" loads the host's
// OpenBLAS (an error says where it looked when there is none). With
// KernelAuto, $CROWDTRAIN_KERNEL, when set, wins.
func UseKernel(name string) (string, error) {
	if name == KernelAuto {
		if env := os.Getenv(nn.EnvKernel); env != "" {
			name = env
		}
	}
	var blasNote string
	if name == KernelAuto || name == nn.KernelOpenBLAS {
		lib, err := openblas.Load()
		switch {
		case err == nil:
			nn.RegisterKernel(nn.KernelOpenBLAS, lib.Sgemm)
			blasNote = fmt.Sprintf("OpenBLAS %s (%s)", lib.Path(), lib.Config())
		case name == nn.KernelOpenBLAS:
			return "", fmt.Errorf("--kernel openblas: %w", err)
		default:
			blasNote = fmt.Sprintf("no OpenBLAS: %v", err)
		}
	}
	if name != KernelAuto {
		if err := nn.UseKernel(name); err != nil {
			return "", fmt.Errorf("--kernel %s: %w, or %s where it is installed", name, err, nn.KernelOpenBLAS)
		}
		if name == nn.KernelOpenBLAS {
			return "kernel openblas: " + blasNote, nil
		}
		return "kernel " + name, nil
	}
	have := map[string]bool{}
	for _, k := range nn.Kernels() {
		have[k] = true
	}
	for _, k := range autoOrder {
		if have[k] {
			if err := nn.UseKernel(k); err != nil {
				return "", err
			}
			return fmt.Sprintf("kernel %s (auto, of %s; %s)", k, strings.Join(nn.Kernels(), ", "), blasNote), nil
		}
	}
	return "", fmt.Errorf("no GEMM kernel available (have %v)", nn.Kernels())
}
