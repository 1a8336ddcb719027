//go:build linux || windows

package driver

import (
	"fmt"
	"runtime"
	"strings"
)

// NVRTC is the runtime compiler for CUDA C, libnvrtc.
type NVRTC struct {
	Path         string
	Major, Minor int

	nvrtcVersion           func(major, minor *int32) int32
	nvrtcGetErrorString    func(code int32) *byte
	nvrtcCreateProgram     func(prog *uintptr, src, name string, numHeaders int32, headers, includeNames **byte) int32
	nvrtcDestroyProgram    func(prog *uintptr) int32
	nvrtcCompileProgram    func(prog uintptr, numOptions int32, options **byte) int32
	nvrtcGetProgramLogSize func(prog uintptr, n *uint64) int32
	nvrtcGetProgramLog     func(prog uintptr, log *byte) int32
	nvrtcGetPTXSize        func(prog uintptr, n *uint64) int32
	nvrtcGetPTX            func(prog uintptr, ptx *byte) int32
	// Optional (NVRTC 11.1 and later): machine code instead of PTX.
	nvrtcGetCUBINSize func(prog uintptr, n *uint64) int32
	nvrtcGetCUBIN     func(prog uintptr, cubin *byte) int32
	// Optional (NVRTC 11.2 and later): the architectures it can target.
	nvrtcGetNumSupportedArchs func(n *int32) int32
	nvrtcGetSupportedArchs    func(archs *int32) int32
}

// NVRTCNames are the file names tried for NVRTC, newest first.
var NVRTCNames = nvrtcNames

// LoadNVRTC opens the newest NVRTC found (see LoadDriver for dirs). The
// builtins library it needs is preloaded from the same folder.
func LoadNVRTC(dirs []string) (*NVRTC, error) {
	return loadNVRTC(NVRTCNames, dirs)
}

func loadNVRTC(names, dirs []string) (*NVRTC, error) {
	lib, err := openLibrary(names, dirs, nvrtcHint, nvrtcCompanions...)
	if err != nil {
		return nil, err
	}
	lib.hint = "NVRTC is too old; install NVRTC 11.2 or later"
	n := &NVRTC{Path: lib.path}
	if err := lib.bindAll(map[string]any{
		"nvrtcVersion":           &n.nvrtcVersion,
		"nvrtcGetErrorString":    &n.nvrtcGetErrorString,
		"nvrtcCreateProgram":     &n.nvrtcCreateProgram,
		"nvrtcDestroyProgram":    &n.nvrtcDestroyProgram,
		"nvrtcCompileProgram":    &n.nvrtcCompileProgram,
		"nvrtcGetProgramLogSize": &n.nvrtcGetProgramLogSize,
		"nvrtcGetProgramLog":     &n.nvrtcGetProgramLog,
		"nvrtcGetPTXSize":        &n.nvrtcGetPTXSize,
		"nvrtcGetPTX":            &n.nvrtcGetPTX,
	}); err != nil {
		return nil, err
	}
	if lib.bind(&n.nvrtcGetCUBINSize, "nvrtcGetCUBINSize") != nil || lib.bind(&n.nvrtcGetCUBIN, "nvrtcGetCUBIN") != nil {
		n.nvrtcGetCUBINSize, n.nvrtcGetCUBIN = nil, nil
	}
	if lib.bind(&n.nvrtcGetNumSupportedArchs, "nvrtcGetNumSupportedArchs") != nil || lib.bind(&n.nvrtcGetSupportedArchs, "nvrtcGetSupportedArchs") != nil {
		n.nvrtcGetNumSupportedArchs, n.nvrtcGetSupportedArchs = nil, nil
	}
	var major, minor int32
	if err := n.check("nvrtcVersion", n.nvrtcVersion(&major, &minor)); err != nil {
		return nil, err
	}
	n.Major, n.Minor = int(major), int(minor)
	return n, nil
}

const nvrtcOutOfMemory = 1

func (n *NVRTC) check(fn string, code int32) error {
	if code == 0 {
		return nil
	}
	name := goString(n.nvrtcGetErrorString(code))
	if name == "" {
		name = fmt.Sprintf("NVRTC error %d", code)
	}
	return &Error{Func: fn, Code: int(code), Name: name, oom: code == nvrtcOutOfMemory}
}

// SupportedArchs returns the compute capabilities (e.g. 90 for sm_90) this
// NVRTC can compile for, or nil if it cannot say.
func (n *NVRTC) SupportedArchs() []int {
	if n.nvrtcGetNumSupportedArchs == nil {
		return nil
	}
	var k int32
	if n.nvrtcGetNumSupportedArchs(&k) != 0 || k <= 0 {
		return nil
	}
	archs := make([]int32, k)
	if n.nvrtcGetSupportedArchs(&archs[0]) != 0 {
		return nil
	}
	out := make([]int, k)
	for i, a := range archs {
		out[i] = int(a)
	}
	return out
}

// HasCUBIN reports whether this NVRTC can emit machine code (cubin).
func (n *NVRTC) HasCUBIN() bool { return n.nvrtcGetCUBIN != nil }

// CompileError is a program that did not compile; Log is NVRTC's log.
type CompileError struct {
	Err *Error
	Log string
}

func (e *CompileError) Error() string {
	return fmt.Sprintf("%v: %s", e.Err, strings.TrimSpace(e.Log))
}

func (e *CompileError) Unwrap() error { return e.Err }

// Compile compiles CUDA C source with options. With cubin it returns
// machine code (nvrtcGetCUBIN; give -arch=sm_XY), else NUL-terminated PTX
// (give -arch=compute_XY). The log of a failed compile is in the error.
func (n *NVRTC) Compile(src, name string, options []string, cubin bool) ([]byte, error) {
	if cubin && !n.HasCUBIN() {
		return nil, fmt.Errorf("NVRTC %d.%d (%s) cannot emit cubin; compile to PTX", n.Major, n.Minor, n.Path)
	}
	var prog uintptr
	if err := n.check("nvrtcCreateProgram", n.nvrtcCreateProgram(&prog, src, name, 0, nil, nil)); err != nil {
		return nil, err
	}
	defer n.nvrtcDestroyProgram(&prog)
	var pin runtime.Pinner
	defer pin.Unpin()
	opts := cStrings(&pin, options)
	var optp **byte
	if len(opts) > 0 {
		pin.Pin(&opts[0])
		optp = &opts[0]
	}
	if code := n.nvrtcCompileProgram(prog, int32(len(opts)), optp); code != 0 {
		return nil, &CompileError{Err: n.check("nvrtcCompileProgram", code).(*Error), Log: n.log(prog)}
	}
	sizeFn, getFn, what := n.nvrtcGetPTXSize, n.nvrtcGetPTX, "nvrtcGetPTX"
	if cubin {
		sizeFn, getFn, what = n.nvrtcGetCUBINSize, n.nvrtcGetCUBIN, "nvrtcGetCUBIN"
	}
	var size uint64
	if err := n.check(what+"Size", sizeFn(prog, &size)); err != nil {
		return nil, err
	}
	if size == 0 {
		return nil, fmt.Errorf("%s returned nothing", what)
	}
	out := make([]byte, size)
	if err := n.check(what, getFn(prog, &out[0])); err != nil {
		return nil, err
	}
	return out, nil
}

func (n *NVRTC) log(prog uintptr) string {
	var size uint64
	if n.nvrtcGetProgramLogSize(prog, &size) != 0 || size <= 1 {
		return ""
	}
	b := make([]byte, size)
	if n.nvrtcGetProgramLog(prog, &b[0]) != 0 {
		return ""
	}
	return strings.TrimRight(string(b), "\x00")
}
