package main

import (
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

// serveJob starts a coordinator process on a job spec written from yaml,
// with extra serve flags, and waits for its job.
func serveJob(t *testing.T, yaml string, extra ...string) (addr string, srv *proc) {
	t.Helper()
	spec := filepath.Join(t.TempDir(), "job.yaml")
	if err := os.WriteFile(spec, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	addr = freeAddr(t)
	srv = startProc(t, append([]string{"serve", "--addr", addr, "--db", "", "--job", spec}, extra...)...)
	waitJob(t, addr, time.Minute, "the coordinator", func(coordinator.JobView) bool { return true })
	return addr, srv
}

// stopAttack interrupts an attack process and parses its report.
func stopAttack(t *testing.T, a *proc) attackReport {
	t.Helper()
	_ = a.cmd.Process.Signal(os.Interrupt)
	if err := a.waitExit(30 * time.Second); err != nil {
		t.Fatalf("attack: %v; log:\n%s", err, a.logText())
	}
	return parseAttackReport(t, a.logText())
}

var rePeakHeld = regexp.MustCompile(`at most (\d+) held at once`)

func peakHeld(t *testing.T, r attackReport) int {
	t.Helper()
	m := rePeakHeld.FindStringSubmatch(r.text)
	if m == nil {
		t.Fatalf("no peak held in:\n%s", r.text)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// ended reports whether v's job has stopped for good: not running, and
// not finishing (its last evaluation and checkpoint under way, the view's
// state and Eval not yet final).
func ended(v coordinator.JobView) bool {
	return v.State != coordinator.StateRunning && v.State != coordinator.StateFinishing
}

// A hostage takes leases and never answers. With a short lease timeout
// its leases expire, its lease cap is halved, and after three expiries in
// a row it is dropped and its reconnects are refused as rate_limited;
// two honest workers complete the epoch with every example counted once.
func TestHostageIsLimitedThenDropped(t *testing.T) {
	testenv.Long(t, "runs coordinator, worker and attack processes")
	// Four epochs: time for the hostage's three expiries in a row.
	addr, srv := serveJob(t, "name: hostage\nmodel: mnist-mlp\nmax_epochs: 4\ntarget_accuracy: 0.999\nlease_timeout: 2s\n")
	h := startAttack(t, addr, attack.Hostage, "127.0.0.2", "--duration", "5m")
	h.waitLine("connected as", 30*time.Second)
	startProc(t, "work", "--coordinator", "ws://"+addr+"/ws")
	startProc(t, "work", "--coordinator", "ws://"+addr+"/ws")
	srv.waitLine("it may hold 1 leases now", time.Minute)
	srv.waitLine("dropped: 3 leases expired in a row", time.Minute)
	done := waitJob(t, addr, 4*time.Minute, "the epoch to end", ended)
	r := stopAttack(t, h)
	t.Logf("hostage:\n%s", r.text)
	// An honest result the validation refused and its recomputation
	// vindicated is credited, not applied: its examples count for the
	// epoch outside examples_seen.
	if seen := done.ExamplesSeen + done.Rechecks.VindicatedExamples; done.Epoch != 4 || seen != 4*60000 {
		t.Fatalf("job ended %s (%s) at epoch %d with %d examples (%d applied, %d vindicated); want 4 epochs complete, each example once in each; log:\n%s",
			done.State, done.Reason, done.Epoch, seen, done.ExamplesSeen, done.Rechecks.VindicatedExamples, srv.logText())
	}
	if done.Abuse.DroppedVolunteers < 1 || done.LeasesExpired < 3 {
		t.Errorf("job view: %d leases expired, abuse %+v; want the hostage's expiries and its drop counted", done.LeasesExpired, done.Abuse)
	}
	if r.sent != 0 || !strings.Contains(r.text, "rate_limited") {
		t.Errorf("the hostage sent %d results; its reconnects should have been refused as rate_limited:\n%s", r.sent, r.text)
	}
}

// A hostage that takes the first leases and sits on them, with a lease
// timeout far longer than the test, cannot stall the epoch: once the
// queue (or the open round) has nothing for the honest workers and its
// leases straggle, they get backups, whose results count for its tasks;
// in sync and DiLoCo, its lease of a round that closed is taken back and
// its task leased again.
func TestStragglerBackupsEndTheEpochUnderAHostage(t *testing.T) {
	testenv.Long(t, "runs coordinator, worker and attack processes")
	for i, c := range []struct {
		mode, spec          string
		held                int   // the hostage's leases
		answered, reclaimed int64 // at least
	}{
		// The hostage's two leases are the queue's first tasks: both
		// are backed up at the epoch's end.
		{"async", "", 2, 2, 0},
		// A round gives a worker one place at a time. Round 1 has 3
		// places (backup_workers 1): the hostage's and two honest ones,
		// whose results close it; the hostage's lease, of a closed round
		// now, is taken back.
		{"sync", "mode: sync\nround_size: 2\nround_timeout: 30m\n", 1, 0, 1},
		// Round 1's two places are the hostage's and an honest one: a
		// backup of the hostage's closes it.
		{"diloco", "mode: diloco\nround_size: 2\nlocal_steps: 8\nround_timeout: 30m\n", 1, 1, 0},
	} {
		t.Run(c.mode, func(t *testing.T) {
			addr, srv := serveJob(t, "name: straggler\nmodel: mnist-mlp\nmax_epochs: 1\ntarget_accuracy: 0.999\nlease_timeout: 30m\n"+c.spec)
			h := startAttack(t, addr, attack.Hostage, "127.0.0."+strconv.Itoa(3+i), "--duration", "5m")
			h.waitLine("connected as", 30*time.Second)
			waitJob(t, addr, 30*time.Second, "the hostage's leases", func(v coordinator.JobView) bool { return v.LeasesHeld == c.held })
			startProc(t, "work", "--coordinator", "ws://"+addr+"/ws")
			startProc(t, "work", "--coordinator", "ws://"+addr+"/ws")
			done := waitJob(t, addr, 4*time.Minute, "the epoch to end", ended)
			r := stopAttack(t, h)
			t.Logf("%s: abuse %+v, %d versions; hostage: %d leases", c.mode, done.Abuse, done.Version, r.leases)
			if seen := done.ExamplesSeen + done.Rechecks.VindicatedExamples; done.Epoch != 1 || seen != 60000 {
				t.Fatalf("job ended %s (%s) at epoch %d with %d examples (%d vindicated, not applied); want the epoch complete, each of the 60000 once; log:\n%s",
					done.State, done.Reason, done.Epoch, seen, done.Rechecks.VindicatedExamples, srv.logText())
			}
			// Its leases never expired (30 minutes): only backups, and in
			// a round mode taking back a closed round's lease, could end it.
			if done.LeasesExpired != 0 || done.Abuse.BackupsAnswered < c.answered || done.Abuse.Reclaimed < c.reclaimed {
				t.Fatalf("%d leases expired, abuse %+v; want the epoch ended by backups of the hostage's leases", done.LeasesExpired, done.Abuse)
			}
		})
	}
}

// 100 connections from one address hold no more leases at once than the
// address's share (16 by default), whatever each connection may hold.
func TestSybilConnectionsShareOneAddressesLeases(t *testing.T) {
	testenv.Long(t, "runs coordinator and attack processes")
	// No local workers: their allowance would raise every address's share.
	addr, _ := serveJob(t, hostileJob, "--max-conns-per-address", "150")
	a := startAttack(t, addr, attack.Sybil, "127.0.0.4", "--n", "100", "--duration", "10s")
	if err := a.waitExit(time.Minute); err != nil {
		t.Fatalf("attack: %v; log:\n%s", err, a.logText())
	}
	r := parseAttackReport(t, a.logText())
	t.Logf("sybil:\n%s", r.text)
	peak := peakHeld(t, r)
	if r.connections < 100 || peak < 1 {
		t.Fatalf("%d connections, peak %d leases; want 100 connections holding leases", r.connections, peak)
	}
	if peak > coordinator.DefaultMaxLeasesPerAddress {
		t.Fatalf("100 connections from one address held %d leases at once, want at most %d", peak, coordinator.DefaultMaxLeasesPerAddress)
	}
}

// A replayed result is never applied: under a new lease it is a duplicate
// of the accepted update, under its own lease again the lease is gone.
func TestReplaysAreNeverApplied(t *testing.T) {
	testenv.Long(t, "runs coordinator and attack processes")
	addr, _ := serveJob(t, hostileJob, "--local-workers", "1")
	a := startAttack(t, addr, attack.Replay, "127.0.0.5", "--duration", "10s")
	if err := a.waitExit(time.Minute); err != nil {
		t.Fatalf("attack: %v; log:\n%s", err, a.logText())
	}
	r := parseAttackReport(t, a.logText())
	t.Logf("replay:\n%s", r.text)
	again, same := r.variants["replay-new-lease"], r.variants["replay-same-lease"]
	if again[0] < 1 || same[0] < 1 {
		t.Fatalf("replays sent: new lease %d, same lease %d; want both", again[0], same[0])
	}
	if again[1] != 0 || same[1] != 0 {
		t.Fatalf("replays applied: %d under a new lease, %d under the same; want 0", again[1], same[1])
	}
	for v, reason := range map[string]string{"replay-new-lease": "duplicate", "replay-same-lease": "unknown_lease"} {
		line := regexp.MustCompile(`(?m)^  ` + v + `\s+sent (\d+), accepted 0, rejected (\d+) \(` + reason + ` (\d+)\)$`).FindStringSubmatch(r.text)
		// The last may go unanswered when the attack stops.
		if line == nil || line[2] != line[3] || line[2] == "0" {
			t.Errorf("%s: want every one acked rejected as %s; report:\n%s", v, reason, r.text)
		}
	}
}
