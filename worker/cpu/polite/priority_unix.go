//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package polite

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"
)

// LowNice is the niceness LowerPriority sets.
const LowNice = 10

// LowerPriority runs this process at nice 10, unless it runs nicer
// already. Linux keeps a niceness per thread, so every thread of the
// process is set (new threads inherit it from the one that starts them).
func LowerPriority() error {
	ids := []int{0}
	if runtime.GOOS == "linux" {
		// Twice: a thread started during the first pass is caught by the
		// second.
		ids = append(tasks(), tasks()...)
	}
	for _, id := range ids {
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, id, LowNice); err != nil && !nicer(id) {
			return fmt.Errorf("setpriority nice %d: %w", LowNice, err)
		}
	}
	return nil
}

// nicer reports whether thread (or process) id runs at nice 10 or more:
// lowering it to 10 then needs a privilege, and is no loss.
func nicer(id int) bool {
	p, err := syscall.Getpriority(syscall.PRIO_PROCESS, id)
	if err != nil {
		return false
	}
	if runtime.GOOS == "linux" {
		p = 20 - p // the raw system call answers 20 - nice
	}
	return p >= LowNice
}

func tasks() []int {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return []int{0}
	}
	var ids []int
	for _, e := range ents {
		if id, err := strconv.Atoi(e.Name()); err == nil {
			ids = append(ids, id)
		}
	}
	return ids
}
