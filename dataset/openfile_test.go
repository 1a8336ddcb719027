//go:build linux || darwin

package dataset

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A FIFO (no writer: opening it would wait for one) and a device are
// refused at once, by every reader of data files, with an error naming the
// path and what it is; a regular file still reads.
func TestDataReadersRefuseWhatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	zero := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	readers := map[string]func(string) error{
		"ReadIDXFile": func(p string) error { _, err := ReadIDXFile(p); return err },
		"ReadNPYFile": func(p string) error { _, err := ReadNPYFile(p); return err },
		"ReadText":    func(p string) error { _, err := ReadText(p); return err },
		"ReadJSONLTask": func(p string) error {
			_, err := ReadJSONLTask("task.path", p)
			return err
		},
	}
	for path, what := range map[string]string{fifo: "named pipe (FIFO)", zero: "character device"} {
		for name, read := range readers {
			done := make(chan error, 1)
			go func() { done <- read(path) }()
			select {
			case err := <-done:
				var nr *NotRegularError
				if !errors.As(err, &nr) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), what) {
					t.Errorf("%s(%s): %v; want a NotRegularError naming the path and %q", name, path, err, what)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("%s(%s) blocked", name, path)
			}
		}
	}
	text := filepath.Join(dir, "text")
	os.WriteFile(text, []byte("in the beginning"), 0o644)
	if b, err := ReadText(text); err != nil || string(b) != "in the beginning" {
		t.Fatalf("ReadText of a regular file: %q, %v", b, err)
	}
}
