package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/attack"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
)

func TestAttackBadFlagsExitWithStatus2(t *testing.T) {
	cases := []struct {
		args  []string
		words []string
	}{
		{[]string{"attack", "--kind", "signflip"}, []string{"--coordinator"}},
		{[]string{"attack", "--coordinator", "ws://127.0.0.1:1/ws"}, []string{"--kind", "signflip", "sybil"}},
		{[]string{"attack", "--coordinator", "ws://127.0.0.1:1/ws", "--kind", "krum"}, []string{"krum", "signflip"}},
		{[]string{"attack", "--coordinator", "http://127.0.0.1:1", "--kind", "nan"}, []string{"ws://"}},
		{[]string{"attack", "--coordinator", "ws://127.0.0.1:1/ws", "--kind", "nan", "--n", "-2"}, []string{"n must"}},
		{[]string{"attack", "--coordinator", "ws://127.0.0.1:1/ws", "--kind", "nan", "--scale", "-1"}, []string{"scale"}},
		{[]string{"attack", "--coordinator", "ws://127.0.0.1:1/ws", "--kind", "signflip", "--fraction", "0"}, []string{"--fraction"}},
		{[]string{"attack", "--coordinator", "ws://127.0.0.1:1/ws", "--kind", "signflip", "--fraction", "1.5"}, []string{"--fraction"}},
		{[]string{"attack", "--coordinator", "ws://127.0.0.1:1/ws", "--kind", "nan", "--bind", "nowhere"}, []string{"bind", "nowhere"}},
		{[]string{"attack", "--coordinator", "ws://127.0.0.1:1/ws", "--kind", "nan", "--duration", "-1s"}, []string{"--duration"}},
		{[]string{"attack", "--coordinator", "ws://127.0.0.1:1/ws", "--kind", "nan", "extra"}, []string{"extra"}},
	}
	for _, c := range cases {
		code, _, stderr := runCmd(t, context.Background(), c.args...)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2 (stderr %q)", c.args, code, stderr)
		}
		for _, w := range c.words {
			if !strings.Contains(stderr, w) {
				t.Errorf("%v: stderr %q should mention %q", c.args, stderr, w)
			}
		}
	}
}

// attackReport is what a crowdtrain attack process printed.
type attackReport struct {
	text                     string
	connections, leases      int
	sent, accepted, rejected int
	variants                 map[string][3]int // sent, accepted, rejected
}

var (
	reHead    = regexp.MustCompile(`attack \S+: \d+ attackers, (\d+) connections \(\d+ worker ids\), (\d+) leases granted`)
	reVariant = regexp.MustCompile(`(?m)^  (\S+)\s+sent (\d+), accepted (\d+), rejected (\d+)`)
)

func parseAttackReport(t *testing.T, text string) attackReport {
	t.Helper()
	r := attackReport{text: text, variants: map[string][3]int{}}
	m := reHead.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no report head in:\n%s", text)
	}
	r.connections, _ = strconv.Atoi(m[1])
	r.leases, _ = strconv.Atoi(m[2])
	for _, v := range reVariant.FindAllStringSubmatch(text, -1) {
		var c [3]int
		for i := range 3 {
			c[i], _ = strconv.Atoi(v[2+i])
		}
		r.variants[v[1]] = c
	}
	tot, ok := r.variants["total"]
	if !ok {
		t.Fatalf("no total line in:\n%s", text)
	}
	r.sent, r.accepted, r.rejected = tot[0], tot[1], tot[2]
	return r
}

// runAttack runs crowdtrain attack to its end (--duration) and parses
// what it printed.
func startAttack(t *testing.T, addr string, kind attack.Kind, bind string, extra ...string) *proc {
	t.Helper()
	args := append([]string{"attack", "--coordinator", "ws://" + addr + "/ws", "--kind", string(kind), "--bind", bind}, extra...)
	return startProc(t, args...)
}

func (p *proc) waitExit(timeout time.Duration) error {
	p.t.Helper()
	select {
	case err := <-p.done:
		time.Sleep(100 * time.Millisecond) // the log reader drains
		return err
	case <-time.After(timeout):
		p.t.Fatalf("process still running after %v; log:\n%s", timeout, p.logText())
		return nil
	}
}

// hostileJob has no spot checks: these tests read an accepted ack as an
// applied result, and a spot check's copy is acked accepted when it agrees
// without being applied (spotcheck_test.go tests them).
const hostileJob = "name: hostile\nmodel: mnist-mlp\nmax_epochs: 50\ntarget_accuracy: 0.999\nspot_check: 0\n"

// Every kind runs against a real coordinator, sends what it forges (or
// holds its leases), and reports the coordinator's acks.
func TestAttackEveryKindSendsAndReportsAcks(t *testing.T) {
	testenv.Long(t, "runs coordinator and attack processes")
	dir := t.TempDir()
	spec := filepath.Join(dir, "job.yaml")
	os.WriteFile(spec, []byte(hostileJob), 0o644)
	addr := freeAddr(t)
	startProc(t, "serve", "--addr", addr, "--db", "", "--job", spec, "--local-workers", "1")
	waitJob(t, addr, time.Minute, "an honest warm-up", func(v coordinator.JobView) bool { return v.Version >= 20 })

	// early and sybil last: early's huge updates would make the others'
	// runs about a broken model, and sybil's 20 connections would hold the
	// address's share of the leases while the others ran.
	// forge-rollout answers RL jobs' rollout leases only: an RL job has
	// its own test (TestRLJobBansARolloutForger).
	var first, last []attack.Kind
	for _, k := range attack.Kinds {
		if k == attack.ForgeRollout {
			continue
		}
		if k == attack.Early || k == attack.Sybil {
			last = append(last, k)
		} else {
			first = append(first, k)
		}
	}
	reports := map[attack.Kind]attackReport{}
	for _, group := range [][]attack.Kind{first, last} {
		procs := map[attack.Kind]*proc{}
		for _, k := range group {
			i := len(reports) + len(procs)
			procs[k] = startAttack(t, addr, k, fmt.Sprintf("127.0.0.%d", 10+i), "--duration", "8s")
		}
		for k, p := range procs {
			if err := p.waitExit(time.Minute); err != nil {
				t.Fatalf("%s: %v; log:\n%s", k, err, p.logText())
			}
			reports[k] = parseAttackReport(t, p.logText())
		}
	}
	// An attack on another job than the coordinator assigns stops with
	// an error naming both.
	wrong := startAttack(t, addr, attack.SignFlip, "127.0.0.30", "--job", "no-such-job", "--duration", "30s")
	if err := wrong.waitExit(20 * time.Second); err == nil || !strings.Contains(wrong.logText(), `the attack is for job "no-such-job"`) {
		t.Errorf("--job no-such-job: exit %v; want a failure naming the job; log:\n%s", err, wrong.logText())
	}
	for _, k := range attack.Kinds {
		r, ok := reports[k]
		if !ok {
			continue // forge-rollout
		}
		t.Logf("%s:\n%s", k, r.text)
		if r.connections < 1 || r.leases < 1 {
			t.Errorf("%s: %d connections, %d leases; want at least one of each", k, r.connections, r.leases)
			continue
		}
		switch k {
		case attack.Hostage:
			if r.sent != 0 {
				t.Errorf("hostage sent %d results; it must never answer", r.sent)
			}
			continue
		case attack.Sybil:
			// All-zero answers strike the volunteer: it may be banned
			// before its last connections say hello.
			if r.connections < 20 && !strings.Contains(r.text, "banned") {
				t.Errorf("sybil: %d connections, want 20 (or a ban)", r.connections)
			}
		case attack.Zero:
			if r.accepted != 0 || !strings.Contains(r.text, "all zeros") {
				t.Errorf("zero: %d accepted; want every one refused as all zeros", r.accepted)
			}
		case attack.NaN:
			if r.accepted != 0 || !strings.Contains(r.text, "invalid") {
				t.Errorf("nan: %d accepted; want every one refused as invalid", r.accepted)
			}
		case attack.Scale:
			if !strings.Contains(r.text, "max_update_norm_ratio is 20") || !strings.Contains(r.text, "scale 19") {
				t.Errorf("scale did not read the job's gate of 20 from its spec")
			}
		case attack.Replay:
			// A replayed result is refused: under a new lease as a
			// duplicate of the accepted update (abuse_test.go checks the
			// reasons), under the same lease again as unknown.
			same, again := r.variants["replay-same-lease"], r.variants["replay-new-lease"]
			if same[0] < 1 || same[1]+same[2] < 1 || again[0] < 1 || again[1]+again[2] < 1 {
				t.Errorf("replay: same lease %v, new lease %v (sent, accepted, rejected); want both re-sent and acked", same, again)
			}
			if same[1] != 0 || again[1] != 0 {
				t.Errorf("replay: %d replays under the same lease and %d under a new lease were applied, want 0", same[1], again[1])
			}
		}
		if r.sent < 1 || r.accepted+r.rejected < 1 {
			t.Errorf("%s: sent %d, acked %d; want results sent and acked", k, r.sent, r.accepted+r.rejected)
		}
	}
}

// Today's weaknesses, measured: one attacker of three against two honest
// workers, for one epoch of mnist-mlp in async mode. The issue measured,
// after 10 epochs: early 0.12, scale 0.089, ratchet 0.098. These tests
// assert that forged results were sent and acked and that the job's accuracy was
// measured, and log it against the job's target; they do not assert that
// the model dies, nor that the forgeries were accepted, so that they keep
// passing once robust aggregation bounds the attacks (then they can assert
// the target).
func TestAttackOneOfThreeToday(t *testing.T) {
	testenv.Long(t, "runs coordinator, worker and attack processes")
	for i, k := range []attack.Kind{attack.Early, attack.Scale, attack.Ratchet} {
		t.Run(string(k), func(t *testing.T) { oneOfThree(t, k, fmt.Sprintf("127.0.0.%d", 40+i)) })
	}
}

func oneOfThree(t *testing.T, kind attack.Kind, bind string) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "job.yaml")
	os.WriteFile(spec, []byte("name: one-of-three\nmodel: mnist-mlp\nmax_epochs: 1\n"), 0o644)
	addr := freeAddr(t)
	srv := startProc(t, "serve", "--addr", addr, "--db", "", "--job", spec)
	waitJob(t, addr, time.Minute, "the coordinator", func(coordinator.JobView) bool { return true })
	// The attacker first: early's point is to arrive before the gate
	// has honest norms to compare against.
	a := startAttack(t, addr, kind, bind, "--duration", "3m")
	a.waitLine("connected as", 30*time.Second)
	startProc(t, "work", "--coordinator", "ws://"+addr+"/ws")
	startProc(t, "work", "--coordinator", "ws://"+addr+"/ws")
	done := waitJob(t, addr, 170*time.Second, "the epoch to end", func(v coordinator.JobView) bool {
		return v.State != coordinator.StateRunning && v.State != coordinator.StateFinishing
	})
	_ = a.cmd.Process.Signal(os.Interrupt)
	if err := a.waitExit(30 * time.Second); err != nil {
		t.Fatalf("attack: %v; log:\n%s", err, a.logText())
	}
	r := parseAttackReport(t, a.logText())
	t.Logf("attack:\n%s", r.text)
	if f := r.variants["forged"]; f[0] < 1 || f[1]+f[2] < 1 {
		t.Fatalf("no forged %s update was sent and acked: %+v; log:\n%s", kind, r.variants, srv.logText())
	}
	if done.Eval == nil {
		t.Fatalf("job ended %s (%s) with no evaluation", done.State, done.Reason)
	}
	t.Logf("today's weakness: with 1 %s attacker of 3, %d of its %d forged updates were applied and the job ended %s (%s) at accuracy %.4f after version %d (target %.2f)",
		kind, r.variants["forged"][1], r.variants["forged"][0], done.State, done.Reason, done.Eval.Accuracy, done.Version, done.Spec.TargetAccuracy)
}
