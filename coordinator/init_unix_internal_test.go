//go:build linux || darwin

package coordinator

import (
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/jobspec"
)

// A FIFO given as init is refused at once, not waited on for a writer.
func TestInitFileThatIsAFIFOIsRefused(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "pipe.safetensors")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	m := initTestModel(t)
	done := make(chan error, 1)
	go func() {
		_, err := readInitFile(fifo, m)
		done <- err
	}()
	select {
	case err := <-done:
		var se *jobspec.Error
		if !errors.As(err, &se) || se.Key != "init" || !strings.Contains(se.Problem, fifo) || !strings.Contains(se.Problem, "named pipe") {
			t.Errorf("got %v; want an init error saying %s is a named pipe", err, fifo)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reading a FIFO as init blocked for 5 s")
	}
}
