package polite

import (
	"math"
	"os/exec"
	"runtime"
	"syscall"
	"time"

	"github.com/crowdtrain/crowdtrain/worker"
)

// darwinIdle reads HIDIdleTime and the load average (package doc).
type darwinIdle struct {
	o       Options
	lastAt  time.Time
	lastOwn time.Duration
	ownAvg  float64 // this process's CPUs in use, averaged like the load
}

func system(o Options) (worker.IdleDetector, error) {
	if _, err := loadavg(); err != nil {
		return nil, err
	}
	return &darwinIdle{o: o, lastAt: time.Now(), lastOwn: ownCPU()}, nil
}

func loadavg() (float64, error) {
	s, err := syscall.Sysctl("vm.loadavg")
	if err != nil {
		return 0, err
	}
	return parseLoadavg([]byte(s))
}

func ownCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func (d *darwinIdle) Idle() (bool, string) {
	now, own := time.Now(), ownCPU()
	if dt := now.Sub(d.lastAt); dt > 0 {
		// The load average decays over a minute: so does our own share.
		rate := float64(own-d.lastOwn) / float64(dt)
		a := 1 - math.Exp(-dt.Seconds()/60)
		d.ownAvg += a * (rate - d.ownAvg)
	}
	d.lastAt, d.lastOwn = now, own
	load, err := loadavg()
	if err != nil {
		return false, "cannot read the load average: " + err.Error()
	}
	share := min(max((load-d.ownAvg)/float64(runtime.NumCPU()), 0), 1)
	in := input{}
	if out, err := exec.Command("ioreg", "-c", "IOHIDSystem").Output(); err == nil {
		if ago, err := parseHIDIdle(out); err == nil {
			in = input{known: true, ago: ago, where: "(keyboard, mouse or trackpad)"}
		}
	}
	return judge(d.o, share, true, in)
}
