package native

import (
	"fmt"
	"os"
	"strings"

	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/worker/cpu"
	"github.com/crowdtrain/crowdtrain/worker/cpu/openblas"
)

// KernelAuto asks UseKernel for the fastest kernel this machine has.
const KernelAuto = "auto"

// UseKernel chooses the GEMM kernel that CPU training in this process runs
// on and returns a line saying which and why, for the log. name is
// KernelAuto or one of nn's kernel names; "openblas" loads the host's
// OpenBLAS (an error says where it looked when there is none). With
// KernelAuto, $CROWDTRAIN_KERNEL, when set, wins; otherwise Backends made
// by cpu.New afterwards time the model they are given on every kernel and take
// the fastest (worker/cpu/autokernel.go).
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
		cpu.SetAutoKernel(false)
		if err := nn.UseKernel(name); err != nil {
			return "", fmt.Errorf("--kernel %s: %w, or %s where it is installed", name, err, nn.KernelOpenBLAS)
		}
		if name == nn.KernelOpenBLAS {
			return "kernel openblas: " + blasNote, nil
		}
		return "kernel " + name, nil
	}
	// A provisional kernel until a Backend measures them on its model
	// (cpu.Backend.Prepare); the first of Kernels is our fastest guess.
	names := nn.Kernels()
	if len(names) == 0 {
		return "", fmt.Errorf("no GEMM kernel available")
	}
	if err := nn.UseKernel(names[0]); err != nil {
		return "", err
	}
	cpu.SetAutoKernel(true)
	return fmt.Sprintf("kernel auto (of %s; %s): each job's model is timed on every kernel when it arrives", strings.Join(names, ", "), blasNote), nil
}
