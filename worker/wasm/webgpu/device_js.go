//go:build js && wasm

package webgpu

import (
	_ "embed"
	"errors"
	"fmt"
	"math"
	"strings"
	"syscall/js"
	"unsafe"

	"github.com/crowdtrain/crowdtrain/worker/gpu"
)

//go:embed kernels.wgsl
var kernelSource string

//go:embed sums.wgsl
var sumsSource string

// ErrDevice marks errors of the GPU itself (a lost device, a failed
// validation): the worker stops using it and trains on the CPU.
var ErrDevice = errors.New("webgpu: the GPU failed")

// kernelNames are the entry points of the kernels the backend dispatches.
var kernelNames = []string{
	"add_bias", "relu_forward", "relu_backward", "im2row", "row2im", "conv_output", "conv_grad_rows",
	"column_sums", "maxpool_forward", "maxpool_backward", "softmax_xent", "accumulate_rows",
	"sgd_step", "pseudo_gradient", "adamw_step", "grad_sumsq_partial", "clip_scale", "scale_by",
	"embedding_forward", "embedding_backward_gather", "embedding_backward_scatter", "embedding_backward_positions",
	"layernorm_forward", "layernorm_backward", "layernorm_param_grads", "gelu_forward", "gelu_backward",
	"attention_softmax", "attention_softmax_backward", "add", "dropout_apply", "fill", "copy", "gemm",
}

// maxSlots is the dispatches recorded before they are submitted: the
// uniform buffer holds one argument slot per dispatch of a submission.
const maxSlots = 1024

// device is a GPUDevice with the kernels compiled, and one arena: the
// WebGPU side of worker/gpu's Device. Its methods must be called from one
// goroutine, never from a JS callback (they wait for the GPU's promises).
type device struct {
	dev, queue js.Value
	pipelines  map[string]js.Value
	layout     js.Value // the bind group layout every kernel shares

	arena, uniform, readback js.Value
	bindGroup                js.Value
	arenaFloats, readFloats  int

	enc, pass js.Value // the open command encoder and compute pass
	slots     int      // dispatches recorded in them
	args      []byte   // their arguments, slot after slot
	argsJS    js.Value // Uint8Array the arguments go up through
	offsets   js.Value // Uint32Array: slot i's dynamic offset i*slotBytes
	stage     js.Value // Uint8Array uploads and downloads go through

	failed string // the first uncaptured error or the loss, once seen

	rowLoss []float32 // the loss sums read back (Losses)
	rowHit  []int32
}

var _ gpu.Device = (*device)(nil)

// Name is "WebGPU".
func (d *device) Name() string { return "WebGPU" }

// openDevice compiles the kernels on dev, a GPUDevice.
func openDevice(dev js.Value) (*device, error) {
	if dev.Type() != js.TypeObject {
		return nil, errors.New("webgpu: no GPU device was handed over")
	}
	d := &device{dev: dev, queue: dev.Get("queue"), pipelines: map[string]js.Value{}}
	d.watch()
	module := dev.Call("createShaderModule", map[string]any{"code": kernelSource + "\n" + sumsSource, "label": "crowdtrain kernels"})
	info, err := await(module.Call("getCompilationInfo"))
	if err != nil {
		return nil, fmt.Errorf("webgpu: compiling the kernels: %w", err)
	}
	if msgs := compileErrors(info); msgs != "" {
		return nil, fmt.Errorf("webgpu: the kernels do not compile: %s", msgs)
	}
	stage := js.Global().Get("GPUShaderStage").Get("COMPUTE").Int()
	d.layout = dev.Call("createBindGroupLayout", map[string]any{"entries": []any{
		map[string]any{"binding": 0, "visibility": stage, "buffer": map[string]any{"type": "storage"}},
		map[string]any{"binding": 1, "visibility": stage, "buffer": map[string]any{"type": "uniform", "hasDynamicOffset": true}},
	}})
	pl := dev.Call("createPipelineLayout", map[string]any{"bindGroupLayouts": []any{d.layout}})
	dev.Call("pushErrorScope", "validation")
	for _, name := range kernelNames {
		d.pipelines[name] = dev.Call("createComputePipeline", map[string]any{
			"label": name, "layout": pl, "compute": map[string]any{"module": module, "entryPoint": name},
		})
	}
	if e, err := await(dev.Call("popErrorScope")); err != nil {
		return nil, fmt.Errorf("webgpu: creating the pipelines: %w", err)
	} else if e.Truthy() {
		return nil, fmt.Errorf("webgpu: creating the pipelines: %s", e.Get("message").String())
	}
	usage := js.Global().Get("GPUBufferUsage")
	d.uniform = dev.Call("createBuffer", map[string]any{
		"size": maxSlots * slotBytes, "usage": usage.Get("UNIFORM").Int() | usage.Get("COPY_DST").Int(), "label": "kernel arguments"})
	d.args = make([]byte, maxSlots*slotBytes)
	d.argsJS = js.Global().Get("Uint8Array").New(len(d.args))
	d.offsets = js.Global().Get("Uint32Array").New(maxSlots)
	for i := range maxSlots {
		d.offsets.SetIndex(i, i*slotBytes)
	}
	return d, d.err()
}

// watch records the device's loss and its uncaptured errors, which the
// next sync point (download) reports.
func (d *device) watch() {
	var onLost, onError js.Func
	onLost = js.FuncOf(func(_ js.Value, args []js.Value) any {
		if d.failed == "" {
			d.failed = "the GPU device was lost"
			if len(args) > 0 && args[0].Get("message").Truthy() {
				d.failed += ": " + args[0].Get("message").String()
			}
		}
		return nil
	})
	onError = js.FuncOf(func(_ js.Value, args []js.Value) any {
		if d.failed == "" && len(args) > 0 {
			d.failed = "GPU error: " + args[0].Get("error").Get("message").String()
		}
		return nil
	})
	d.dev.Get("lost").Call("then", onLost)
	d.dev.Call("addEventListener", "uncapturederror", onError)
}

func (d *device) err() error {
	if d.failed != "" {
		return fmt.Errorf("%w: %s", ErrDevice, d.failed)
	}
	return nil
}

// Reserve replaces the device memory with an arena of bytes, a readback
// buffer of readBytes, and returns the arena's start: 0, since pointers
// are places in it.
func (d *device) Reserve(bytes, readBytes int) (gpu.Ptr, error) {
	return 0, d.setArena((bytes+3)/4, (readBytes+3)/4)
}

// setArena replaces the device memory with an arena of floats and a
// readback buffer of readFloats.
func (d *device) setArena(floats, readFloats int) error {
	d.release()
	maxBytes := d.dev.Get("limits").Get("maxStorageBufferBindingSize").Float()
	if float64(4*floats) > maxBytes {
		return fmt.Errorf("webgpu: the model needs %d MiB of GPU memory in one buffer; this GPU allows %d MiB (maxStorageBufferBindingSize)",
			4*floats>>20, int64(maxBytes)>>20)
	}
	usage := js.Global().Get("GPUBufferUsage")
	d.dev.Call("pushErrorScope", "out-of-memory")
	d.dev.Call("pushErrorScope", "validation")
	d.arena = d.dev.Call("createBuffer", map[string]any{"size": 4 * floats, "label": "arena",
		"usage": usage.Get("STORAGE").Int() | usage.Get("COPY_SRC").Int() | usage.Get("COPY_DST").Int()})
	d.readback = d.dev.Call("createBuffer", map[string]any{"size": 4 * max(readFloats, 1), "label": "readback",
		"usage": usage.Get("MAP_READ").Int() | usage.Get("COPY_DST").Int()})
	for _, scope := range []string{"validation", "out-of-memory"} {
		e, err := await(d.dev.Call("popErrorScope"))
		if err == nil && e.Truthy() {
			err = errors.New(e.Get("message").String())
		}
		if err != nil {
			d.release()
			return fmt.Errorf("webgpu: allocating %d MiB of GPU memory (%s): %w", 4*floats>>20, scope, err)
		}
	}
	d.arenaFloats, d.readFloats = floats, readFloats
	d.bindGroup = d.dev.Call("createBindGroup", map[string]any{"layout": d.layout, "entries": []any{
		map[string]any{"binding": 0, "resource": map[string]any{"buffer": d.arena}},
		map[string]any{"binding": 1, "resource": map[string]any{"buffer": d.uniform, "size": slotBytes}},
	}})
	return d.err()
}

func (d *device) release() {
	for _, b := range []*js.Value{&d.arena, &d.readback} {
		if b.Truthy() {
			b.Call("destroy")
		}
		*b = js.Undefined()
	}
	d.arenaFloats, d.readFloats = 0, 0
}

// close frees the buffers; the device itself belongs to the page.
func (d *device) close() {
	d.release()
	if d.uniform.Truthy() {
		d.uniform.Call("destroy")
		d.uniform = js.Undefined()
	}
}

// dispatch records kernel name over x×y×z workgroups with args.
func (d *device) dispatch(name string, x, y, z int, args ...any) error {
	p, ok := d.pipelines[name]
	if !ok {
		return fmt.Errorf("webgpu: no kernel %q", name)
	}
	if x > maxWorkgroups || y > maxWorkgroups || z > maxWorkgroups {
		return fmt.Errorf("webgpu: kernel %s: %d×%d×%d workgroups exceed %d per dimension", name, x, y, z, maxWorkgroups)
	}
	if d.slots == maxSlots {
		d.flush()
	}
	slot := d.args[d.slots*slotBytes : (d.slots+1)*slotBytes]
	if _, err := packArgs(slot, args...); err != nil {
		return fmt.Errorf("webgpu: kernel %s: %w", name, err)
	}
	if !d.pass.Truthy() {
		d.enc = d.dev.Call("createCommandEncoder")
		d.pass = d.enc.Call("beginComputePass")
	}
	d.pass.Call("setPipeline", p)
	d.pass.Call("setBindGroup", 0, d.bindGroup, d.offsets, d.slots, 1)
	d.pass.Call("dispatchWorkgroups", x, y, z)
	d.slots++
	return nil
}

// Launch runs an elementwise kernel over total elements.
func (d *device) Launch(name string, total int, args ...any) error {
	return d.dispatch(name, elementGroups(total), 1, 1, args...)
}

// LaunchRows runs a kernel taking a workgroup per row over rows rows.
func (d *device) LaunchRows(name string, rows int, args ...any) error {
	return d.dispatch(name, rowGroups(rows), 1, 1, args...)
}

// LaunchBlocks runs a kernel on blocks workgroups of 256 (a kernel that
// takes one per column loops over the columns past WebGPU's limit).
func (d *device) LaunchBlocks(name string, blocks int, args ...any) error {
	return d.dispatch(name, rowGroups(blocks), 1, 1, args...)
}

// Gemm records C = alpha·op(A)·op(B) + beta·C, row-major, for batch
// matrices at strides (floats) strideA, strideB, strideC: one tiled
// kernel for single and batched products.
func (d *device) Gemm(transA, transB bool, m, n, k int, alpha float32, a gpu.Ptr, lda, strideA int, b gpu.Ptr, ldb, strideB int, beta float32, c gpu.Ptr, ldc, strideC, batch int) error {
	return d.dispatch("gemm", (n+gemmTile-1)/gemmTile, (m+gemmTile-1)/gemmTile, batch,
		transA, transB, m, n, k, alpha, a, lda, strideA, b, ldb, strideB, beta, c, ldc, strideC)
}

// Zero fills floats values at p with 0.
func (d *device) Zero(p gpu.Ptr, floats int) error {
	return d.Launch("fill", floats, p, floats, float32(0))
}

// Copy copies floats values from src to dst with a kernel.
func (d *device) Copy(dst, src gpu.Ptr, floats int) error {
	return d.Launch("copy", floats, dst, src, floats)
}

// Examples uploads examples [lo, hi) into room: the arena is laid out
// once, for one batch.
func (d *device) Examples(x []float32, labels []int32, lo, hi int, room gpu.Batch) (gpu.Batch, error) {
	in, lpe := room.InputSize, room.LabelsPerExample
	if err := d.Upload(room.X, x[lo*in:hi*in]); err != nil {
		return gpu.Batch{}, err
	}
	return room, d.uploadInts(room.Labels, labels[lo*lpe:hi*lpe])
}

// AddLosses adds each row's loss and hit into its own sum (the loss sums
// per row, then the hits per row): the host adds those up, in row order
// and in float64 (Losses).
func (d *device) AddLosses(rowLoss, rowHit gpu.Ptr, rows int, sums gpu.LossSums) error {
	return d.Launch("accumulate_rows", rows, rowLoss, rowHit, sums.Loss, sums.Hits, rows)
}

// Losses reads the per-row sums back and adds them up in row order.
func (d *device) Losses(sums gpu.LossSums) (float64, int, error) {
	if len(d.rowLoss) != sums.Rows {
		d.rowLoss, d.rowHit = make([]float32, sums.Rows), make([]int32, sums.Rows)
	}
	if err := d.Download(d.rowLoss, sums.Loss); err != nil {
		return 0, 0, err
	}
	if err := d.downloadInts(d.rowHit, sums.Hits); err != nil {
		return 0, 0, err
	}
	var loss float64
	var hits int
	for i, l := range d.rowLoss {
		loss += float64(l)
		hits += int(d.rowHit[i])
	}
	if math.IsNaN(loss) || math.IsInf(loss, 0) {
		return 0, 0, fmt.Errorf("%w: the loss came back as %v", ErrDevice, loss)
	}
	return loss, hits, nil
}

// flush submits what is recorded, with its arguments.
func (d *device) flush() {
	if !d.pass.Truthy() {
		return
	}
	d.pass.Call("end")
	n := d.slots * slotBytes
	js.CopyBytesToJS(d.argsJS, d.args[:n])
	d.queue.Call("writeBuffer", d.uniform, 0, d.argsJS, 0, n)
	d.queue.Call("submit", []any{d.enc.Call("finish")})
	d.enc, d.pass, d.slots = js.Undefined(), js.Undefined(), 0
}

// stageBytes returns the staging Uint8Array, grown to at least n bytes.
func (d *device) stageBytes(n int) js.Value {
	if !d.stage.Truthy() || d.stage.Length() < n {
		d.stage = js.Global().Get("Uint8Array").New(max(n, 1<<16))
	}
	return d.stage
}

func (d *device) check(p gpu.Ptr, floats int) error {
	if p%4 != 0 || int(p/4)+floats > d.arenaFloats {
		return fmt.Errorf("webgpu: %d floats at byte %d are outside the arena of %d floats", floats, p, d.arenaFloats)
	}
	return nil
}

// Upload writes v at p. What was recorded before runs first.
func (d *device) Upload(p gpu.Ptr, v []float32) error { return d.uploadBytes(p, floatBytes(v)) }

// uploadInts writes v at p as int32 bits.
func (d *device) uploadInts(p gpu.Ptr, v []int32) error {
	if len(v) == 0 {
		return nil
	}
	return d.uploadBytes(p, unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v)))
}

func (d *device) uploadBytes(p gpu.Ptr, b []byte) error {
	if len(b) == 0 {
		return nil
	}
	if err := d.check(p, len(b)/4); err != nil {
		return err
	}
	d.flush() // the write is queued: commands recorded before it must go first
	s := d.stageBytes(len(b))
	js.CopyBytesToJS(s, b)
	d.queue.Call("writeBuffer", d.arena, int(p), s, 0, len(b))
	return nil
}

// Download waits for the GPU and copies len(v) floats at p into v.
func (d *device) Download(v []float32, p gpu.Ptr) error {
	return d.downloadBytes(floatBytes(v), p)
}

// downloadInts is download for int32 bits.
func (d *device) downloadInts(v []int32, p gpu.Ptr) error {
	if len(v) == 0 {
		return nil
	}
	return d.downloadBytes(unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v)), p)
}

func (d *device) downloadBytes(b []byte, p gpu.Ptr) error {
	n := len(b)
	if n == 0 {
		return d.err()
	}
	if err := d.check(p, n/4); err != nil {
		return err
	}
	if n/4 > d.readFloats {
		return fmt.Errorf("webgpu: reading %d floats, the readback buffer holds %d", n/4, d.readFloats)
	}
	d.flush()
	enc := d.dev.Call("createCommandEncoder")
	enc.Call("copyBufferToBuffer", d.arena, int(p), d.readback, 0, n)
	d.queue.Call("submit", []any{enc.Call("finish")})
	mode := js.Global().Get("GPUMapMode").Get("READ").Int()
	if _, err := await(d.readback.Call("mapAsync", mode, 0, n)); err != nil {
		if e := d.err(); e != nil {
			return e
		}
		return fmt.Errorf("%w: reading results back: %v", ErrDevice, err)
	}
	view := js.Global().Get("Uint8Array").New(d.readback.Call("getMappedRange", 0, n))
	js.CopyBytesToGo(b, view)
	d.readback.Call("unmap")
	return d.err()
}

func floatBytes(v []float32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
}

// await waits for a JS promise; the caller must not be a JS callback.
func await(p js.Value) (js.Value, error) {
	type result struct {
		v   js.Value
		err error
	}
	ch := make(chan result, 1)
	then := js.FuncOf(func(_ js.Value, args []js.Value) any {
		v := js.Undefined()
		if len(args) > 0 {
			v = args[0]
		}
		ch <- result{v: v}
		return nil
	})
	catch := js.FuncOf(func(_ js.Value, args []js.Value) any {
		msg := "rejected"
		if len(args) > 0 {
			msg = jsString(args[0])
		}
		ch <- result{err: errors.New(msg)}
		return nil
	})
	defer then.Release()
	defer catch.Release()
	p.Call("then", then, catch)
	r := <-ch
	return r.v, r.err
}

// jsString is an error's message, or the value as text.
func jsString(v js.Value) string {
	if v.Type() == js.TypeObject && v.Get("message").Type() == js.TypeString {
		return v.Get("message").String()
	}
	return js.Global().Get("String").Invoke(v).String()
}

// compileErrors lists a GPUCompilationInfo's errors.
func compileErrors(info js.Value) string {
	var errs []string
	msgs := info.Get("messages")
	for i := range msgs.Length() {
		m := msgs.Index(i)
		if m.Get("type").String() == "error" {
			errs = append(errs, fmt.Sprintf("line %d: %s", m.Get("lineNum").Int(), m.Get("message").String()))
		}
	}
	return strings.Join(errs, "; ")
}
