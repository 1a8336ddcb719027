package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	"github.com/crowdtrain/crowdtrain/protocol"
)

// workerCaps is what a worker on backend b tells the coordinator it can
// run: memoryMB when given (--memory-mb); else a GPU's device memory, or
// the memory the system has available now (0, unknown, where it cannot
// tell).
func workerCaps(b any, memoryMB int) *protocol.Caps {
	if memoryMB <= 0 {
		if d, ok := b.(interface{ MemoryMB() int }); ok {
			memoryMB = d.MemoryMB()
		} else {
			memoryMB = availableMB()
		}
	}
	return &protocol.Caps{MemoryMB: memoryMB}
}

// availableMB reads MemAvailable from /proc/meminfo (Linux), 0 elsewhere.
func availableMB() int {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemAvailable:" {
			kb, err := strconv.Atoi(fields[1])
			if err != nil {
				return 0
			}
			return kb / 1024
		}
	}
	return 0
}
