package web_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/internal/testbrowser"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/nn/nntest"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// A browser tab generates an RL job's rollouts: it announces RL, is given
// rollout leases, samples completions in wasm with the key-value cache,
// and the contribute page says "generating". Every rollout is checked
// (spot_check 1): the coordinator recomputes its log-probabilities, so
// the tab's numbers, not only its answers, are what the host computes
// (a random policy solves nothing, so its groups are flat and no learn
// lease follows: the tab only generates).
func TestBrowserTabGeneratesRollouts(t *testing.T) {
	testenv.Long(t, "runs an RL job's rollouts in Chromium")
	policy := nntest.RandomSafetensors(t, t.TempDir(), "charlm-tiny", 5)
	spec, err := jobspec.Parse([]byte(fmt.Sprintf(`name: tab-rollouts
kind: rl
model: charlm-tiny
policy: %q
task: {type: add, digits: 1}
group_size: 8
max_new_tokens: 6
spot_check: 1
`, policy)))
	if err != nil {
		t.Fatal(err)
	}
	s := newSiteWith(t, spec, func(cfg *coordinator.Config) { cfg.LoadData = dataset.Load })
	ctx := testbrowser.New(t)
	s.contribute(t, ctx)
	states := map[string]bool{}
	var accepted, rollouts, rejected int64
	var checks *coordinator.RolloutCheckView
	s.waitFor("the tab's rollouts, 20 of them checked", 3*time.Minute, func() bool {
		states[text(t, ctx, "#state")] = true
		for _, w := range s.srv.WorkerViews() {
			if w.Kind == protocol.KindBrowser {
				accepted, rollouts, rejected = w.Accepted, w.Rollouts, w.Rejected
			}
		}
		checks = s.view().SpotChecks.Rollouts
		return checks != nil && checks.Checked >= 20 && states["generating"]
	})
	v := s.view()
	t.Logf("the tab: %d rollout results accepted, %d rejected (job rejections %v); rollout checks %+v; page states seen %v",
		accepted, rejected, v.Rejections, *checks, states)
	if checks.Forged != 0 || v.Rejections[protocol.ReasonForged] != 0 {
		t.Errorf("%d of the tab's rollouts refused as forged: its log-probabilities differ from the host's", checks.Forged)
	}
	if accepted < 20 {
		t.Errorf("the tab had %d rollout results accepted; want at least the 20 checked", accepted)
	}
	// It only generates: every accepted result is a rollout, as its
	// worker view counts them.
	if rollouts != accepted {
		t.Errorf("the tab's worker view counts %d rollouts of %d accepted results; want all of them", rollouts, accepted)
	}
	// The job view's rl counts them with their bytes, and the admin page
	// says what the rollouts did.
	if rl := v.RL; rl == nil || rl.RolloutResults < accepted || rl.Rollouts < 8*accepted || rl.RolloutBytes <= 0 || rl.Forged != 0 {
		t.Errorf("job view rl %+v; want at least the tab's %d rollout results of 8 completions, their bytes, none forged", rl, accepted)
	}
	admin := testbrowser.NewTab(t, ctx)
	signInAdmin(t, admin, s)
	waitAdmin(t, admin, "the job's rollouts on the admin page", func() bool {
		return visible(t, admin, "#job-rl") && strings.Contains(text(t, admin, "#job-rl"), "completions scored") &&
			strings.Contains(text(t, admin, "#job-rl"), "checked in")
	})
	t.Logf("admin page, rollouts: %s", text(t, admin, "#job-rl"))
}
