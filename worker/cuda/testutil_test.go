//go:build linux

package cuda

import "os"

// The emulator library outlives single tests (it stays loaded), so it is
// built in a folder of its own rather than a test's TempDir.
func mkdirTemp() (string, error)    { return os.MkdirTemp("", "crowdtrain-cudaemu-") }
func symlink(old, new string) error { return os.Symlink(old, new) }
