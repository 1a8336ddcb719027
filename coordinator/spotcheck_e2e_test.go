package coordinator_test

import (
	"context"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/attack"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/worker"
	"github.com/crowdtrain/crowdtrain/worker/cpu"
)

// Three honest volunteers and one that sign-flips one result in ten, from
// its own loopback address, on mnist-mlp: spot checks strike the forger
// and ban it, the job reaches its target, the duplicated work is
// reported, the forger's refuted results lose their credit and every
// honest volunteer's credit equals the examples of its accepted results,
// as GET /api/v1/volunteers/standing shows them.
func TestSpotChecksBanAForger(t *testing.T) {
	testenv.Long(t, "trains mnist-mlp to its target")
	spec := jobSpec(t, "mnist-mlp", func(s *jobspec.Spec) {
		// Every task 50 examples, so an ack count is an example count.
		s.BatchSize, s.ShardSize = 50, 5000
		s.SpotCheck = 0.2 // a newcomer's results are all but always checked
		s.MaxEpochs = 4
	})
	g := newTestGrid(t, spec)
	keys := []string{"honest-volunteer-key-000001", "honest-volunteer-key-000002", "honest-volunteer-key-000003"}
	var honest []*worker.Worker
	for _, k := range keys {
		honest = append(honest, g.addWorkerWith(1, nil, func(c *worker.Config) { c.VolunteerKey = k }))
	}
	actx, stop := context.WithCancel(g.ctx)
	defer stop()
	reports := make(chan *attack.Report, 1)
	go func() {
		r, err := attack.Run(actx, attack.Config{
			Coordinator: g.wsURL(), Kind: attack.SignFlip, Fraction: 0.1, Bind: "127.0.0.2", JobID: g.job.ID,
			NewBackend: func() (worker.Backend, error) { return cpu.New(1) }, Logf: t.Logf,
		})
		if err != nil && actx.Err() == nil {
			t.Errorf("attack: %v", err)
		}
		reports <- r
	}()
	v := g.waitDone(10 * time.Minute)
	stop()
	r := <-reports
	if v.State != coordinator.StateDone || v.Eval == nil || v.Eval.Accuracy < spec.TargetAccuracy {
		t.Fatalf("job %s (%s), eval %+v: the target %v was not reached", v.State, v.Reason, v.Eval, spec.TargetAccuracy)
	}
	sc := v.SpotChecks
	t.Logf("spot checks: %+v", *sc)
	for variant, c := range r.Variants {
		t.Logf("the forger's %s results: %d sent, %d accepted, rejected %v", variant, c.Sent, c.Accepted, c.Reasons)
	}
	// A strike may also come from the validation's recomputation of a
	// forged result it refused (validation_rechecks.refuted), outside the
	// spot checks' count; the forger's standing below counts them all.
	if sc.Bans < 1 || sc.Strikes+v.Rechecks.Refuted < int64(spec.SpotCheckStrikes) || sc.DuplicatedExamples == 0 || sc.DuplicatedFraction <= 0 {
		t.Fatalf("spot checks %+v, validation rechecks %+v: want the forger banned after %d strikes and the duplicated work counted", *sc, v.Rechecks, spec.SpotCheckStrikes)
	}
	if v.Rejections["quarantined"] == 0 {
		t.Errorf("rejections %v: a struck volunteer's results were never held", v.Rejections)
	}

	book := g.standing()
	forger := ""
	for id, s := range book {
		if s.Banned {
			if forger != "" {
				t.Fatalf("two volunteers banned: %s and %s", forger, id)
			}
			forger = id
		}
	}
	for i, k := range keys {
		id := coordinator.VolunteerIDOfKey(k)
		if id == forger || book[id].Strikes != 0 {
			t.Fatalf("honest volunteer %d struck: %+v", i, book[id])
		}
	}
	f := book[forger]
	if f.Strikes < spec.SpotCheckStrikes {
		t.Fatalf("forger %s: %+v, want %d strikes", forger, f, spec.SpotCheckStrikes)
	}
	tot := r.Totals()
	// The forger's credit: its accepted results, and its held ones that a
	// check agreed with, less the applied ones a check refuted.
	if f.RefutedExamples != sc.RefutedExamples {
		t.Errorf("forger's refuted examples %d, the job's spot checks refuted %d", f.RefutedExamples, sc.RefutedExamples)
	}
	if want := int64(tot.Accepted)*int64(spec.BatchSize) + sc.HeldCreditedExamples - sc.RefutedExamples; f.Examples != want {
		t.Errorf("forger credit %d examples; it had %d results accepted, %d held examples credited and %d refuted (want %d)",
			f.Examples, tot.Accepted, sc.HeldCreditedExamples, sc.RefutedExamples, want)
	}
	// An ack read by its worker after the job ended is counted a moment
	// later; the ledger already has it.
	deadline := time.Now().Add(5 * time.Second)
	for i, w := range honest {
		id := coordinator.VolunteerIDOfKey(keys[i])
		for w.Stats().Examples != book[id].Examples && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
			book = g.standing()
		}
		if got := w.Stats().Examples; got != book[id].Examples {
			t.Errorf("honest volunteer %d: credit %d examples, accepted %d", i, book[id].Examples, got)
		}
	}
	t.Logf("duplicated %d examples (%.1f%% of the work), %d checks, %d strikes, %d bans, %d results refuted",
		sc.DuplicatedExamples, 100*sc.DuplicatedFraction, sc.Checked, sc.Strikes, sc.Bans, sc.Refuted)
}
