//go:build linux

package driver

import (
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
)

// fakeLibs builds testdata/fakecuda.c into a folder holding it under the
// driver's, NVRTC's and cuBLAS's names, and returns the folder and the
// library's handle (for reading what the fake recorded).
func fakeLibs(t *testing.T, cflags ...string) (string, uintptr) {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not found: the fake CUDA libraries these tests load are built with it (apt-get install gcc)")
	}
	dir := t.TempDir()
	so := filepath.Join(dir, "libfakecuda.so")
	// -Bsymbolic: each copy uses its own globals, though every test loads
	// another copy with RTLD_GLOBAL.
	args := append([]string{"-shared", "-fPIC", "-O1", "-Wl,-Bsymbolic", "-o", so}, cflags...)
	args = append(args, filepath.Join("testdata", "fakecuda.c"))
	if out, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %v: %v\n%s", args, err, out)
	}
	for _, name := range []string{"libcuda.so.1", "libnvrtc.so.13", "libcublas.so.13"} {
		if err := os.Symlink(so, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	h, err := purego.Dlopen(filepath.Join(dir, "libcuda.so.1"), purego.RTLD_NOW)
	if err != nil {
		t.Fatal(err)
	}
	return dir, h
}

// fakeVar returns the address of a global of the fake library.
func fakeVar[T any](t *testing.T, h uintptr, name string) *T {
	t.Helper()
	p, err := purego.Dlsym(h, name)
	if err != nil {
		t.Fatal(err)
	}
	// The address is C memory, never moved by Go: reinterpret the integer.
	return *(**T)(unsafe.Pointer(&p))
}

func fakeString(t *testing.T, h uintptr, name string) string {
	return goString(fakeVar[byte](t, h, name))
}

func TestDriverCallsReachTheLibrary(t *testing.T) {
	dir, h := fakeLibs(t)
	d, err := LoadDriver([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	if d.Path != filepath.Join(dir, "libcuda.so.1") {
		t.Errorf("Path %q", d.Path)
	}
	if err := d.Init(); err != nil {
		t.Fatal(err)
	}
	if got := *fakeVar[uint32](t, h, "fake_init_flags"); got != 0 {
		t.Errorf("cuInit got flags %d, want 0", got)
	}
	if v, err := d.Version(); err != nil || v != 13000 {
		t.Errorf("Version() = %d, %v", v, err)
	}
	if n, err := d.DeviceCount(); err != nil || n != 1 {
		t.Errorf("DeviceCount() = %d, %v", n, err)
	}
	info, err := d.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	want := DeviceInfo{Name: "Fake GPU 9000", Major: 9, Minor: 0, Multiprocessors: 132, TotalMemoryBytes: 80 << 30}
	if info != want {
		t.Errorf("Device(0) = %+v, want %+v", info, want)
	}
	ctx, err := d.RetainPrimaryContext(0)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Release()

	// Sizes and pointers travel both ways: a round trip through "device"
	// memory, pinned staging and a device-to-device copy.
	const n = 1000
	p, err := d.Alloc(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	if got := *fakeVar[uint64](t, h, "fake_last_alloc"); got != 4*n {
		t.Errorf("cuMemAlloc_v2 got %d bytes, want %d", got, 4*n)
	}
	q, _ := d.Alloc(4 * n)
	hb, err := d.AllocHost(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	src := hb.Float32s(n)
	for i := range src {
		src[i] = float32(i) * 0.5
	}
	if err := d.Upload(p, hb, 4*n); err != nil {
		t.Fatal(err)
	}
	if err := d.Copy(q, p, 4*n); err != nil {
		t.Fatal(err)
	}
	clear(src)
	if err := d.Memset32(p, 0x3f800000, 10); err != nil { // 1.0f
		t.Fatal(err)
	}
	if err := d.Download(hb, q, 4*n); err != nil {
		t.Fatal(err)
	}
	if src[0] != 0 || src[999] != 499.5 {
		t.Errorf("round trip gave %v ... %v, want 0 ... 499.5", src[0], src[999])
	}
	raw := make([]byte, 8)
	if err := d.DownloadBytes(raw, p); err != nil {
		t.Fatal(err)
	}
	if raw[3] != 0x3f || raw[7] != 0x3f {
		t.Errorf("memset gave bytes %x, want 1.0f twice", raw)
	}
	d.Free(p)
	d.Free(q)
	d.FreeHost(hb)

	m, err := d.LoadModule([]byte("CUBIN-image\x00"))
	if err != nil || fakeString(t, h, "fake_last_module") != "CUBIN-image" {
		t.Errorf("LoadModule: %v, module %q", err, fakeString(t, h, "fake_last_module"))
	}
	f, err := d.Function(m, "axpy_kernel")
	if err != nil || fakeString(t, h, "fake_last_name") != "axpy_kernel" {
		t.Errorf("Function: %v, name %q", err, fakeString(t, h, "fake_last_name"))
	}
	if err := d.Launch(f, Dim3{7, 2, 1}, Dim3{256, 1, 1}, 1024, DevicePtr(0xdeadbeef00), -42, float32(1.5)); err != nil {
		t.Fatal(err)
	}
	dims := *fakeVar[[7]uint32](t, h, "fake_launch_dims")
	if dims != [7]uint32{7, 2, 1, 256, 1, 1, 1024} {
		t.Errorf("launch dims %v", dims)
	}
	if got := *fakeVar[uint64](t, h, "fake_launch_ptr"); got != 0xdeadbeef00 {
		t.Errorf("kernel got pointer %#x", got)
	}
	if got := *fakeVar[int32](t, h, "fake_launch_int"); got != -42 {
		t.Errorf("kernel got int %d", got)
	}
	if got := *fakeVar[float32](t, h, "fake_launch_float"); got != 1.5 {
		t.Errorf("kernel got float %v", got)
	}
}

func TestErrorCodesBecomeNamedErrors(t *testing.T) {
	dir, h := fakeLibs(t)
	d, err := LoadDriver([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.Alloc(2 << 30) // over the fake's 1 GiB
	var ce *Error
	if !errors.As(err, &ce) || ce.Func != "cuMemAlloc_v2" || ce.Name != "CUDA_ERROR_OUT_OF_MEMORY" || ce.Code != 2 {
		t.Fatalf("Alloc over the limit: %v, want a cuMemAlloc_v2 CUDA_ERROR_OUT_OF_MEMORY error", err)
	}
	if !errors.Is(err, ErrOutOfMemory) {
		t.Errorf("%v does not match ErrOutOfMemory", err)
	}
	if _, err := d.Device(3); err == nil || !strings.Contains(err.Error(), "CUDA_ERROR_INVALID_DEVICE") {
		t.Errorf("Device(3): %v, want CUDA_ERROR_INVALID_DEVICE", err)
	}
	if _, err := d.Function(0, "missing"); err == nil || !strings.Contains(err.Error(), "CUDA_ERROR_NOT_FOUND") ||
		!strings.Contains(err.Error(), "missing") || errors.Is(err, ErrOutOfMemory) {
		t.Errorf("Function(missing): %v", err)
	}
	*fakeVar[int32](t, h, "fake_device_count") = 0
	if n, err := d.DeviceCount(); n != 0 || err != nil {
		t.Errorf("no devices: DeviceCount() = %d, %v; want 0, nil", n, err)
	}
	// A code cuGetErrorName does not know still gives an error.
	if err := d.check("cuSomething", 777); err == nil || !strings.Contains(err.Error(), "CUDA error 777") {
		t.Errorf("unknown code: %v", err)
	}
}

func TestNVRTCCompiles(t *testing.T) {
	dir, h := fakeLibs(t)
	n, err := LoadNVRTC([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	if n.Major != 13 || n.Minor != 0 || !n.HasCUBIN() {
		t.Errorf("NVRTC %d.%d cubin %v", n.Major, n.Minor, n.HasCUBIN())
	}
	if a := n.SupportedArchs(); len(a) != 3 || a[2] != 90 {
		t.Errorf("SupportedArchs() = %v", a)
	}
	ptx, err := n.Compile("__global__ void k() {}", "kernels.cu", []string{"--gpu-architecture=compute_90", "-default-device"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if string(ptx) != "PTX:__global__ void k() {}\x00" {
		t.Errorf("PTX %q", ptx)
	}
	if got := fakeString(t, h, "fake_last_options"); got != "--gpu-architecture=compute_90|-default-device" {
		t.Errorf("options reached NVRTC as %q", got)
	}
	if got := fakeString(t, h, "fake_last_name"); got != "kernels.cu" {
		t.Errorf("program name %q", got)
	}
	cubin, err := n.Compile("x", "k.cu", []string{"-arch=sm_90"}, true)
	if err != nil || string(cubin) != "CUBIN\x00" {
		t.Errorf("cubin %q, %v", cubin, err)
	}
	_, err = n.Compile("syntax error", "k.cu", nil, false)
	var ce *CompileError
	if !errors.As(err, &ce) || ce.Err.Name != "NVRTC_ERROR_COMPILATION" || !strings.Contains(err.Error(), `expected a ";"`) {
		t.Errorf("bad source: %v, want NVRTC_ERROR_COMPILATION with the log", err)
	}
}

// uploadFloats copies v to fresh device memory.
func uploadFloats(t testing.TB, d *Driver, v []float32) DevicePtr {
	t.Helper()
	p, err := d.Alloc(4 * len(v))
	if err != nil {
		t.Fatal(err)
	}
	d.UploadBytes(p, unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v)))
	return p
}

// GemmRowMajor on row-major matrices matches a plain Go product for every
// combination of transposes, through the fake's column-major SGEMM.
func TestGemmRowMajorMatchesReference(t *testing.T) {
	dir, _ := fakeLibs(t)
	d, err := LoadDriver([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadBLAS([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Init(); err != nil || b.Version != 130000 {
		t.Fatalf("Init: %v, version %d", err, b.Version)
	}
	defer b.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	const m, n, k = 5, 3, 4
	for _, tA := range []bool{false, true} {
		for _, tB := range []bool{false, true} {
			a := make([]float32, m*k) // m×k, or k×m when transposed
			bm := make([]float32, k*n)
			c := make([]float32, m*n)
			for _, v := range [][]float32{a, bm, c} {
				for i := range v {
					v[i] = float32(rng.IntN(7) - 3)
				}
			}
			at := func(i, p int) float32 {
				if tA {
					return a[p*m+i]
				}
				return a[i*k+p]
			}
			bt := func(p, j int) float32 {
				if tB {
					return bm[j*k+p]
				}
				return bm[p*n+j]
			}
			want := make([]float32, m*n)
			for i := range m {
				for j := range n {
					var s float32
					for p := range k {
						s += at(i, p) * bt(p, j)
					}
					want[i*n+j] = 2*s + 0.5*c[i*n+j]
				}
			}
			lda, ldb := k, n
			if tA {
				lda = m
			}
			if tB {
				ldb = k
			}
			pa, pb, pc := uploadFloats(t, d, a), uploadFloats(t, d, bm), uploadFloats(t, d, c)
			if err := b.GemmRowMajor(tA, tB, m, n, k, 2, pa, lda, pb, ldb, 0.5, pc, n); err != nil {
				t.Fatal(err)
			}
			got := make([]float32, m*n)
			d.DownloadBytes(unsafe.Slice((*byte)(unsafe.Pointer(&got[0])), 4*len(got)), pc)
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("transA %v transB %v: C = %v, want %v", tA, tB, got, want)
				}
			}
		}
	}
	if err := b.Gemm(false, false, -1, 1, 1, 1, 0, 1, 0, 1, 0, 0, 1); err == nil || !strings.Contains(err.Error(), "cublasSgemm_v2: CUBLAS_STATUS_INVALID_VALUE") {
		t.Errorf("bad GEMM: %v", err)
	}
}

// GemmStridedBatchedRowMajor multiplies sub-matrices of row-major
// buffers (leading dimensions wider than the operands, batch strides
// between them), as attention reads one head's columns of each example,
// and matches a plain Go product for every combination of transposes.
func TestGemmStridedBatchedRowMajorMatchesReference(t *testing.T) {
	dir, _ := fakeLibs(t)
	d, err := LoadDriver([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadBLAS([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Init(); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	const m, n, k, batch = 4, 3, 5, 3
	const pad = 2 // extra columns in every row: the operands are sub-matrices
	for _, tA := range []bool{false, true} {
		for _, tB := range []bool{false, true} {
			ar, ac := m, k // A's rows and columns as stored
			if tA {
				ar, ac = k, m
			}
			br, bc := k, n
			if tB {
				br, bc = n, k
			}
			lda, ldb, ldc := ac+pad, bc+pad, n+pad
			sa, sb, sc := ar*lda+1, br*ldb+3, m*ldc+2
			a := make([]float32, batch*sa)
			bm := make([]float32, batch*sb)
			c := make([]float32, batch*sc)
			for _, v := range [][]float32{a, bm, c} {
				for i := range v {
					v[i] = float32(rng.IntN(7) - 3)
				}
			}
			want := append([]float32(nil), c...)
			for e := range batch {
				at := func(i, p int) float32 {
					if tA {
						return a[e*sa+p*lda+i]
					}
					return a[e*sa+i*lda+p]
				}
				bt := func(p, j int) float32 {
					if tB {
						return bm[e*sb+j*ldb+p]
					}
					return bm[e*sb+p*ldb+j]
				}
				for i := range m {
					for j := range n {
						var s float32
						for p := range k {
							s += at(i, p) * bt(p, j)
						}
						o := e*sc + i*ldc + j
						want[o] = 2*s + 0.5*c[o]
					}
				}
			}
			pa, pb, pc := uploadFloats(t, d, a), uploadFloats(t, d, bm), uploadFloats(t, d, c)
			if err := b.GemmStridedBatchedRowMajor(tA, tB, m, n, k, 2, pa, lda, sa, pb, ldb, sb, 0.5, pc, ldc, sc, batch); err != nil {
				t.Fatal(err)
			}
			got := make([]float32, len(c))
			d.DownloadBytes(unsafe.Slice((*byte)(unsafe.Pointer(&got[0])), 4*len(got)), pc)
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("transA %v transB %v: C[%d] = %v, want %v", tA, tB, i, got[i], want[i])
				}
			}
		}
	}
	if err := b.GemmStridedBatched(false, false, 1, 1, 1, 1, 0, 1, 0, 0, 1, 0, 0, 0, 1, 0, -1); err == nil || !strings.Contains(err.Error(), "cublasSgemmStridedBatched: CUBLAS_STATUS_INVALID_VALUE") {
		t.Errorf("bad batched GEMM: %v", err)
	}
}

func TestMissingLibraryNamesWhatToInstall(t *testing.T) {
	empty := t.TempDir()
	_, err := LoadDriver([]string{empty})
	var le *LibraryError
	if !errors.As(err, &le) || !strings.HasPrefix(err.Error(), "libcuda.so.1 not found: install the NVIDIA driver") {
		t.Errorf("no driver: %v", err)
	}
	if _, err := LoadNVRTC([]string{empty}); err == nil || !strings.Contains(err.Error(), "libnvrtc.so.13 not found: install NVRTC") {
		t.Errorf("no NVRTC: %v", err)
	}
	if _, err := LoadBLAS([]string{empty}); err == nil || !strings.Contains(err.Error(), "libcublas.so.13 not found: install cuBLAS") {
		t.Errorf("no cuBLAS: %v", err)
	}
	// An older name is found when the newest is missing.
	dir, _ := fakeLibs(t)
	os.Rename(filepath.Join(dir, "libnvrtc.so.13"), filepath.Join(dir, "libnvrtc.so.12"))
	if n, err := LoadNVRTC([]string{dir}); err != nil || !strings.HasSuffix(n.Path, "libnvrtc.so.12") {
		t.Errorf("fallback to libnvrtc.so.12: %v", err)
	}
}

func TestMissingSymbolSaysTheDriverIsTooOld(t *testing.T) {
	dir, _ := fakeLibs(t, "-DOMIT_MEMALLOC")
	_, err := LoadDriver([]string{dir})
	var se *SymbolError
	if !errors.As(err, &se) || se.Symbol != "cuMemAlloc_v2" || !strings.Contains(err.Error(), "the NVIDIA driver is too old") {
		t.Errorf("driver without cuMemAlloc_v2: %v", err)
	}
}

// CROWDTRAIN_CUDA_LIBS is searched first.
func TestEnvFoldersAreSearched(t *testing.T) {
	dir, _ := fakeLibs(t)
	t.Setenv(EnvLibs, "/nonexistent:"+dir)
	d, err := LoadDriver(nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.Path != filepath.Join(dir, "libcuda.so.1") {
		t.Errorf("loaded %s, want the one in %s", d.Path, dir)
	}
}

func TestLoadedPathReadsTheLoadersChoice(t *testing.T) {
	// libc is mapped into every process, whatever file the loader chose.
	if _, err := purego.Dlopen("libc.so.6", purego.RTLD_NOW); err != nil {
		t.Skipf("no libc.so.6: %v", err)
	}
	if p := loadedPath("libc.so.6", "libc.so.6"); !filepath.IsAbs(p) || !strings.HasPrefix(filepath.Base(p), "libc.so") {
		t.Errorf("loadedPath(libc.so.6) = %q, want the absolute path of the mapped libc", p)
	}
	if p := loadedPath("libnothing.so.1", "libnothing.so.1"); p != "libnothing.so.1" {
		t.Errorf("loadedPath of a library not loaded = %q", p)
	}
}
