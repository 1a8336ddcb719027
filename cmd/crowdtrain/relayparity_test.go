package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
)

// A job trains as well through relays as direct: mnist-mlp reaches 97%
// through a root and two relays, one native worker on each, within
// relayParityBound times the examples the same job took with the same
// two workers connected to the root. Both are measured here, one run
// after the other, so the machine's load weighs on both alike.

// relayParityBound is how many times the direct run's examples to 97% a
// run through relays may take: the goal, which the round modes meet.
// Async met it too once the root's loop stopped scoring the validation's
// sample itself (1.00x in three sets of three runs, 2026-12-07; 1.22x to
// 1.33x before, and 1.52x in a CI run with other shards beside:
// docs/RELAYS.md, "Asynchronous modes"). Its order of results, and so its
// figure, varies more from run to run and with the machine's load, so
// its test holds it to relayParityAsyncBound, failing on a fall back
// towards where it was (never reaching 97% in 10 epochs), and logs the
// ratio against the goal.
const (
	relayParityBound      = 1.2
	relayParityAsyncBound = 2.0
)

// relayParitySpec is mnist-mlp in mode with its defaults, evaluated every
// 50 batches so that examples to 97% read to within a few thousand.
func relayParitySpec(mode string) string {
	return fmt.Sprintf("name: parity\nmodel: mnist-mlp\nmode: %s\neval_every: 50\nmax_epochs: 10\n", mode)
}

// In async the order results arrive in differs from run to run, and so
// do the examples to 97%: 62,512 to 87,512 in five direct runs of this
// job on one machine. One run of each would compare that noise, so each
// is run three times and the medians are compared. A round mode's
// rounds hold the same tasks in every run: one of each is enough.
func TestRelayParityAsync(t *testing.T)  { relayParity(t, "async", 3, relayParityAsyncBound) }
func TestRelayParitySync(t *testing.T)   { relayParity(t, "sync", 1, relayParityBound) }
func TestRelayParityDiLoCo(t *testing.T) { relayParity(t, "diloco", 1, relayParityBound) }

func relayParity(t *testing.T, mode string, runs int, bound float64) {
	spec := relayParitySpec(mode)
	var direct, relayed []int64
	for i := range runs {
		d := trainToTarget(t, fmt.Sprintf("direct, run %d", i+1), spec, false)
		r := trainToTarget(t, fmt.Sprintf("through relays, run %d", i+1), spec, true)
		direct, relayed = append(direct, d.Eval.Examples), append(relayed, r.Eval.Examples)
	}
	d, r := median(direct), median(relayed)
	ratio := float64(r) / float64(d)
	t.Logf("%s: 97%% direct after %v examples (median %d), through two relays after %v (median %d): %.2fx (goal %.1fx)",
		mode, direct, d, relayed, r, ratio, relayParityBound)
	if ratio > bound {
		t.Errorf("%s through relays took %.2fx the examples direct took to reach 97%% (median %d against %d); want at most %.1fx",
			mode, ratio, r, d, bound)
	}
}

// median is the middle of xs (of an odd count; the upper middle else).
func median(xs []int64) int64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// trainToTarget runs spec to 97% with two native workers, on the root
// itself or one on each of two relays, and returns the job as it ended;
// every process of the run is stopped before it returns.
func trainToTarget(t *testing.T, how, spec string, relayed bool) coordinator.JobView {
	t.Helper()
	var g *relayGrid
	var workers []*proc
	if relayed {
		g = newRelayGridSpec(t, spec, nil, "ra", "rb")
		workers = append(workers, g.addWorker("ra"), g.addWorker("rb"))
	} else {
		g = newRelayGridSpec(t, spec, nil)
		for range 2 {
			workers = append(workers, startProc(t, "work", "--coordinator", "ws://"+g.rootAddr+"/ws", "--key-file", ""))
		}
	}
	start := time.Now()
	v := waitDone97(t, g.rootAddr, 8*time.Minute)
	if v.Eval.Examples <= 0 {
		t.Fatalf("%s: the evaluation that reached 97%% names no examples: %+v", how, v.Eval)
	}
	t.Logf("%s: %.4f at version %d after %d examples (%d results applied, %d in all, %s); mean staleness %.2f, refused %v",
		how, v.Eval.Accuracy, v.Eval.Version, v.Eval.Examples, v.UpdatesApplied, v.ExamplesSeen, time.Since(start).Round(time.Second),
		v.MeanStaleness, v.Rejections)
	if relayed {
		m := g.relaysView()
		why := map[string]int{}
		for _, line := range strings.Split(g.root.logText(), "\n") {
			if _, reason, ok := strings.Cut(line, "REFUSED: "); ok {
				reason, _, _ = strings.Cut(reason, ":") // "stale", "lease 12 is not held ...", ...
				why[reason]++
			}
		}
		t.Logf("%s: aggregates applied: ra %d, rb %d; refused: ra %d, rb %d %v",
			how, m["ra"].AggregatesApplied, m["rb"].AggregatesApplied, m["ra"].AggregatesRefused, m["rb"].AggregatesRefused, why)
	}
	for _, w := range workers {
		w.kill()
	}
	for _, r := range g.relays {
		r.kill()
	}
	g.root.kill()
	return v
}
