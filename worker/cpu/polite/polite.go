package polite

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/crowdtrain/crowdtrain/worker"
)

// Options say when the machine counts as idle.
type Options struct {
	// MaxOthersCPU is the share of the machine's CPU time, in [0, 1],
	// that other programs may use while it still counts as idle; 0 means
	// DefaultMaxOthersCPU.
	MaxOthersCPU float64
	// InputIdle is how long after the last input the user counts as
	// away; 0 means DefaultInputIdle.
	InputIdle time.Duration
}

// The defaults are BOINC's: suspend while other programs use more than a
// quarter of the CPUs, or while the user has been active in the last
// three minutes.
const (
	DefaultMaxOthersCPU = 0.25
	DefaultInputIdle    = 3 * time.Minute
)

func (o Options) withDefaults() Options {
	if o.MaxOthersCPU <= 0 {
		o.MaxOthersCPU = DefaultMaxOthersCPU
	}
	if o.InputIdle <= 0 {
		o.InputIdle = DefaultInputIdle
	}
	return o
}

// System returns this operating system's idle detector, or an error
// saying why there is none.
func System(o Options) (worker.IdleDetector, error) { return system(o.withDefaults()) }

// ErrUnsupported is System's error where the OS offers nothing to measure.
var ErrUnsupported = errors.New("this operating system has no idle detector in crowdtrain (Linux, macOS and Windows do)")

// cpuTimes is a reading of cumulative CPU time in one unit: all CPUs busy,
// all CPUs in total (busy and idle), and this process's own.
type cpuTimes struct{ busy, total, own float64 }

// othersShare is the share of the CPU time between two readings that
// other processes used; ok is false when no time passed between them.
func othersShare(prev, cur cpuTimes) (share float64, ok bool) {
	dt := cur.total - prev.total
	if dt <= 0 {
		return 0, false
	}
	others := (cur.busy - prev.busy) - (cur.own - prev.own)
	return min(max(others/dt, 0), 1), true
}

// input is what a detector knows about the last user input.
type input struct {
	known bool
	ago   time.Duration
	where string // "on /dev/pts/3", "" where the OS says no more
}

// judge turns the measurements into a verdict and the reason for it.
func judge(o Options, share float64, shareOK bool, in input) (bool, string) {
	load := fmt.Sprintf("other programs use %.0f%% of the CPUs", 100*share)
	switch {
	case in.known && in.ago < o.InputIdle:
		return false, fmt.Sprintf("input %v ago%s (idle means none for %v)", in.ago.Round(time.Second), sp(in.where), o.InputIdle)
	case !shareOK:
		return false, "measuring the CPU load"
	case share > o.MaxOthersCPU:
		return false, fmt.Sprintf("%s (idle means at most %.0f%%)", load, 100*o.MaxOthersCPU)
	case in.known:
		return true, fmt.Sprintf("%s; no input for %v", load, in.ago.Round(time.Second))
	default:
		return true, load + "; no input to watch"
	}
}

func sp(s string) string {
	if s == "" {
		return ""
	}
	return " " + s
}

var hidIdle = regexp.MustCompile(`"HIDIdleTime" = (\d+)`)

// parseHIDIdle reads HIDIdleTime (nanoseconds) from `ioreg -c IOHIDSystem`.
func parseHIDIdle(out []byte) (time.Duration, error) {
	m := hidIdle.FindSubmatch(out)
	if m == nil {
		return 0, errors.New(`ioreg -c IOHIDSystem printed no "HIDIdleTime"`)
	}
	ns, err := strconv.ParseInt(string(m[1]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("HIDIdleTime %q: %v", m[1], err)
	}
	return time.Duration(ns), nil
}

// parseLoadavg reads the one-minute load average from sysctl vm.loadavg's
// struct loadavg { uint32 ldavg[3]; long fscale; } on a 64-bit Mac (24
// bytes; Go's syscall.Sysctl drops a final zero byte, so 23 may arrive).
func parseLoadavg(b []byte) (float64, error) {
	if len(b) < 17 || len(b) > 24 {
		return 0, fmt.Errorf("vm.loadavg is %d bytes, want 24", len(b))
	}
	var buf [24]byte
	copy(buf[:], b)
	fscale := int64(binary.LittleEndian.Uint64(buf[16:]))
	if fscale <= 0 {
		return 0, fmt.Errorf("vm.loadavg has scale %d", fscale)
	}
	return float64(binary.LittleEndian.Uint32(buf[:4])) / float64(fscale), nil
}

// parseProcStat reads the aggregate "cpu" line of Linux's /proc/stat:
// busy (user, nice, system, irq, softirq, steal) and total ticks (those
// and idle, iowait). Guest time is inside user already.
func parseProcStat(b []byte) (busy, total float64, err error) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := bytes.Fields(line)
	if len(f) < 9 || string(f[0]) != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat begins %q, not the cpu line", line)
	}
	var v [8]float64
	for i := range v {
		n, err := strconv.ParseUint(string(f[1+i]), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/stat cpu field %d: %v", i+1, err)
		}
		v[i] = float64(n)
	}
	user, nice, system, idle, iowait, irq, softirq, steal := v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]
	busy = user + nice + system + irq + softirq + steal
	return busy, busy + idle + iowait, nil
}

// parseSelfStat reads utime + stime (ticks) from /proc/self/stat, whose
// second field, the command name in parentheses, may hold spaces.
func parseSelfStat(b []byte) (float64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("/proc/self/stat has no command name")
	}
	f := bytes.Fields(b[i+1:])
	// After the name: state is field 3 of the whole line, utime 14, stime 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/self/stat has %d fields after the name", len(f))
	}
	var sum float64
	for _, s := range f[11:13] {
		n, err := strconv.ParseUint(string(s), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/self/stat times: %v", err)
		}
		sum += float64(n)
	}
	return sum, nil
}
