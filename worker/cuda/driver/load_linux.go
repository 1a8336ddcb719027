package driver

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/ebitengine/purego"
)

// The libraries' file names, newest first, and the companions each loads
// by name from its own folder.
var (
	driverNames     = []string{"libcuda.so.1", "libcuda.so"}
	nvrtcNames      = []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so"}
	blasNames       = []string{"libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so"}
	nvrtcCompanions = []string{"libnvrtc-builtins.so*"}
	blasCompanions  = []string{"libcublasLt.so*"}
)

const (
	driverHint = "install the NVIDIA driver (the package that provides libcuda.so.1, e.g. nvidia-driver or libnvidia-compute)"
	nvrtcHint  = "install NVRTC, the CUDA runtime compiler (the CUDA toolkit's cuda-nvrtc package, or pip install nvidia-cuda-nvrtc)"
	cublasHint = "install cuBLAS (the CUDA toolkit's libcublas package, or pip install nvidia-cublas)"
)

// commonDirs are where CUDA libraries usually live when the system loader
// does not know them.
var commonDirs = []string{
	"/usr/local/nvidia/lib64", "/usr/local/nvidia/lib",
	"/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib",
	"/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/wsl/lib",
}

// wheelGlobs find the libraries that PyTorch's nvidia-* pip wheels carry
// (nvidia/cuda_nvrtc/lib, nvidia/cublas/lib, nvidia/cu13/lib, ...).
var wheelGlobs = []string{
	"/opt/*/.venv/lib/python3*/site-packages/nvidia/*/lib",
	"/opt/*/lib/python3*/site-packages/nvidia/*/lib",
	"/usr/local/lib/python3*/dist-packages/nvidia/*/lib",
	"/usr/local/lib/python3*/site-packages/nvidia/*/lib",
	"/usr/lib/python3/dist-packages/nvidia/*/lib",
	"~/.local/lib/python3*/site-packages/nvidia/*/lib",
}

// SearchDirs returns the folders searched after the system loader, in
// order: $CROWDTRAIN_CUDA_LIBS is searched before the loader and is not
// part of this list.
func SearchDirs() []string {
	dirs := append([]string(nil), commonDirs...)
	home, _ := os.UserHomeDir()
	for _, g := range wheelGlobs {
		if strings.HasPrefix(g, "~/") {
			if home == "" {
				continue
			}
			g = filepath.Join(home, g[2:])
		}
		m, _ := filepath.Glob(g)
		dirs = append(dirs, m...)
	}
	return dirs
}

// systemPath is what the system loader is asked for: the bare name, which
// it looks up in its own path (ld.so.cache, LD_LIBRARY_PATH).
func systemPath(name string) (string, bool) { return name, true }

func dlopen(path string) (uintptr, error) {
	return purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
}

func dlsym(handle uintptr, symbol string) (uintptr, error) { return purego.Dlsym(handle, symbol) }

// loadedPath returns the file the system loader opened for name, read from
// /proc/self/maps, or name itself if it cannot tell.
func loadedPath(name, _ string) string {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return name
	}
	stem := name[:strings.Index(name, ".so")+3] // libcuda.so.1 → libcuda.so
	for _, line := range strings.Split(string(maps), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			continue
		}
		if p := f[len(f)-1]; strings.HasPrefix(filepath.Base(p), stem) {
			return p
		}
	}
	return name
}
