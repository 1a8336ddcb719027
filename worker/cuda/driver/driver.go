//go:build linux || windows

package driver

import (
	"fmt"
	"math"
	"runtime"
	"unsafe"
)

// DevicePtr is an address in device memory (CUdeviceptr).
type DevicePtr uint64

// Module and Function are a loaded module and a kernel in it.
type (
	Module   uintptr
	Function uintptr
)

// Device attributes this package reads (CUdevice_attribute).
const (
	attrComputeCapabilityMajor = 75
	attrComputeCapabilityMinor = 76
	attrMultiprocessorCount    = 16
)

// Driver is the CUDA driver API, libcuda.so.1.
type Driver struct {
	Path string // the file that was opened

	cuInit                    func(flags uint32) int32
	cuDriverGetVersion        func(v *int32) int32
	cuDeviceGetCount          func(n *int32) int32
	cuDeviceGet               func(dev *int32, ordinal int32) int32
	cuDeviceGetName           func(name *byte, n int32, dev int32) int32
	cuDeviceGetAttribute      func(v *int32, attr int32, dev int32) int32
	cuDeviceTotalMem          func(bytes *uint64, dev int32) int32
	cuDevicePrimaryCtxRetain  func(ctx *uintptr, dev int32) int32
	cuDevicePrimaryCtxRelease func(dev int32) int32
	cuCtxSetCurrent           func(ctx uintptr) int32
	cuCtxSynchronize          func() int32
	cuMemGetInfo              func(free, total *uint64) int32
	cuMemAlloc                func(p *DevicePtr, bytes uint64) int32
	cuMemFree                 func(p DevicePtr) int32
	cuMemAllocHost            func(p *unsafe.Pointer, bytes uint64) int32
	cuMemFreeHost             func(p unsafe.Pointer) int32
	cuMemcpyHtoD              func(dst DevicePtr, src unsafe.Pointer, bytes uint64) int32
	cuMemcpyDtoH              func(dst unsafe.Pointer, src DevicePtr, bytes uint64) int32
	cuMemcpyDtoD              func(dst, src DevicePtr, bytes uint64) int32
	cuMemsetD32               func(dst DevicePtr, v uint32, n uint64) int32
	cuModuleLoadData          func(m *Module, image unsafe.Pointer) int32
	cuModuleUnload            func(m Module) int32
	cuModuleGetFunction       func(f *Function, m Module, name string) int32
	cuLaunchKernel            func(f Function, gx, gy, gz, bx, by, bz, shared uint32, stream uintptr, params *unsafe.Pointer, extra uintptr) int32
	cuGetErrorName            func(code int32, s **byte) int32

	// Launch arguments live here, pinned, so the pointer array handed to
	// cuLaunchKernel never points into a moving stack.
	args struct {
		vals [maxKernelArgs]uint64
		ptrs [maxKernelArgs]unsafe.Pointer
	}
	pinner runtime.Pinner
}

const maxKernelArgs = 24

// LoadDriver opens libcuda and binds the functions the worker uses. dirs,
// when non-nil, are the only folders searched.
func LoadDriver(dirs []string) (*Driver, error) {
	lib, err := openLibrary(driverNames, dirs, driverHint)
	if err != nil {
		return nil, err
	}
	lib.hint = "the NVIDIA driver is too old; install a current one"
	d := &Driver{Path: lib.path}
	err = lib.bindAll(map[string]any{
		"cuInit":                       &d.cuInit,
		"cuDriverGetVersion":           &d.cuDriverGetVersion,
		"cuDeviceGetCount":             &d.cuDeviceGetCount,
		"cuDeviceGet":                  &d.cuDeviceGet,
		"cuDeviceGetName":              &d.cuDeviceGetName,
		"cuDeviceGetAttribute":         &d.cuDeviceGetAttribute,
		"cuDeviceTotalMem_v2":          &d.cuDeviceTotalMem,
		"cuDevicePrimaryCtxRetain":     &d.cuDevicePrimaryCtxRetain,
		"cuDevicePrimaryCtxRelease_v2": &d.cuDevicePrimaryCtxRelease,
		"cuCtxSetCurrent":              &d.cuCtxSetCurrent,
		"cuCtxSynchronize":             &d.cuCtxSynchronize,
		"cuMemGetInfo_v2":              &d.cuMemGetInfo,
		"cuMemAlloc_v2":                &d.cuMemAlloc,
		"cuMemFree_v2":                 &d.cuMemFree,
		"cuMemAllocHost_v2":            &d.cuMemAllocHost,
		"cuMemFreeHost":                &d.cuMemFreeHost,
		"cuMemcpyHtoD_v2":              &d.cuMemcpyHtoD,
		"cuMemcpyDtoH_v2":              &d.cuMemcpyDtoH,
		"cuMemcpyDtoD_v2":              &d.cuMemcpyDtoD,
		"cuMemsetD32_v2":               &d.cuMemsetD32,
		"cuModuleLoadData":             &d.cuModuleLoadData,
		"cuModuleUnload":               &d.cuModuleUnload,
		"cuModuleGetFunction":          &d.cuModuleGetFunction,
		"cuLaunchKernel":               &d.cuLaunchKernel,
		"cuGetErrorName":               &d.cuGetErrorName,
	})
	if err != nil {
		return nil, err
	}
	for i := range d.args.ptrs {
		d.args.ptrs[i] = unsafe.Pointer(&d.args.vals[i])
	}
	d.pinner.Pin(&d.args)
	return d, nil
}

// CUresult codes that callers tell apart.
const (
	codeOutOfMemory = 2
	codeNoDevice    = 100
)

// check turns a CUresult into an error naming the function and the code.
func (d *Driver) check(fn string, code int32) error {
	if code == 0 {
		return nil
	}
	name := fmt.Sprintf("CUDA error %d", code)
	var s *byte
	if d.cuGetErrorName(code, &s) == 0 && s != nil {
		name = goString(s)
	}
	return &Error{Func: fn, Code: int(code), Name: name, oom: code == codeOutOfMemory}
}

// Init initialises the driver (cuInit(0)).
func (d *Driver) Init() error { return d.check("cuInit", d.cuInit(0)) }

// Version returns the CUDA version the driver supports, e.g. 13000 for 13.0.
func (d *Driver) Version() (int, error) {
	var v int32
	err := d.check("cuDriverGetVersion", d.cuDriverGetVersion(&v))
	return int(v), err
}

// DeviceCount returns how many CUDA devices there are.
func (d *Driver) DeviceCount() (int, error) {
	var n int32
	code := d.cuDeviceGetCount(&n)
	if code == codeNoDevice {
		return 0, nil
	}
	return int(n), d.check("cuDeviceGetCount", code)
}

// DeviceInfo describes one device.
type DeviceInfo struct {
	Ordinal          int
	Name             string
	Major, Minor     int // compute capability
	Multiprocessors  int
	TotalMemoryBytes uint64
}

// Device returns the ordinal'th device's description.
func (d *Driver) Device(ordinal int) (DeviceInfo, error) {
	var dev int32
	if err := d.check("cuDeviceGet", d.cuDeviceGet(&dev, int32(ordinal))); err != nil {
		return DeviceInfo{}, err
	}
	info := DeviceInfo{Ordinal: ordinal}
	var name [256]byte
	if err := d.check("cuDeviceGetName", d.cuDeviceGetName(&name[0], int32(len(name)), dev)); err != nil {
		return info, err
	}
	info.Name = goString(&name[0])
	for _, a := range []struct {
		attr int32
		dst  *int
	}{{attrComputeCapabilityMajor, &info.Major}, {attrComputeCapabilityMinor, &info.Minor}, {attrMultiprocessorCount, &info.Multiprocessors}} {
		var v int32
		if err := d.check("cuDeviceGetAttribute", d.cuDeviceGetAttribute(&v, a.attr, dev)); err != nil {
			return info, err
		}
		*a.dst = int(v)
	}
	if err := d.check("cuDeviceTotalMem_v2", d.cuDeviceTotalMem(&info.TotalMemoryBytes, dev)); err != nil {
		return info, err
	}
	return info, nil
}

// Context is a device's primary context, current on the thread that
// retained it.
type Context struct {
	d   *Driver
	dev int32
	ctx uintptr
}

// RetainPrimaryContext retains the device's primary context and makes it
// current on the calling OS thread (lock the goroutine to it first).
func (d *Driver) RetainPrimaryContext(ordinal int) (*Context, error) {
	var dev int32
	if err := d.check("cuDeviceGet", d.cuDeviceGet(&dev, int32(ordinal))); err != nil {
		return nil, err
	}
	c := &Context{d: d, dev: dev}
	if err := d.check("cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain(&c.ctx, dev)); err != nil {
		return nil, err
	}
	if err := d.check("cuCtxSetCurrent", d.cuCtxSetCurrent(c.ctx)); err != nil {
		d.cuDevicePrimaryCtxRelease(dev)
		return nil, err
	}
	return c, nil
}

// Release releases the primary context.
func (c *Context) Release() error {
	return c.d.check("cuDevicePrimaryCtxRelease_v2", c.d.cuDevicePrimaryCtxRelease(c.dev))
}

// Synchronize waits for all work queued on the context.
func (d *Driver) Synchronize() error { return d.check("cuCtxSynchronize", d.cuCtxSynchronize()) }

// MemInfo returns the free and total device memory in bytes.
func (d *Driver) MemInfo() (free, total uint64, err error) {
	err = d.check("cuMemGetInfo_v2", d.cuMemGetInfo(&free, &total))
	return free, total, err
}

// Alloc allocates bytes of device memory.
func (d *Driver) Alloc(bytes int) (DevicePtr, error) {
	var p DevicePtr
	if err := d.check("cuMemAlloc_v2", d.cuMemAlloc(&p, uint64(bytes))); err != nil {
		return 0, fmt.Errorf("allocating %d bytes on the device: %w", bytes, err)
	}
	return p, nil
}

// Free frees device memory from Alloc; freeing 0 does nothing.
func (d *Driver) Free(p DevicePtr) error {
	if p == 0 {
		return nil
	}
	return d.check("cuMemFree_v2", d.cuMemFree(p))
}

// HostBuffer is page-locked (pinned) host memory, which the device reads
// and writes directly: copies from it need no staging by the driver.
type HostBuffer struct {
	p     unsafe.Pointer
	bytes int
}

// AllocHost allocates bytes of pinned host memory.
func (d *Driver) AllocHost(bytes int) (*HostBuffer, error) {
	var p unsafe.Pointer
	if err := d.check("cuMemAllocHost_v2", d.cuMemAllocHost(&p, uint64(bytes))); err != nil {
		return nil, fmt.Errorf("allocating %d bytes of pinned host memory: %w", bytes, err)
	}
	return &HostBuffer{p: p, bytes: bytes}, nil
}

// FreeHost frees a pinned buffer.
func (d *Driver) FreeHost(h *HostBuffer) error {
	if h == nil || h.p == nil {
		return nil
	}
	p := h.p
	h.p, h.bytes = nil, 0
	return d.check("cuMemFreeHost", d.cuMemFreeHost(p))
}

// Bytes returns the buffer's size.
func (h *HostBuffer) Bytes() int { return h.bytes }

// Float32s views the first n float32s of the buffer.
func (h *HostBuffer) Float32s(n int) []float32 {
	if 4*n > h.bytes {
		panic(fmt.Sprintf("cuda: HostBuffer of %d bytes viewed as %d float32s", h.bytes, n))
	}
	return unsafe.Slice((*float32)(h.p), n)
}

// Int32s views the first n int32s of the buffer.
func (h *HostBuffer) Int32s(n int) []int32 {
	if 4*n > h.bytes {
		panic(fmt.Sprintf("cuda: HostBuffer of %d bytes viewed as %d int32s", h.bytes, n))
	}
	return unsafe.Slice((*int32)(h.p), n)
}

// Upload copies bytes from the start of h to dst. From pinned memory the
// copy is synchronous: h may be reused when it returns.
func (d *Driver) Upload(dst DevicePtr, h *HostBuffer, bytes int) error {
	if bytes > h.bytes {
		panic(fmt.Sprintf("cuda: Upload of %d bytes from a %d-byte buffer", bytes, h.bytes))
	}
	return d.check("cuMemcpyHtoD_v2", d.cuMemcpyHtoD(dst, h.p, uint64(bytes)))
}

// Download copies bytes from src to the start of h, waiting for the work
// queued before it.
func (d *Driver) Download(h *HostBuffer, src DevicePtr, bytes int) error {
	if bytes > h.bytes {
		panic(fmt.Sprintf("cuda: Download of %d bytes into a %d-byte buffer", bytes, h.bytes))
	}
	return d.check("cuMemcpyDtoH_v2", d.cuMemcpyDtoH(h.p, src, uint64(bytes)))
}

// UploadBytes copies b (ordinary Go memory) to dst.
func (d *Driver) UploadBytes(dst DevicePtr, b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return d.check("cuMemcpyHtoD_v2", d.cuMemcpyHtoD(dst, unsafe.Pointer(&b[0]), uint64(len(b))))
}

// DownloadBytes copies len(b) bytes from src into b (ordinary Go memory).
func (d *Driver) DownloadBytes(b []byte, src DevicePtr) error {
	if len(b) == 0 {
		return nil
	}
	return d.check("cuMemcpyDtoH_v2", d.cuMemcpyDtoH(unsafe.Pointer(&b[0]), src, uint64(len(b))))
}

// Copy copies bytes between device buffers.
func (d *Driver) Copy(dst, src DevicePtr, bytes int) error {
	return d.check("cuMemcpyDtoD_v2", d.cuMemcpyDtoD(dst, src, uint64(bytes)))
}

// Memset32 sets n 32-bit words at dst to v.
func (d *Driver) Memset32(dst DevicePtr, v uint32, n int) error {
	return d.check("cuMemsetD32_v2", d.cuMemsetD32(dst, v, uint64(n)))
}

// LoadModule loads a cubin or NUL-terminated PTX image.
func (d *Driver) LoadModule(image []byte) (Module, error) {
	var m Module
	err := d.check("cuModuleLoadData", d.cuModuleLoadData(&m, unsafe.Pointer(&image[0])))
	return m, err
}

// UnloadModule unloads a module.
func (d *Driver) UnloadModule(m Module) error { return d.check("cuModuleUnload", d.cuModuleUnload(m)) }

// Function looks a kernel up by its (extern "C") name.
func (d *Driver) Function(m Module, name string) (Function, error) {
	var f Function
	if err := d.check("cuModuleGetFunction", d.cuModuleGetFunction(&f, m, name)); err != nil {
		return 0, fmt.Errorf("kernel %s: %w", name, err)
	}
	return f, nil
}

// Dim3 is a grid or block size.
type Dim3 struct{ X, Y, Z uint32 }

// Launch queues kernel f on the default stream. Each argument is a
// DevicePtr, int32, uint32, int (passed as a C int), float32 or uint64, in
// the kernel's parameter order.
func (d *Driver) Launch(f Function, grid, block Dim3, sharedBytes int, args ...any) error {
	if len(args) > maxKernelArgs {
		panic(fmt.Sprintf("cuda: Launch with %d arguments, at most %d", len(args), maxKernelArgs))
	}
	for i, a := range args {
		var v uint64
		switch a := a.(type) {
		case DevicePtr:
			v = uint64(a)
		case uint64:
			v = a
		case int32:
			v = uint64(uint32(a))
		case int:
			if a < math.MinInt32 || a > math.MaxInt32 {
				panic(fmt.Sprintf("cuda: Launch argument %d: %d does not fit a C int", i, a))
			}
			v = uint64(uint32(int32(a)))
		case uint32:
			v = uint64(a)
		case float32:
			v = uint64(math.Float32bits(a))
		default:
			panic(fmt.Sprintf("cuda: Launch argument %d has unsupported type %T", i, a))
		}
		d.args.vals[i] = v
	}
	var params *unsafe.Pointer
	if len(args) > 0 {
		params = &d.args.ptrs[0]
	}
	return d.check("cuLaunchKernel", d.cuLaunchKernel(f, grid.X, grid.Y, grid.Z, block.X, block.Y, block.Z, uint32(sharedBytes), 0, params, 0))
}
