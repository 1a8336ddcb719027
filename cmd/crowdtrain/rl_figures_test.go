package main

import (
	"cmp"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/testbrowser"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// RLSecondsVar sets how long TestRLJobRolloutFigures measures (default
// 45 s); `make bench-rl` sets it to 180 and RLOutVar to where its table
// goes.
const (
	RLSecondsVar = "CROWDTRAIN_RL_SECONDS"
	RLOutVar     = "CROWDTRAIN_RL_OUT"
)

// rlFigureWorker is one worker's counts at the start and the end of the
// measurement.
type rlFigureWorker struct {
	kind, backend string
	from, to      int64 // accepted rollout results
	results       int64 // accepted results of any kind, at the end
}

// An RL job's figures with real processes (docs/BENCHMARKS.md, "RL from
// the crowd"): a policy warmed up on one-digit sums by SFT, then the RL
// job from it, at its defaults (spot_check 0.05, max_rollout_staleness 2),
// with two native `work` processes and a headless Chromium tab (it samples
// in wasm) generating rollouts and computing GRPO gradients. Once each has
// had a rollout result accepted, it measures for RLSecondsVar seconds:
// rollouts per second per worker kind, the bytes of a rollout result, the
// share of the groups a learn lease took at each staleness, and what the
// rollout checks cost the coordinator. Every kind must have rollouts
// accepted, learn leases must take groups within the staleness bound, a
// result of 8 completions of at most 4 tokens must stay under 4 KiB, and
// no honest result may be refused as forged.
func TestRLJobRolloutFigures(t *testing.T) {
	testenv.Long(t, "trains a text job, then measures an RL job's rollouts from native workers and a Chromium tab")
	testbrowser.Chromium(t)
	seconds := 45
	if s := os.Getenv(RLSecondsVar); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 5 {
			t.Fatalf("%s=%q: want a whole number of seconds, at least 5", RLSecondsVar, s)
		}
		seconds = n
	}
	dir := t.TempDir()
	dist := t.TempDir() // serve --web-dist: the binary the tests build embeds no browser worker
	if err := testbrowser.BuildWorker(dist); err != nil {
		t.Fatal(err)
	}
	policy, _ := warmUpOnAdd(t, dir, 2)

	// max_epochs far beyond the measurement: the job is still running
	// when it ends; no evaluation in it.
	rlSpec := writeRLAddSpec(t, dir, "rl-figures", policy, 10000, 1000000)
	addr := freeAddr(t)
	srv := startProc(t, "serve", "--addr", addr, "--db", filepath.Join(dir, "rl.db"), "--job", rlSpec,
		"--web-dist", dist, "--admin-token", modesAdminToken)
	srv.waitLine("coordinator listening", time.Minute)
	openContributeTab(t, addr)
	for range 2 {
		startProc(t, "work", "--coordinator", "ws://"+addr+"/ws", "--threads", "1")
	}

	views := func() map[string]coordinator.WorkerView {
		var vs []coordinator.WorkerView
		if code := adminCall(t, http.MethodGet, "http://"+addr+"/api/v1/workers", nil, &vs); code != http.StatusOK {
			t.Fatalf("GET /api/v1/workers: %d", code)
		}
		m := map[string]coordinator.WorkerView{}
		for _, w := range vs {
			m[w.ID] = w
		}
		return m
	}
	var start map[string]coordinator.WorkerView
	v0 := waitJob(t, addr, 3*time.Minute, "a rollout result accepted from each worker", func(coordinator.JobView) bool {
		start = views()
		kinds := map[string]int{}
		for _, w := range start {
			if w.Rollouts > 0 {
				kinds[w.Kind]++
			}
		}
		return kinds[protocol.KindNative] == 2 && kinds[protocol.KindBrowser] == 1
	})
	began := time.Now()
	time.Sleep(time.Duration(seconds) * time.Second)
	end := views()
	v1 := waitJob(t, addr, time.Minute, "the job view", func(coordinator.JobView) bool { return true })
	wall := time.Since(began)
	if v1.State != coordinator.StateRunning || v1.Spec.RL == nil || v0.RL == nil || v1.RL == nil || v1.SpotChecks == nil || v1.SpotChecks.Rollouts == nil {
		t.Fatalf("the RL job is %s (%s), rl %+v, spot checks %+v; want it running with its rl and rollout checks in the view; log:\n%s",
			v1.State, v1.Reason, v1.RL, v1.SpotChecks, srv.logText())
	}

	workers := map[string]*rlFigureWorker{}
	for id, w := range end {
		s, ok := start[id]
		if !ok {
			t.Errorf("worker %s (%s) joined during the measurement: every worker should have stayed connected", id, w.Kind)
			continue
		}
		workers[id] = &rlFigureWorker{kind: w.Kind, backend: w.Backend, from: s.Rollouts, to: w.Rollouts, results: w.Accepted}
	}
	table := rlFiguresTable(workers, v0, v1, wall)
	t.Logf("RL figures over %v:\n%s", wall.Round(time.Second), table)
	writeRLFigures(t, table, wall)

	for id, w := range workers {
		if w.to <= w.from {
			t.Errorf("worker %s (%s) had no rollout result accepted in %v", id, w.kind, wall.Round(time.Second))
		}
	}
	rl, rl0 := v1.RL, v0.RL
	used := rl.GroupsUsed - rl0.GroupsUsed
	var sum int64
	for _, n := range rl.UsedStaleness {
		sum += n
	}
	if used <= 0 {
		t.Errorf("no learn lease took a group in %v (rl %+v): the rollouts fed no gradient", wall.Round(time.Second), rl)
	}
	if sum != rl.GroupsUsed || len(rl.UsedStaleness) > v1.Spec.RL.MaxRolloutStaleness+1 {
		t.Errorf("used_staleness %v sums to %d over %d entries; want groups_used %d, staleness at most max_rollout_staleness %d",
			rl.UsedStaleness, sum, len(rl.UsedStaleness), rl.GroupsUsed, v1.Spec.RL.MaxRolloutStaleness)
	}
	if rl.RolloutResults <= 0 || rl.RolloutBytes/rl.RolloutResults >= 4096 {
		t.Errorf("%d rollout results of %d bytes: want some, each under 4 KiB (8 completions of at most 4 tokens)", rl.RolloutResults, rl.RolloutBytes)
	}
	if rl.Forged != 0 || v1.Rejections[protocol.ReasonForged] != 0 {
		t.Errorf("%d honest rollout results refused as forged (rejections %v)", rl.Forged, v1.Rejections)
	}
}

// rlFiguresTable is the figures as docs/BENCHMARKS.md shows them: a row a
// worker kind, then the job's bytes, staleness and check cost.
func rlFiguresTable(workers map[string]*rlFigureWorker, v0, v1 coordinator.JobView, wall time.Duration) string {
	type kindRow struct {
		workers  int
		rollouts int64
		backends []string
	}
	rows := map[string]*kindRow{}
	for _, w := range workers {
		r := rows[w.kind]
		if r == nil {
			r = &kindRow{}
			rows[w.kind] = r
		}
		r.workers++
		r.rollouts += w.to - w.from
		r.backends = append(r.backends, w.backend)
	}
	group := int64(cmp.Or(v1.Spec.RL.GroupSize, 1))
	var sb strings.Builder
	sb.WriteString("| worker kind | workers | backend | rollout results/s per worker | completions/s per worker |\n| --- | ---: | --- | ---: | ---: |\n")
	for _, kind := range []string{protocol.KindNative, protocol.KindBrowser} {
		r := rows[kind]
		if r == nil {
			continue
		}
		per := float64(r.rollouts) / float64(r.workers) / wall.Seconds()
		fmt.Fprintf(&sb, "| %s | %d | %s | %.2f | %.1f |\n", kind, r.workers, strings.Join(r.backends, ", "), per, per*float64(group))
	}
	rl, rl0 := v1.RL, v0.RL
	results := rl.RolloutResults - rl0.RolloutResults
	bytes := rl.RolloutBytes - rl0.RolloutBytes
	completions := rl.Rollouts - rl0.Rollouts
	scored := completions / group
	used := rl.GroupsUsed - rl0.GroupsUsed
	var within2, all int64
	for s, n := range rl.UsedStaleness {
		all += n
		if s <= 2 {
			within2 += n
		}
	}
	c0, c1 := v0.SpotChecks.Rollouts, v1.SpotChecks.Rollouts
	checked, checkSeconds := c1.Checked, c1.Seconds
	if c0 != nil {
		checked, checkSeconds = c1.Checked-c0.Checked, c1.Seconds-c0.Seconds
	}
	share := func(n, d int64) string {
		if d <= 0 {
			return "—"
		}
		return fmt.Sprintf("%.1f%% (%d of %d)", 100*float64(n)/float64(d), n, d)
	}
	fmt.Fprintf(&sb, "\n| figure | value |\n| --- | --- |\n")
	fmt.Fprintf(&sb, "| rollout results received (groups of %d) | %d in %.0f s |\n", group, results, wall.Seconds())
	if results > 0 && completions > 0 {
		fmt.Fprintf(&sb, "| bytes a rollout result, a completion | %.0f, %.0f |\n", float64(bytes)/float64(results), float64(bytes)/float64(completions))
	}
	flat, stale := rl.FlatGroups-rl0.FlatGroups, rl.StaleGroups-rl0.StaleGroups
	fmt.Fprintf(&sb, "| groups scored; dropped flat (one reward for all), dropped stale; used by a learn lease | %d; %d, %d; %d |\n", scored, flat, stale, used)
	fmt.Fprintf(&sb, "| groups with a signal (not flat) that a learn lease used | %s |\n", share(used, scored-flat))
	fmt.Fprintf(&sb, "| groups used at staleness ≤ 2, of those used (the job's whole run; max_rollout_staleness %d) | %s; by staleness %v |\n",
		v1.Spec.RL.MaxRolloutStaleness, share(within2, all), rl.UsedStaleness)
	skipped := c1.SkippedNoBudget + c1.SkippedNoBase
	if c0 != nil {
		skipped -= c0.SkippedNoBudget + c0.SkippedNoBase
	}
	fmt.Fprintf(&sb, "| rollout results checked (spot_check %.2f); drawn but skipped (the checks' budget, or the version gone) | %s; %d |\n", v1.Spec.SpotCheck, share(checked, results), skipped)
	if checked > 0 {
		fmt.Fprintf(&sb, "| the checks' cost: coordinator seconds a check, and of the wall time | %.1f ms, %.1f%% |\n",
			1000*checkSeconds/float64(checked), 100*checkSeconds/wall.Seconds())
	}
	fmt.Fprintf(&sb, "| versions (learn results applied) | %d |\n", v1.Version-v0.Version)
	return sb.String()
}

// writeRLFigures writes the table to the test's artifacts and, where
// RLOutVar names a file, there.
func writeRLFigures(t *testing.T, table string, wall time.Duration) {
	t.Helper()
	head := fmt.Sprintf("RL rollout figures, %s, %d s measured, charlm-tiny on one-digit sums, 2 native workers of one thread and a Chromium tab\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), int(wall.Seconds()))
	paths := []string{filepath.Join(t.ArtifactDir(), "rl-figures.md")}
	if p := os.Getenv(RLOutVar); p != "" {
		paths = append(paths, p)
	}
	for _, p := range paths {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(head+table), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
