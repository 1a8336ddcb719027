package main

import (
	"fmt"

	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/worker"
	"github.com/crowdtrain/crowdtrain/worker/cpu"
	"github.com/crowdtrain/crowdtrain/worker/cpu/native"
	"github.com/crowdtrain/crowdtrain/worker/cuda"
)

// Backend choices for --backend.
const (
	backendAuto = "auto"
	backendCPU  = "cpu"
	backendCUDA = "cuda"
)

// openBackend returns the backend --backend asks for and a function that
// releases it. auto takes the GPU when one is usable and the CPU
// otherwise, logging which and why; the CPU trains on the GEMM kernel
// --kernel names (see native.UseKernel), also logged.
func openBackend(kind string, device, threads int, kernel string, logf func(string, ...any)) (worker.Backend, func(), error) {
	cpu := func() (worker.Backend, func(), error) {
		if threads < 0 {
			return nil, nil, usagef("threads must be >= 0 (0 = one per CPU), got %d", threads)
		}
		// The kernel first: under auto, the backend measures them.
		msg, err := native.UseKernel(kernel)
		if err != nil {
			return nil, nil, err
		}
		b, err := cpu.New(threads)
		if err != nil {
			return nil, nil, usagef("%v", err)
		}
		b.SetLog(logf)
		logf("backend cpu: %s", msg)
		return b, func() {}, nil
	}
	switch kind {
	case backendCPU:
		return cpu()
	case backendCUDA, backendAuto:
		if device < 0 {
			return nil, nil, usagef("--device must be >= 0, got %d", device)
		}
		g, err := cuda.OpenWith(cuda.Options{Device: device, Logf: logf})
		if err == nil {
			logf("backend cuda: %s", g.Describe())
			return g, func() { g.Close() }, nil
		}
		if kind == backendCUDA {
			return nil, nil, fmt.Errorf("--backend cuda: %w", err)
		}
		logf("backend auto: no usable GPU, training on the CPU: %v", err)
		return cpu()
	}
	return nil, nil, usagef("--backend %q: want auto, cpu or cuda", kind)
}

// workerKind is the kind a worker with backend b says it is in hello:
// gpu on the CUDA backend, native on the CPU.
func workerKind(b worker.Backend) string {
	if _, ok := b.(*cuda.Backend); ok {
		return protocol.KindGPU
	}
	return protocol.KindNative
}

// describeBackend is the start-up log line's backend part.
func describeBackend(b worker.Backend) string {
	if _, ok := b.(*cuda.Backend); ok {
		return b.Name()
	}
	return fmt.Sprintf("%s, %d threads", b.Name(), b.Threads())
}
