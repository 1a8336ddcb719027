//go:build !linux && !darwin && !windows

package polite

import "github.com/crowdtrain/crowdtrain/worker"

func system(Options) (worker.IdleDetector, error) { return nil, ErrUnsupported }
