package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
)

// Spot checks with real processes: `serve`, three `crowdtrain work`
// volunteers (each its own key file) and `crowdtrain attack --kind
// signflip --fraction 0.1` from its own address. The forger is struck and
// banned (the standing API says so, and its attack report shows results
// refused), no honest volunteer is struck, and the job reaches 97% with
// the duplicated work in its view. The job's target is past 97% so that it
// goes on until both have happened: on a loaded machine a job that ended
// at 97% could end before the forger's third strike.
func TestSpotChecksWithRealProcesses(t *testing.T) {
	testenv.Long(t, "runs coordinator, worker and attack processes")
	dir := t.TempDir()
	spec := filepath.Join(dir, "job.yaml")
	// spot_check 0.2: a newcomer's results are checked at 0.8, so the
	// forger is caught within the run.
	if err := os.WriteFile(spec, []byte("name: spot\nmodel: mnist-mlp\nmax_epochs: 20\ntarget_accuracy: 0.995\nspot_check: 0.2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	const admin = "spot-admin-token-0123456789"
	startProc(t, "serve", "--addr", addr, "--db", "", "--job", spec, "--admin-token", admin)
	ws := "ws://" + addr + "/ws"
	for i := range 3 {
		startProc(t, "work", "--coordinator", ws, "--threads", "1", "--name", fmt.Sprintf("honest-%d", i),
			"--key-file", filepath.Join(dir, fmt.Sprintf("key-%d", i)))
	}
	forger := startAttack(t, addr, "signflip", "127.0.0.5", "--fraction", "0.1", "--duration", "3m")

	v := waitJob(t, addr, 5*time.Minute, "97% and the forger banned", func(v coordinator.JobView) bool {
		return v.State != coordinator.StateRunning || v.Eval != nil && v.Eval.Accuracy >= 0.97 && v.SpotChecks != nil && v.SpotChecks.Bans > 0
	})
	if v.State != coordinator.StateRunning || v.Eval == nil || v.Eval.Accuracy < 0.97 {
		t.Fatalf("job %s (%s), eval %+v; want it training at 97%% or more", v.State, v.Reason, v.Eval)
	}
	// The three strikes that ban are the standing's (below): a flagged
	// forgery the validation refused and the coordinator's recomputation
	// refuted is one too, outside the spot checks' count.
	sc := v.SpotChecks
	if sc == nil || sc.Bans != 1 || sc.Strikes < 1 || sc.DuplicatedExamples == 0 {
		t.Fatalf("spot checks %+v: want the forger banned and the duplicated work counted", sc)
	}
	t.Logf("spot checks: %+v", *sc)

	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/api/v1/volunteers/standing", nil)
	req.Header.Set("Authorization", "Bearer "+admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var standing struct {
		Volunteers []struct {
			Name      string   `json:"name"`
			Strikes   int      `json:"strikes"`
			Banned    bool     `json:"banned"`
			Addresses []string `json:"addresses"`
		} `json:"volunteers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&standing); err != nil {
		t.Fatal(err)
	}
	banned := 0
	for _, s := range standing.Volunteers {
		switch {
		case strings.HasPrefix(s.Name, "honest-") && (s.Strikes != 0 || s.Banned):
			t.Errorf("honest volunteer %s: %d strikes, banned %v", s.Name, s.Strikes, s.Banned)
		case s.Banned:
			banned++
			if s.Strikes < 3 || !strings.Contains(strings.Join(s.Addresses, ","), "127.0.0.5") {
				t.Errorf("banned volunteer %+v: want the forger from 127.0.0.5 with 3 strikes", s)
			}
		}
	}
	if banned != 1 {
		t.Errorf("%d volunteers banned, want the forger only: %+v", banned, standing.Volunteers)
	}
	forger.kill()
	if log := forger.logText(); !strings.Contains(log, "quarantined") && !strings.Contains(log, "banned") {
		t.Errorf("the forger's report shows no result held or refused:\n%s", log)
	}
}
