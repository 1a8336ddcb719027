package native

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/worker/cpu"
	"github.com/crowdtrain/crowdtrain/worker/cpu/openblas"
)

func TestUseKernel(t *testing.T) {
	old := nn.KernelName()
	defer nn.UseKernel(old)
	t.Setenv(nn.EnvKernel, "")

	msg, err := UseKernel(nn.KernelGonum)
	if err != nil || nn.KernelName() != nn.KernelGonum || !strings.Contains(msg, "gonum") {
		t.Fatalf("UseKernel(gonum) = %q, %v; kernel now %s", msg, err, nn.KernelName())
	}
	if b, _ := cpu.New(1); b.Name() != "cpu-gonum" {
		t.Errorf("backend name %q, want cpu-gonum", b.Name())
	}
	if _, err := UseKernel("no-such-kernel"); err == nil {
		t.Error("UseKernel accepted an unknown kernel")
	}

	// auto: a provisional kernel of those present, and Backends made
	// afterwards measure (worker/cpu/autokernel_test.go).
	msg, err = UseKernel(KernelAuto)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(nn.Kernels(), nn.KernelName()) || !strings.Contains(msg, "kernel auto") {
		t.Errorf("auto: kernel %s (%q), not one of %v", nn.KernelName(), msg, nn.Kernels())
	}
	if b, _ := cpu.New(1); !b.Tunes() {
		t.Error("a Backend made under auto does not measure the kernels")
	}
	if _, err := UseKernel(nn.KernelGonum); err != nil {
		t.Fatal(err)
	}
	if b, _ := cpu.New(1); b.Tunes() {
		t.Error("a Backend made under a fixed kernel measures the kernels")
	}

	// $CROWDTRAIN_KERNEL wins over auto.
	t.Setenv(nn.EnvKernel, nn.KernelGo)
	if _, err := UseKernel(KernelAuto); err != nil || nn.KernelName() != nn.KernelGo {
		t.Errorf("auto with $%s=go: kernel %s, err %v", nn.EnvKernel, nn.KernelName(), err)
	}
	t.Setenv(nn.EnvKernel, "")

	// openblas: used where installed, otherwise an error that says so.
	msg, err = UseKernel(nn.KernelOpenBLAS)
	if _, lerr := openblas.Load(); lerr != nil {
		if err == nil || !strings.Contains(err.Error(), "--kernel openblas") {
			t.Errorf("without OpenBLAS (%v), UseKernel(openblas) = %q, %v", lerr, msg, err)
		}
		if !errors.Is(lerr, openblas.ErrOff) && !strings.Contains(lerr.Error(), "install") {
			t.Errorf("the load error does not say what to install: %v", lerr)
		}
		return
	}
	if err != nil || nn.KernelName() != nn.KernelOpenBLAS {
		t.Errorf("UseKernel(openblas) = %q, %v; kernel now %s", msg, err, nn.KernelName())
	}
}
