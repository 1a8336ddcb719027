package polite

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/crowdtrain/crowdtrain/worker"
)

// linuxIdle measures other programs' CPU time between polls and the last
// terminal input (package doc).
type linuxIdle struct {
	o          Options
	stat, self string   // /proc/stat, /proc/self/stat
	ttys       []string // globs of terminals whose access time is their last input
	now        func() time.Time
	prev       cpuTimes
	primed     bool
}

// defaultTTYs are the terminals `w` reads idle times from: pseudo
// terminals (ssh, terminal windows) and the virtual consoles.
var defaultTTYs = []string{"/dev/pts/[0-9]*", "/dev/tty[0-9]*"}

func system(o Options) (worker.IdleDetector, error) {
	d := &linuxIdle{o: o, stat: "/proc/stat", self: "/proc/self/stat", ttys: defaultTTYs, now: time.Now}
	cur, err := d.read()
	if err != nil {
		return nil, fmt.Errorf("cannot measure the CPU load: %w", err)
	}
	d.prev, d.primed = cur, true
	return d, nil
}

func (d *linuxIdle) read() (cpuTimes, error) {
	b, err := os.ReadFile(d.stat)
	if err != nil {
		return cpuTimes{}, err
	}
	busy, total, err := parseProcStat(b)
	if err != nil {
		return cpuTimes{}, err
	}
	if b, err = os.ReadFile(d.self); err != nil {
		return cpuTimes{}, err
	}
	own, err := parseSelfStat(b)
	return cpuTimes{busy: busy, total: total, own: own}, err
}

func (d *linuxIdle) Idle() (bool, string) {
	cur, err := d.read()
	if err != nil {
		return false, "cannot read the CPU load: " + err.Error()
	}
	share, ok := othersShare(d.prev, cur)
	ok = ok && d.primed
	if ok || !d.primed {
		d.prev, d.primed = cur, true
	}
	return judge(d.o, share, ok, d.lastInput())
}

// lastInput is the newest access time among the terminals: the kernel
// sets a terminal's atime when a program reads what was typed on it.
func (d *linuxIdle) lastInput() input {
	var newest time.Time
	where := ""
	for _, g := range d.ttys {
		names, _ := filepath.Glob(g)
		for _, n := range names {
			fi, err := os.Stat(n)
			if err != nil {
				continue
			}
			st, ok := fi.Sys().(*syscall.Stat_t)
			if !ok {
				continue
			}
			if a := time.Unix(st.Atim.Unix()); a.After(newest) {
				newest, where = a, "on "+n
			}
		}
	}
	if newest.IsZero() {
		return input{}
	}
	return input{known: true, ago: max(d.now().Sub(newest), 0), where: where}
}
