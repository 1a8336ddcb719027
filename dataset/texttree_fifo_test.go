//go:build linux || darwin

package dataset

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A FIFO that matches the glob is refused without blocking on it.
func TestReadTextTreeRefusesFIFO(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.txt"), []byte("text"))
	writeFile(t, filepath.Join(dir, "b.txt"), []byte("more"))
	if err := syscall.Mkfifo(filepath.Join(dir, "sub", "pipe.txt"), 0o644); err != nil {
		writeFile(t, filepath.Join(dir, "sub", "x"), nil)
		if err := syscall.Mkfifo(filepath.Join(dir, "sub", "pipe.txt"), 0o644); err != nil {
			t.Skipf("mkfifo: %v", err)
		}
	}
	done := make(chan error, 1)
	go func() { _, err := ReadTextTree(dir, "**/*.txt", 0.1); done <- err }()
	select {
	case err := <-done:
		wantKeyError(t, err, "dataset.path", filepath.Join(dir, "sub", "pipe.txt"), "named pipe (FIFO)")
	case <-time.After(5 * time.Second):
		t.Fatal("ReadTextTree blocked on a FIFO")
	}
}
