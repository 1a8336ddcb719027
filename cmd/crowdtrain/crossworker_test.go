package main

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
)

// crossBuild builds the worker build of this command for goos/goarch,
// as the release archives hold it.
func crossBuild(t *testing.T, goos, goarch string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "crowdtrain")
	if goos == "windows" {
		bin += ".exe"
	}
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 GOOS=%s GOARCH=%s go build: %v\n%s", goos, goarch, err, out)
	}
	return bin
}

const crossAdminToken = "cross-worker-test-admin-token"

// serveForCross starts a coordinator (this machine's own build) training
// mnist-mlp, with nothing kept, and returns its address.
func serveForCross(t *testing.T) string {
	t.Helper()
	addr := freeAddr(t)
	startProc(t, "serve", "--addr", addr, "--job", "mnist-mlp", "--db", "", "--admin-token", crossAdminToken)
	waitJob(t, addr, 60*time.Second, "the coordinator", func(coordinator.JobView) bool { return true })
	return addr
}

// waitWorkerAccepted polls the admin API until one worker has n results
// accepted, and returns it as the coordinator sees it.
func waitWorkerAccepted(t *testing.T, addr string, n int64, timeout time.Duration, w *proc) coordinator.WorkerView {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last []coordinator.WorkerView
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/api/v1/workers", nil)
		req.Header.Set("Authorization", "Bearer "+crossAdminToken)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			last = nil
			json.NewDecoder(resp.Body).Decode(&last)
			resp.Body.Close()
			for _, v := range last {
				if v.Accepted >= n {
					return v
				}
			}
		}
		select {
		case err := <-w.done:
			t.Fatalf("the worker exited (%v) before %d results were accepted; log:\n%s", err, n, w.logText())
		case <-time.After(200 * time.Millisecond):
		}
	}
	t.Fatalf("no worker had %d results accepted within %v; workers %+v; worker log:\n%s", n, timeout, last, w.logText())
	return coordinator.WorkerView{}
}

// workArgs are the worker's flags in these tests: no volunteer key, no
// config file from this machine, one thread.
func workArgs(addr string, more ...string) []string {
	return append([]string{"work", "--coordinator", "ws://" + addr + "/ws", "--key-file", "", "--threads", "1", "--backend", "cpu"}, more...)
}

// The linux/arm64 worker build, run under qemu-user against a coordinator
// on this machine, trains mnist-mlp on its NEON kernel with its results
// accepted.
func TestArm64WorkerUnderQEMU(t *testing.T) {
	testenv.Long(t, "cross-builds the worker and runs it under qemu-user against a coordinator process")
	emu := testenv.NeedQEMU(t, "arm64")
	// Built without cgo, the worker is still linked dynamically (purego
	// loads OpenBLAS and CUDA through the C library's loader): qemu needs
	// an arm64 glibc, Debian's libc6-arm64-cross.
	const sysroot = "/usr/aarch64-linux-gnu"
	if _, err := os.Stat(sysroot + "/lib/ld-linux-aarch64.so.1"); err != nil {
		testenv.Missing(t, sysroot+"/lib/ld-linux-aarch64.so.1 not found: install Debian's libc6-arm64-cross to run the arm64 worker under qemu-user")
	}
	bin := crossBuild(t, "linux", "arm64")
	out, err := exec.Command(emu, "-L", sysroot, bin, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "os/arch: linux/arm64") || !strings.Contains(string(out), "neon") {
		t.Fatalf("%s crowdtrain version: %v\n%s", filepath.Base(emu), err, out)
	}
	addr := serveForCross(t)
	cmd := exec.Command(emu, append([]string{"-L", sysroot, bin}, workArgs(addr, "--kernel", "neon")...)...)
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+t.TempDir())
	w := startCmd(t, cmd)
	v := waitWorkerAccepted(t, addr, 5, 3*time.Minute, w)
	if v.Backend != "cpu-neon" || v.Kind != "native" {
		t.Errorf("the coordinator sees the arm64 worker as %s backend %q; want native, cpu-neon", v.Kind, v.Backend)
	}
	t.Logf("arm64 worker under qemu: backend %s, %d results accepted, %d rejected, %d examples", v.Backend, v.Accepted, v.Rejected, v.Examples)
}

// wine64 finds Debian's wine64 (not on PATH: /usr/lib/wine/wine64), or
// skips t saying what to install.
func wine64(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"wine64", "/usr/lib/wine/wine64"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testenv.Missing(t, "wine64 not found: install Debian's wine64 to run the windows/amd64 worker under Wine")
	return ""
}

// prngShim is a stand-in for bcryptprimitives.dll, which Go's Windows
// runtime loads from system32 for ProcessPrng and which Wine before 9.0
// (Debian 12 has 8.0) lacks: it answers from BCryptGenRandom, which Wine
// has.
const prngShim = `#include <windows.h>
#include <bcrypt.h>
__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) {
	while (len > 0) {
		ULONG n = len > 0x40000000 ? 0x40000000 : (ULONG)len;
		if (BCryptGenRandom(NULL, data, n, BCRYPT_USE_SYSTEM_PREFERRED_RNG) != 0)
			return FALSE;
		data += n;
		len -= n;
	}
	return TRUE;
}
`

// wineWorker is the windows/amd64 worker build and the Wine that runs it,
// with a prefix of its own.
type wineWorker struct {
	wine, bin string
	env       []string
}

// newWineWorker cross-builds the worker for windows/amd64 and prepares a
// Wine prefix that runs it, or skips t saying why Wine cannot.
func newWineWorker(t *testing.T) *wineWorker {
	t.Helper()
	wine := wine64(t)
	bin := crossBuild(t, "windows", "amd64")
	prefix := t.TempDir()
	env := append(os.Environ(), "WINEPREFIX="+prefix, "WINEDEBUG=-all",
		"WINEDLLOVERRIDES=mscoree,mshtml=", // no Mono or Gecko installer dialogs
		"DISPLAY=", "XDG_CONFIG_HOME="+t.TempDir())
	t.Cleanup(func() { // after the worker is killed: the prefix's wineserver goes too
		k := exec.Command(filepath.Join(filepath.Dir(wine), "wineserver"), "-k")
		if _, err := exec.LookPath(k.Path); err != nil {
			k = exec.Command("wineserver", "-k")
		}
		k.Env = env
		_ = k.Run()
	})
	version := func() ([]byte, error) {
		cmd := exec.Command(wine, bin, "version")
		cmd.Env = env
		return cmd.CombinedOutput()
	}
	out, err := version() // the first run makes the prefix
	if strings.Contains(string(out), "bcryptprimitives.dll not found") {
		gcc, lerr := exec.LookPath("x86_64-w64-mingw32-gcc")
		if lerr != nil {
			testenv.Missing(t, "this Wine lacks bcryptprimitives.dll, which Go's runtime needs, and x86_64-w64-mingw32-gcc, which builds a stand-in, is not found: install Debian's gcc-mingw-w64-x86-64-win32")
		}
		src := filepath.Join(t.TempDir(), "prng.c")
		os.WriteFile(src, []byte(prngShim), 0o644)
		dll := filepath.Join(prefix, "drive_c", "windows", "system32", "bcryptprimitives.dll")
		if out, err := exec.Command(gcc, "-shared", "-O2", "-o", dll, src, "-lbcrypt").CombinedOutput(); err != nil {
			t.Fatalf("building the bcryptprimitives.dll stand-in: %v\n%s", err, out)
		}
		out, err = version()
	}
	if err != nil || !strings.Contains(string(out), "os/arch: windows/amd64") {
		t.Skipf("Wine cannot run the windows/amd64 build here: %v\n%s", err, out)
	}
	return &wineWorker{wine: wine, bin: bin, env: env}
}

// start runs the worker with args (and extra environment) as a proc.
func (w *wineWorker) start(t *testing.T, env []string, args ...string) *proc {
	cmd := exec.Command(w.wine, append([]string{w.bin}, args...)...)
	cmd.Env = append(slices.Clone(w.env), env...)
	return startCmd(t, cmd)
}

// The windows/amd64 worker build, run under Wine against a coordinator on
// this machine, trains mnist-mlp with its results accepted.
func TestWindowsWorkerUnderWine(t *testing.T) {
	testenv.Long(t, "cross-builds the worker and runs it under Wine against a coordinator process")
	ww := newWineWorker(t)
	addr := serveForCross(t)
	w := ww.start(t, nil, workArgs(addr)...) // --kernel auto, as a volunteer runs it
	v := waitWorkerAccepted(t, addr, 5, 3*time.Minute, w)
	if v.Kind != "native" || !strings.HasPrefix(v.Backend, "cpu-") {
		t.Errorf("the coordinator sees the Windows worker as %s backend %q; want native, cpu-<kernel>", v.Kind, v.Backend)
	}
	t.Logf("windows/amd64 worker under Wine: backend %s, %d results accepted, %d rejected, %d examples", v.Backend, v.Accepted, v.Rejected, v.Examples)
}

// The windows/amd64 worker's CUDA backend loads nvcuda.dll, NVRTC and
// cuBLAS as DLLs: under Wine, with the CPU emulation of those libraries
// (worker/cuda's testdata, built as Windows DLLs with mingw-w64) in
// $CROWDTRAIN_CUDA_LIBS, it trains mnist-mlp as a gpu worker with its
// results accepted. Without them it says which DLL is missing.
func TestWindowsGPUWorkerUnderWine(t *testing.T) {
	testenv.Long(t, "cross-builds the worker and runs its CUDA backend under Wine against a coordinator process")
	gxx, err := exec.LookPath("x86_64-w64-mingw32-g++")
	if err != nil {
		testenv.Missing(t, "x86_64-w64-mingw32-g++ not found: install Debian's g++-mingw-w64-x86-64-win32 to build the CUDA emulator as Windows DLLs")
	}
	ww := newWineWorker(t)

	cmd := exec.Command(ww.wine, ww.bin, "bench", "--backend", "cuda", "--model", "mnist-mlp")
	cmd.Env = append(slices.Clone(ww.env), "CROWDTRAIN_CUDA_LIBS=")
	out, _ := cmd.CombinedOutput()
	if !strings.Contains(string(out), "nvcuda.dll not found: install the NVIDIA driver") {
		t.Errorf("bench --backend cuda without a driver under Wine: want nvcuda.dll named as missing, got:\n%s", out)
	}

	dir := t.TempDir()
	dll := filepath.Join(dir, "nvcuda.dll")
	args := []string{"-shared", "-O2", "-DEMU", "-o", dll,
		"-x", "c", filepath.Join("..", "..", "worker", "cuda", "driver", "testdata", "fakecuda.c"),
		"-x", "c++", "-fno-exceptions", filepath.Join("..", "..", "worker", "cuda", "testdata", "emu.cpp"),
		"-static", "-static-libgcc", "-static-libstdc++", "-Wl,-Bstatic", "-lpthread"}
	if out, err := exec.Command(gxx, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", gxx, strings.Join(args, " "), err, out)
	}
	body, err := os.ReadFile(dll)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"nvrtc64_130_0.dll", "cublas64_13.dll"} {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	addr := serveForCross(t)
	w := ww.start(t, []string{"CROWDTRAIN_CUDA_LIBS=Z:" + filepath.FromSlash(dir)},
		"work", "--coordinator", "ws://"+addr+"/ws", "--key-file", "", "--backend", "cuda")
	v := waitWorkerAccepted(t, addr, 5, 5*time.Minute, w)
	if v.Kind != "gpu" {
		t.Errorf("the coordinator sees the Windows CUDA worker as %s backend %q; want gpu\nworker log:\n%s", v.Kind, v.Backend, w.logText())
	}
	if !strings.Contains(w.logText(), "nvcuda.dll") {
		t.Errorf("the worker's log does not name the nvcuda.dll it loaded:\n%s", w.logText())
	}
	t.Logf("windows/amd64 CUDA worker under Wine on the emulator: backend %s, %d results accepted, %d rejected", v.Backend, v.Accepted, v.Rejected)
}
