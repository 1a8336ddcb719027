package coordinator

import (
	"bufio"
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/store"
)

// gptSmallJob is a job of the gpt-small preset's model and optimizer, on
// a small text whose byte tokens stand for a 4096-token vocabulary's: what
// a checkpoint holds does not depend on the data.
func gptSmallJob(t *testing.T, id string) *Job {
	t.Helper()
	spec, err := jobspec.Load("gpt-small")
	if err != nil {
		t.Fatal(err)
	}
	spec.Tokenizer = nil
	spec.ShardSize = 64
	text := bytes.Repeat([]byte("func main() { println(\"hello, checkpoint\") }\n"), 800)
	train, test, err := dataset.TextSplits("text", "dataset", text, spec.Model.Input[0], 0.2)
	if err != nil {
		t.Fatal(err)
	}
	// As a 4096-token tokenizer's ids: the bytes are among them.
	for _, set := range []*dataset.Set{train, test} {
		set.Elem, set.Classes, set.U16 = dataset.Tokens16, 4096, make([]uint16, len(set.U8))
		for i, b := range set.U8 {
			set.U16[i] = uint16(b)
		}
		set.U8 = nil
	}
	var ids atomic.Uint64
	j, err := newJob(id, spec, train, test, &ids, LogfLogger(t.Logf))
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// peakRSS is the process's peak resident set since the last resetPeakRSS
// (VmHWM), in bytes; ok is false where Linux's /proc does not say.
func peakRSS() (n int64, ok bool) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, found := strings.CutPrefix(sc.Text(), "VmHWM:"); found {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}

// resetPeakRSS sets VmHWM to the current resident set (Linux 4.0+).
func resetPeakRSS() bool { return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil }

// gpt-small's checkpoint (12.3M parameters and AdamW's two moments, 147
// MB) is written by the job's writer in chunks without a second copy of
// the model: the write allocates (Go heap) and grows the process's peak
// resident set (which counts SQLite's C memory too) by well under half
// the model's 49 MB (one row grew it by 1.3 times the whole state). A job
// resumed from it has the very parameters and optimizer state, bit for
// bit.
func TestGPTSmallCheckpointInChunksAndResume(t *testing.T) {
	testenv.Long(t, "writes and reads gpt-small's 147 MB checkpoint")
	j := gptSmallJob(t, "gpt-small-ckpt")
	n := j.model.NumParams
	if n < 12_000_000 {
		t.Fatalf("gpt-small has %d parameters, want about 12.3M", n)
	}
	modelBytes := int64(4 * n)
	r := rand.New(rand.NewPCG(7, 8))
	st := &j.st
	for i := range st.model.Params {
		st.model.Params[i] = float32(r.NormFloat64() * 0.02)
	}
	vectors, _ := st.model.Opt.State()
	if len(vectors) != 2 {
		t.Fatalf("gpt-small's outer optimizer keeps %d vectors, want AdamW's two", len(vectors))
	}
	moments := make([][]float32, len(vectors))
	for k := range moments {
		moments[k] = make([]float32, n)
		for i := range moments[k] {
			moments[k][i] = float32(math.Abs(r.NormFloat64()) * 1e-3)
		}
	}
	if err := st.model.Opt.SetState(moments, 123); err != nil {
		t.Fatal(err)
	}

	db, err := store.Open(filepath.Join(t.TempDir(), "ckpt.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if err := db.CreateJob(ctx, store.JobRecord{ID: j.ID, Name: "gpt-small", Spec: []byte("{}"), State: StateRunning, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	j.store, j.saveCheckpoint = db, db.SaveCheckpointState
	bufs := j.getBuffers()
	// A first checkpoint warms SQLite's and malloc's pools up, as a job's
	// first does; the one after is measured.
	st.model.Version = 41
	if err := j.writeCheckpoint(ctx, &checkpointOp{c: j.copyState(bufs), state: StateRunning}, 5); err != nil {
		t.Fatal(err)
	}
	st.model.Version = 42
	op := &checkpointOp{c: j.copyState(bufs), bufs: bufs, state: StateRunning}
	stateBytes := int64(len(op.c.Params) + len(op.c.OptState))

	// The write, as the job's writer does it, measured alone.
	runtime.GC()
	debug.FreeOSMemory()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	rssBefore, rssOK := peakRSS()
	rssOK = rssOK && resetPeakRSS()
	if rssOK {
		rssBefore, rssOK = peakRSS()
	}
	start := time.Now()
	if err := j.writeCheckpoint(ctx, op, 5); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	alloc := int64(after.TotalAlloc - before.TotalAlloc)
	t.Logf("checkpoint of %d bytes (model %d) written in %v: the write allocated %d bytes (%.3fx the model)",
		stateBytes, modelBytes, took.Round(time.Millisecond), alloc, float64(alloc)/float64(modelBytes))
	if alloc > modelBytes/2 {
		t.Errorf("the write allocated %d bytes, over half the model's %d: a second copy of the model", alloc, modelBytes)
	}
	if rssOK {
		peak, _ := peakRSS()
		grew := peak - rssBefore
		t.Logf("peak resident set grew by %d bytes (%.3fx the model)", grew, float64(grew)/float64(modelBytes))
		if grew > modelBytes/2 {
			t.Errorf("the write grew the peak resident set by %d bytes, over half the model's %d", grew, modelBytes)
		}
	}
	if infos, err := db.Checkpoints(ctx, j.ID); err != nil || len(infos) != 2 || infos[0].Version != 42 || infos[0].Bytes != stateBytes+int64(len(op.c.Progress)) {
		t.Fatalf("checkpoints listed: %+v, %v; want v42 of %d bytes first", infos, err, stateBytes+int64(len(op.c.Progress)))
	}

	// Resume into a fresh job.
	c, err := db.LatestCheckpoint(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	j2 := gptSmallJob(t, j.ID)
	if err := j2.restore(c); err != nil {
		t.Fatal(err)
	}
	if j2.st.model.Version != 42 {
		t.Errorf("resumed at version %d, want 42", j2.st.model.Version)
	}
	for i, p := range j2.st.model.Params {
		if math.Float32bits(p) != math.Float32bits(st.model.Params[i]) {
			t.Fatalf("parameter %d: resumed %v, checkpointed %v", i, p, st.model.Params[i])
		}
	}
	got, steps := j2.st.model.Opt.State()
	if steps != 123 || len(got) != len(moments) {
		t.Fatalf("resumed optimizer: %d vectors at step %d, want %d at 123", len(got), steps, len(moments))
	}
	for k := range moments {
		for i := range moments[k] {
			if math.Float32bits(got[k][i]) != math.Float32bits(moments[k][i]) {
				t.Fatalf("optimizer vector %d, value %d: resumed %v, checkpointed %v", k, i, got[k][i], moments[k][i])
			}
		}
	}
}
