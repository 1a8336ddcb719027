package coordinator

import (
	"bufio"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/nn"
)

// BytesPerParamHeld is what one parameter of a job costs the coordinator
// in memory, all copies together: the weights (4 bytes), the outer
// optimizer's moments (up to 8), the published snapshots (fp32, fp16 and
// the async prediction: about 10), an evaluation's copy (4), the round's
// sum or the robust clip's centre (up to 8), and the checkpoint buffers
// (weights and moments, 12, up to three sets: the queued one, the one
// being written and the pool's, 36), and the validation's observer (its
// copies of the weights and an update, and its trial vector: 12): about
// 82, rounded down because not every job has them all at once. Older
// published versions and deltas live in the job's snapshot cache,
// bounded apart in bytes (Config.SnapshotCacheBytes).
const BytesPerParamHeld = 72

// fallbackMemory is the memory assumed where it cannot be read: 8 GiB.
const fallbackMemory = 8 << 30

// DefaultMaxParams is the largest model `serve` takes by default: what
// fits, at BytesPerParamHeld, in a quarter of the machine's memory
// (MemTotal of /proc/meminfo on Linux, 8 GiB elsewhere).
func DefaultMaxParams() int64 {
	return machineMemory() / 4 / BytesPerParamHeld
}

// machineMemory is the machine's memory in bytes.
func machineMemory() int64 {
	if runtime.GOOS != "linux" {
		return fallbackMemory
	}
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return fallbackMemory
	}
	defer f.Close()
	if n, ok := memTotal(bufio.NewScanner(f)); ok {
		return n
	}
	return fallbackMemory
}

// memTotal reads MemTotal (kB) from /proc/meminfo's lines.
func memTotal(sc *bufio.Scanner) (int64, bool) {
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, false
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb <= 0 {
			return 0, false
		}
		return kb << 10, true
	}
	return 0, false
}

// checkModelSize refuses a model larger than the server holds
// (Config.MaxParams; 0: no limit).
func (s *Server) checkModelSize(spec jobspec.Spec) error {
	limit := s.cfg.MaxParams
	if limit <= 0 {
		return nil
	}
	m, err := nn.NewModel(spec.Model)
	if err != nil {
		return &jobspec.Error{Key: "model", Problem: err.Error()}
	}
	if n := int64(m.NumParams); n > limit {
		return jobspec.Errorf("model", "has %d parameters, over this coordinator's limit of %d (--max-params; at about %d bytes a parameter it would hold %s, the limit %s): "+
			"use a smaller model, or start serve with a larger --max-params on a machine with the memory for it",
			n, limit, BytesPerParamHeld, byteSize(n*BytesPerParamHeld), byteSize(limit*BytesPerParamHeld))
	}
	return nil
}

// byteSize writes n bytes in MB or GB.
func byteSize(n int64) string {
	if n >= 1e9 {
		return strconv.FormatFloat(float64(n)/1e9, 'f', 1, 64) + " GB"
	}
	return strconv.FormatFloat(float64(n)/1e6, 'f', 1, 64) + " MB"
}
