package driver

import (
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/windows"
)

// The libraries' file names, newest first, and the companions each loads
// by name from its own folder. The driver ships nvcuda.dll in System32;
// the toolkit (and the nvidia-* pip wheels) put NVRTC and cuBLAS in its
// bin folder, named by major version.
var (
	driverNames     = []string{"nvcuda.dll"}
	nvrtcNames      = []string{"nvrtc64_130_0.dll", "nvrtc64_120_0.dll", "nvrtc64_112_0.dll"}
	blasNames       = []string{"cublas64_13.dll", "cublas64_12.dll", "cublas64_11.dll"}
	nvrtcCompanions = []string{"nvrtc-builtins64_*.dll"}
	blasCompanions  = []string{"cublasLt64_*.dll"}
)

const (
	driverHint = "install the NVIDIA driver (it puts nvcuda.dll in System32)"
	nvrtcHint  = "install NVRTC, the CUDA runtime compiler (the CUDA toolkit, whose bin folder %CUDA_PATH%\\bin holds nvrtc64_*.dll, or pip install nvidia-cuda-nvrtc)"
	cublasHint = "install cuBLAS (the CUDA toolkit, whose bin folder %CUDA_PATH%\\bin holds cublas64_*.dll, or pip install nvidia-cublas)"
)

// SearchDirs returns the folders searched after System32, in order: the
// toolkit's bin folders (%CUDA_PATH%, then each %CUDA_PATH_V*% newest
// first) and the nvidia-* pip wheels of the user's Pythons.
// $CROWDTRAIN_CUDA_LIBS is searched first and is not part of this list.
func SearchDirs() []string {
	var dirs []string
	if p := os.Getenv("CUDA_PATH"); p != "" {
		dirs = append(dirs, filepath.Join(p, "bin"), filepath.Join(p, "bin", "x64"))
	}
	var versions []string
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(strings.ToUpper(k), "CUDA_PATH_V") && v != "" {
			versions = append(versions, v)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(versions)))
	for _, v := range versions {
		dirs = append(dirs, filepath.Join(v, "bin"), filepath.Join(v, "bin", "x64"))
	}
	if local := os.Getenv("LOCALAPPDATA"); local != "" {
		m, _ := filepath.Glob(filepath.Join(local, "Programs", "Python", "Python3*", "Lib", "site-packages", "nvidia", "*", "bin"))
		dirs = append(dirs, m...)
	}
	return dirs
}

// systemPath is where the system keeps name: System32, named in full.
// Only absolute paths are loaded, never a bare name, which Windows would
// also look for in the current folder.
func systemPath(name string) (string, bool) {
	sys, err := windows.GetSystemDirectory()
	if err != nil || sys == "" {
		return "", false
	}
	return filepath.Join(sys, name), true
}

// dlopen loads the DLL at path; the libraries it imports are looked for in
// its own folder first (LOAD_WITH_ALTERED_SEARCH_PATH), as the toolkit
// lays them out.
func dlopen(path string) (uintptr, error) {
	h, err := windows.LoadLibraryEx(path, 0, windows.LOAD_WITH_ALTERED_SEARCH_PATH)
	return uintptr(h), err
}

func dlsym(handle uintptr, symbol string) (uintptr, error) {
	return windows.GetProcAddress(windows.Handle(handle), symbol)
}

// loadedPath is path: Windows loads only what it is named in full here.
func loadedPath(_, path string) string { return path }
