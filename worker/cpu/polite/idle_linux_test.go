package polite

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// openPTY opens a pseudo terminal: its master, and its slave's path.
func openPTY(t *testing.T) (*os.File, string) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo terminals here: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	var n, unlock uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		t.Fatalf("unlockpt: %v", e)
	}
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		t.Fatalf("ptsname: %v", e)
	}
	return m, "/dev/pts/" + strconv.Itoa(int(n))
}

// Typing on a terminal makes the machine busy at once; a terminal left
// alone for longer than InputIdle does not.
func TestLinuxDetectorSeesTerminalInput(t *testing.T) {
	master, slavePath := openPTY(t)
	slave, err := os.OpenFile(slavePath, os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer slave.Close()
	long := time.Now().Add(-10 * time.Minute)
	if err := os.Chtimes(slavePath, long, long); err != nil {
		t.Fatal(err)
	}
	sys, err := system(Options{MaxOthersCPU: 1, InputIdle: time.Minute}) // the CPU load never decides here
	if err != nil {
		t.Fatal(err)
	}
	d := sys.(*linuxIdle)
	d.ttys = []string{slavePath}
	time.Sleep(200 * time.Millisecond) // some ticks of CPU time to measure
	if idle, why := d.Idle(); !idle || !strings.Contains(why, "no input for 10m") {
		t.Fatalf("untouched terminal: idle %v, %q; want idle, no input for 10m", idle, why)
	}
	// A keystroke: the program on the terminal reads it.
	if _, err := master.Write([]byte("x\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	if _, err := slave.Read(buf); err != nil {
		t.Fatal(err)
	}
	// The kernel keeps a terminal's times coarse (to whole seconds and
	// more), so "ago" may say a few seconds.
	if idle, why := d.Idle(); idle || !strings.Contains(why, "input ") || !strings.Contains(why, "s ago on "+slavePath) {
		t.Fatalf("after a keystroke: idle %v, %q; want busy, input seconds ago on %s", idle, why, slavePath)
	}
}

// Another program using a CPU makes the machine busy; this process's own
// CPU time is what /proc/self/stat says getrusage says.
func TestLinuxDetectorSeesOtherProgramsCPU(t *testing.T) {
	sys, err := system(Options{InputIdle: time.Nanosecond}) // input never decides here
	if err != nil {
		t.Fatal(err)
	}
	d := sys.(*linuxIdle)
	spin := exec.Command("sh", "-c", "while :; do :; done")
	if err := spin.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { spin.Process.Kill(); spin.Wait() }()
	time.Sleep(time.Second)
	if idle, why := d.Idle(); idle || !strings.Contains(why, "other programs use") {
		t.Errorf("with a program spinning on a CPU: idle %v, %q; want busy", idle, why)
	}

	var ru0, ru1 syscall.Rusage
	before, _ := d.read()
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	// Spin until this process has used 300 ms of CPU (a loaded machine
	// gives it less than the wall time), at most 10 s.
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); {
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
		if ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano() >= int64(300*time.Millisecond) {
			break
		}
	}
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	after, _ := d.read()
	rusage := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	ticks := time.Duration((after.own - before.own) * float64(10*time.Millisecond)) // USER_HZ is 100
	if rusage < 100*time.Millisecond || (ticks-rusage).Abs() > 60*time.Millisecond {
		t.Errorf("own CPU time: /proc/self/stat says %v, getrusage %v", ticks, rusage)
	}
}

// The subtraction, on files standing in for /proc: our own ticks do not
// count as another program's.
func TestLinuxDetectorLeavesOutOwnCPU(t *testing.T) {
	dir := t.TempDir()
	d := &linuxIdle{o: Options{}.withDefaults(), stat: filepath.Join(dir, "stat"), self: filepath.Join(dir, "self"), now: time.Now}
	write := func(busy, idle, own int) {
		os.WriteFile(d.stat, []byte("cpu  "+strconv.Itoa(busy)+" 0 0 "+strconv.Itoa(idle)+" 0 0 0 0 0 0\n"), 0o600)
		os.WriteFile(d.self, []byte("1 (crowdtrain) R 0 0 0 0 0 0 0 0 0 0 "+strconv.Itoa(own)+" 0 0 0\n"), 0o600)
	}
	write(1000, 1000, 0)
	if idle, why := d.Idle(); idle || why != "measuring the CPU load" {
		t.Errorf("first reading: %v, %q; want busy while measuring", idle, why)
	}
	write(1180, 1020, 160) // 180 of 200 ticks busy, 160 ours
	if idle, why := d.Idle(); !idle || !strings.Contains(why, "other programs use 10% of the CPUs") {
		t.Errorf("idle %v, %q; want idle, others at 10%%", idle, why)
	}
	write(1380, 1040, 200) // 200 of 220 busy, 40 ours
	if idle, why := d.Idle(); idle || !strings.Contains(why, "other programs use 73% of the CPUs") {
		t.Errorf("idle %v, %q; want busy, others at 73%%", idle, why)
	}
}

// LowerPriority sets every thread of the process to nice 10.
func TestLowerPriorityNicesEveryThread(t *testing.T) {
	if err := LowerPriority(); err != nil {
		t.Fatal(err)
	}
	done := make(chan bool)
	go func() { done <- true }() // threads made after it inherit it
	<-done
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile("/proc/self/task/" + e.Name() + "/stat")
		if err != nil {
			continue // the thread ended
		}
		i := strings.LastIndexByte(string(b), ')')
		f := strings.Fields(string(b[i+1:]))
		if nice, _ := strconv.Atoi(f[16]); nice < LowNice { // field 19 of the whole line
			t.Errorf("thread %s runs at nice %d, want %d or more", e.Name(), nice, LowNice)
		}
	}
	if len(ents) < 2 {
		t.Errorf("only %d threads: the test shows nothing about threads", len(ents))
	}
}
