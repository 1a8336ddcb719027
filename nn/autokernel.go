package nn

import (
	"fmt"
	"slices"
	"strings"
)

// Choosing a GEMM kernel by measurement (--kernel auto). The measuring is
// done by the caller, on the model it is about to train (package
// worker/cpu); these functions only judge the figures, so that the choice
// can be tested without timing anything.

// KernelTiming is what one kernel measured: the seconds per example of each
// timed sample (a sample is one or more training steps).
type KernelTiming struct {
	Name string
	Secs []float64
}

// Median returns the median seconds per example, or 0 without samples.
func (t KernelTiming) Median() float64 {
	if len(t.Secs) == 0 {
		return 0
	}
	s := slices.Clone(t.Secs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Rate returns the median examples per second, or 0 without samples.
func (t KernelTiming) Rate() float64 {
	m := t.Median()
	if m <= 0 {
		return 0
	}
	return 1 / m
}

// FastestKernel returns the index in ts of the kernel with the lowest
// median time per example, or -1 when none has a sample. Ties go to the
// earlier one.
func FastestKernel(ts []KernelTiming) int {
	best := -1
	for i, t := range ts {
		m := t.Median()
		if m <= 0 {
			continue
		}
		if best < 0 || m < ts[best].Median() {
			best = i
		}
	}
	return best
}

// KeepAfterWarmup returns the indices of the kernels whose warm-up time per
// example (warm[i], seconds; 0 = failed or not run) is within factor of the
// fastest warm-up: the others are so much slower that timing them again
// would only spend the budget.
func KeepAfterWarmup(warm []float64, factor float64) []int {
	best := 0.0
	for _, w := range warm {
		if w > 0 && (best == 0 || w < best) {
			best = w
		}
	}
	var keep []int
	for i, w := range warm {
		if w > 0 && w <= factor*best {
			keep = append(keep, i)
		}
	}
	return keep
}

// SwitchKernel decides, from timings of the kernels on the same batches,
// whether to leave current: it returns the name of the fastest kernel when
// that is faster than current by more than margin (0.05 = 5%), and current
// otherwise (also when current has no samples of its own, or nobody has).
func SwitchKernel(current string, ts []KernelTiming, margin float64) string {
	best := FastestKernel(ts)
	if best < 0 {
		return current
	}
	var cur float64
	for _, t := range ts {
		if t.Name == current {
			cur = t.Median()
		}
	}
	if cur <= 0 {
		return current
	}
	if ts[best].Name != current && ts[best].Median()*(1+margin) < cur {
		return ts[best].Name
	}
	return current
}

// FormatTimings writes each kernel's median examples/s and its number of
// samples, fastest first, for the log.
func FormatTimings(ts []KernelTiming) string {
	order := make([]int, 0, len(ts))
	for i := range ts {
		order = append(order, i)
	}
	slices.SortStableFunc(order, func(a, b int) int {
		ra, rb := ts[a].Rate(), ts[b].Rate()
		switch {
		case ra > rb:
			return -1
		case ra < rb:
			return 1
		}
		return 0
	})
	parts := make([]string, 0, len(ts))
	for _, i := range order {
		t := ts[i]
		if len(t.Secs) == 0 {
			parts = append(parts, t.Name+" not timed")
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.0f examples/s (median of %d)", t.Name, t.Rate(), len(t.Secs)))
	}
	return strings.Join(parts, ", ")
}
