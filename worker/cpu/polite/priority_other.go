//go:build !linux && !darwin && !freebsd && !netbsd && !openbsd && !dragonfly && !windows

package polite

import "errors"

// LowerPriority is not available on this operating system.
func LowerPriority() error {
	return errors.New("this operating system has no process priority crowdtrain can set")
}
