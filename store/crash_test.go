package store

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/internal/testenv"
)

// The crash tests re-run this test binary as a child that writes to a
// database until the parent SIGKILLs it, then check what survived.

const (
	crashEnv      = "STORE_CRASH_CHILD" // "write:PATH" or "create:DIR"
	crashParams   = 4 << 20             // bytes of parameters per checkpoint
	crashOptState = 64 << 10
	crashKeep     = 3
)

func crashProgress(v int64) []byte { return []byte(fmt.Sprintf(`{"version":%d}`, v)) }

// crashChildMain runs the child's loop when crashEnv is set, and never
// returns then; otherwise it returns at once.
func crashChildMain() {
	mode, arg, ok := strings.Cut(os.Getenv(crashEnv), ":")
	if !ok {
		return
	}
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		os.Exit(2)
	}
	ctx := context.Background()
	switch mode {
	case "write":
		s, err := Open(arg)
		if err != nil {
			fail(err)
		}
		if _, err := s.NextIncarnation(ctx, "j"); err != nil {
			fail(err)
		}
		c, err := s.LatestCheckpoint(ctx, "j")
		if err != nil {
			fail(err)
		}
		fmt.Println("ready")
		for v := c.Version + 1; ; v++ {
			err := s.SaveCheckpoint(ctx, Checkpoint{JobID: "j", Version: v, Epoch: int(v), Params: pattern(v, crashParams),
				OptState: pattern(-v, crashOptState), Progress: crashProgress(v)}, crashKeep)
			if err != nil {
				fail(err)
			}
			fmt.Printf("saved %d\n", v) // only after the commit returned
			if err := s.AddMetric(ctx, Metric{JobID: "j", Version: v, ExamplesPerSec: float64(v)}); err != nil {
				fail(err)
			}
			if err := s.UpdateJobState(ctx, "j", "running", fmt.Sprintf("v%d", v), time.Time{}); err != nil {
				fail(err)
			}
		}
	case "create":
		fmt.Println("ready")
		for i := 0; ; i++ {
			s, err := Open(filepath.Join(arg, fmt.Sprintf("db-%d", i)))
			if err != nil {
				fail(err)
			}
			if err := s.CreateJob(ctx, JobRecord{ID: "j", State: "running"}); err != nil {
				fail(err)
			}
			s.Close()
		}
	}
	fail(fmt.Errorf("bad %s=%q", crashEnv, os.Getenv(crashEnv)))
}

// runAndKill starts a child, waits for its "ready", lets it run for a
// random time in [min, max) and SIGKILLs it. It returns the last version
// the child reported saved (0: none).
func runAndKill(t *testing.T, rng *rand.Rand, env string, min, max time.Duration) int64 {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), crashEnv+"="+env)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	var saved atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			if line == "ready" {
				close(ready)
			} else if v, ok := strings.CutPrefix(line, "saved "); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				saved.Store(n)
			}
		}
	}()
	select {
	case <-ready:
	case <-done:
		cmd.Wait()
		t.Fatalf("child exited before it was ready: %s", stderr.String())
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("child not ready after 20s")
	}
	delay := min + time.Duration(rng.Int64N(int64(max-min)))
	time.Sleep(delay)
	if err := cmd.Process.Kill(); err != nil { // SIGKILL on Unix: no cleanup runs
		t.Fatal(err)
	}
	<-done
	err = cmd.Wait()
	if cmd.ProcessState.Success() || stderr.Len() > 0 {
		t.Fatalf("child was meant to die by the kill, got %v: %s", err, stderr.String())
	}
	t.Logf("killed after %v: %v, last reported save v%d", delay.Round(time.Millisecond), err, saved.Load())
	return saved.Load()
}

func TestCrashWhileWriting(t *testing.T) {
	testenv.Long(t, "starts and kills child processes")
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "crash.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	mustCreateJob(t, s, "j")
	if err := s.SaveCheckpoint(ctx, Checkpoint{JobID: "j", Version: 0, Params: pattern(0, crashParams),
		OptState: pattern(0, crashOptState), Progress: crashProgress(0)}, crashKeep); err != nil {
		t.Fatal(err)
	}
	s.Close()

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	const kills = 5
	var best int64
	for i := 1; i <= kills; i++ {
		saved := runAndKill(t, rng, "write:"+path, 50*time.Millisecond, 400*time.Millisecond)
		s, err := Open(path)
		if err != nil {
			t.Fatalf("kill %d: reopening: %v", i, err)
		}
		if err := s.IntegrityCheck(ctx); err != nil {
			t.Fatalf("kill %d: %v", i, err)
		}
		j, err := s.Job(ctx, "j")
		if err != nil {
			t.Fatalf("kill %d: the job is gone: %v", i, err)
		}
		if j.Incarnation != int64(i) {
			t.Errorf("kill %d: incarnation %d, want %d", i, j.Incarnation, i)
		}
		c, err := s.LatestCheckpoint(ctx, "j")
		if err != nil {
			t.Fatalf("kill %d: %v", i, err)
		}
		if len(c.Params) != crashParams || !bytes.Equal(c.Params, pattern(c.Version, crashParams)) ||
			!bytes.Equal(c.OptState, pattern(-c.Version, crashOptState)) || !bytes.Equal(c.Progress, crashProgress(c.Version)) {
			t.Fatalf("kill %d: checkpoint v%d is not the one written (%d bytes of params)", i, c.Version, len(c.Params))
		}
		if c.Version < saved {
			t.Errorf("kill %d: latest checkpoint v%d, but the child had committed v%d: a commit was lost", i, c.Version, saved)
		}
		if list, err := s.Checkpoints(ctx, "j"); err != nil || len(list) > crashKeep {
			t.Errorf("kill %d: checkpoints %+v, %v", i, list, err)
		}
		best = c.Version
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if best == 0 {
		t.Error("the children never committed a checkpoint: the kills tested nothing")
	}
	t.Logf("%d kills, latest checkpoint v%d", kills, best)
}

// TestCrashWhileCreating kills a child that creates databases in a loop,
// so some kills land inside Open's initialisation: every file left behind
// must open.
func TestCrashWhileCreating(t *testing.T) {
	testenv.Long(t, "starts and kills child processes")
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for i := range 3 {
		dir := filepath.Join(t.TempDir(), strconv.Itoa(i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		runAndKill(t, rng, "create:"+dir, 10*time.Millisecond, 150*time.Millisecond)
		files, _ := filepath.Glob(filepath.Join(dir, "db-*[0-9]"))
		if len(files) == 0 {
			t.Fatalf("kill %d: the child created nothing", i)
		}
		for _, f := range files {
			s, err := Open(f)
			if err != nil {
				t.Fatalf("kill %d: %v", i, err)
			}
			if err := s.IntegrityCheck(context.Background()); err != nil {
				t.Error(err)
			}
			s.Close()
		}
		t.Logf("kill %d: %d databases reopened", i, len(files))
	}
}
