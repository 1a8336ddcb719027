package polite

import (
	"errors"
	"syscall"
	"time"
	"unsafe"

	"github.com/crowdtrain/crowdtrain/worker"
)

var (
	user32               = syscall.NewLazyDLL("user32.dll")
	kernel32             = syscall.NewLazyDLL("kernel32.dll")
	procGetLastInputInfo = user32.NewProc("GetLastInputInfo")
	procGetTickCount     = kernel32.NewProc("GetTickCount")
	procGetSystemTimes   = kernel32.NewProc("GetSystemTimes")
	procSetPriorityClass = kernel32.NewProc("SetPriorityClass")
)

// windowsIdle reads GetLastInputInfo and the CPU times (package doc).
type windowsIdle struct {
	o    Options
	prev cpuTimes
}

func system(o Options) (worker.IdleDetector, error) {
	d := &windowsIdle{o: o}
	cur, err := d.read()
	if err != nil {
		return nil, err
	}
	d.prev = cur
	return d, nil
}

func ft(f syscall.Filetime) float64 {
	return float64(uint64(f.HighDateTime)<<32 | uint64(f.LowDateTime))
}

func (d *windowsIdle) read() (cpuTimes, error) {
	var idle, kernel, user syscall.Filetime
	if r, _, err := procGetSystemTimes.Call(uintptr(unsafe.Pointer(&idle)), uintptr(unsafe.Pointer(&kernel)), uintptr(unsafe.Pointer(&user))); r == 0 {
		return cpuTimes{}, errors.Join(errors.New("GetSystemTimes failed"), err)
	}
	var c, e, k, u syscall.Filetime
	if err := syscall.GetProcessTimes(syscall.Handle(^uintptr(0)), &c, &e, &k, &u); err != nil { // the current process
		return cpuTimes{}, err
	}
	// Kernel time includes the idle time.
	return cpuTimes{busy: ft(kernel) + ft(user) - ft(idle), total: ft(kernel) + ft(user), own: ft(k) + ft(u)}, nil
}

func (d *windowsIdle) Idle() (bool, string) {
	cur, err := d.read()
	if err != nil {
		return false, "cannot read the CPU load: " + err.Error()
	}
	share, ok := othersShare(d.prev, cur)
	if ok {
		d.prev = cur
	}
	in := input{}
	info := struct{ size, time uint32 }{size: 8}
	if r, _, _ := procGetLastInputInfo.Call(uintptr(unsafe.Pointer(&info))); r != 0 {
		tick, _, _ := procGetTickCount.Call()
		in = input{known: true, ago: time.Duration(uint32(tick)-info.time) * time.Millisecond}
	}
	return judge(d.o, share, ok, in)
}
