//go:build linux || darwin

package coordinator

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A FIFO given as init is refused at once, not waited on for a writer.
func TestInitFileThatIsAFIFOIsRefused(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "pipe.safetensors")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	m := initTestModel(t)
	done := make(chan string, 1)
	go func() { done <- initProblem(t, fifo, m) }()
	select {
	case problem := <-done:
		if !strings.Contains(problem, "named pipe") {
			t.Errorf("%q does not say the file is a named pipe", problem)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reading a FIFO as init blocked for 5 s")
	}
}
