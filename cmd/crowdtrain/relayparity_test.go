package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
)

// A job trains as well through relays as direct: mnist-mlp reaches 97%
// through a root and two relays, one native worker on each, within
// relayParityBound times the examples the same job took with the same
// two workers connected to the root. Both runs are measured here, one
// after the other, so the machine's load weighs on both alike.

// relayParityBound is how many times the direct run's examples to 97% a
// run through relays may take.
const relayParityBound = 1.2

// relayParitySpec is mnist-mlp in mode with its defaults, evaluated every
// 50 batches so that examples to 97% read to within a few thousand.
func relayParitySpec(mode string) string {
	return fmt.Sprintf("name: parity\nmodel: mnist-mlp\nmode: %s\neval_every: 50\nmax_epochs: 10\n", mode)
}

func TestRelayParityAsync(t *testing.T)  { relayParity(t, "async") }
func TestRelayParitySync(t *testing.T)   { relayParity(t, "sync") }
func TestRelayParityDiLoCo(t *testing.T) { relayParity(t, "diloco") }

func relayParity(t *testing.T, mode string) {
	spec := relayParitySpec(mode)
	direct := trainToTarget(t, "direct", spec, false)
	relayed := trainToTarget(t, "through relays", spec, true)
	ratio := float64(relayed.Eval.Examples) / float64(direct.Eval.Examples)
	t.Logf("%s: 97%% direct after %d examples (version %d), through two relays after %d examples (version %d): %.2fx",
		mode, direct.Eval.Examples, direct.Eval.Version, relayed.Eval.Examples, relayed.Eval.Version, ratio)
	if ratio > relayParityBound {
		t.Errorf("%s through relays took %.2fx the examples direct took to reach 97%% (%d against %d); want at most %.1fx",
			mode, ratio, relayed.Eval.Examples, direct.Eval.Examples, relayParityBound)
	}
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
		t.Logf("%s: aggregates applied: ra %d, rb %d; refused: ra %d, rb %d",
			how, m["ra"].AggregatesApplied, m["rb"].AggregatesApplied, m["ra"].AggregatesRefused, m["rb"].AggregatesRefused)
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
