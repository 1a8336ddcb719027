package nativeworker

import (
	"errors"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/nativeworker/openblas"
	"github.com/crowdtrain/crowdtrain/nn"
)

func TestUseKernel(t *testing.T) {
	old := nn.KernelName()
	defer nn.UseKernel(old)
	t.Setenv(nn.EnvKernel, "")

	msg, err := UseKernel(nn.KernelGonum)
	if err != nil || nn.KernelName() != nn.KernelGonum || !strings.Contains(msg, "gonum") {
		t.Fatalf("UseKernel(gonum) = %q, %v; kernel now %s", msg, err, nn.KernelName())
	}
	if b, _ := New(1); b.Name() != "cpu-gonum" {
		t.Errorf("backend name %q, want cpu-gonum", b.Name())
	}
	if _, err := UseKernel("no-such-kernel"); err == nil {
		t.Error("UseKernel accepted an unknown kernel")
	}

	// auto takes the first of autoOrder that is present.
	msg, err = UseKernel(KernelAuto)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, k := range nn.Kernels() {
		have[k] = true
	}
	for _, k := range autoOrder {
		if have[k] {
			if nn.KernelName() != k {
				t.Errorf("auto chose %s (%q), want %s from %v", nn.KernelName(), msg, k, nn.Kernels())
			}
			break
		}
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
