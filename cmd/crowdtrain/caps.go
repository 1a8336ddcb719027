package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	"github.com/crowdtrain/crowdtrain/protocol"
)

// nativeCaps is what a native worker tells the coordinator it can run:
// memoryMB when given (--memory-mb), else the memory the system has
// available now (0, unknown, where it cannot tell).
func nativeCaps(memoryMB int) *protocol.Caps {
	if memoryMB <= 0 {
		memoryMB = availableMB()
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
