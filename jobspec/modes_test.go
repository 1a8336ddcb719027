package jobspec

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
)

func mustParse(t *testing.T, spec string) Spec {
	t.Helper()
	s, err := Parse([]byte(spec))
	if err != nil {
		t.Fatalf("%q: %v", spec, err)
	}
	return s
}

func TestModeDefaults(t *testing.T) {
	async := mustParse(t, "name: a\nmodel: mnist-mlp\n")
	if async.Mode != ModeAsync || async.OuterOptimizer.Type != "adam" || async.OuterOptimizer.LR != 1e-3 ||
		async.LocalSteps != 1 || async.InnerOptimizer.Type != InnerSGD || async.Snapshot != DefaultAsyncSnapshot ||
		async.ShardSize != 1000 || async.UpdateKind() != UpdateGradient || async.Rounds() {
		t.Errorf("async defaults: %+v", async)
	}
	sync := mustParse(t, "name: a\nmodel: mnist-mlp\nmode: sync\n")
	if sync.OuterOptimizer.Type != "adam" || sync.OuterOptimizer.LR != 1e-3 || sync.RoundSize != 4 || sync.BackupWorkers != 1 ||
		sync.RoundTimeout != sync.LeaseTimeout || sync.Snapshot != SnapshotGranted || !sync.Rounds() {
		t.Errorf("sync defaults: %+v", sync)
	}
	d := mustParse(t, "name: a\nmodel: mnist-mlp\nmode: diloco\n")
	o := d.OuterOptimizer
	if o.Type != "momentum" || o.LR != 0.7 || o.Momentum != 0.9 || !o.Nesterov || d.LocalSteps != 16 ||
		d.InnerOptimizer.Type != InnerAdamW || d.InnerOptimizer.LR != 4e-4 || d.UpdateKind() != UpdateDelta ||
		d.ShardSize != 1024 || !d.Rounds() {
		t.Errorf("diloco defaults: %+v", d)
	}
	// The stored spec records the choice: read back, it is the same.
	b, _ := json.Marshal(d)
	var back Spec
	if err := json.Unmarshal(b, &back); err != nil || back.OuterOptimizer != d.OuterOptimizer || back.InnerOptimizer != d.InnerOptimizer {
		t.Errorf("stored diloco spec reads back as %+v (%v)", back, err)
	}
	if !strings.Contains(string(b), `"outer_optimizer":{"type":"momentum","lr":0.7`) {
		t.Errorf("stored spec does not record the outer optimizer chosen: %s", b)
	}
	big := mustParse(t, "name: a\nmodel: mnist-mlp\nlocal_steps: 32\n")
	if big.ShardSize != 64*32 {
		t.Errorf("shard_size for H=32 is %d, want batch_size*local_steps = %d", big.ShardSize, 64*32)
	}
	dyn := mustParse(t, "name: a\nmodel: mnist-mlp\ndynamic_local_steps: true\n")
	if dyn.MinLocalSteps != 1 || dyn.MaxLocalSteps != 16 || dyn.TaskSteps() != 16 || dyn.ShardSize != 1024 {
		t.Errorf("dynamic defaults: %+v", dyn)
	}
}

func TestAliases(t *testing.T) {
	s := mustParse(t, "name: a\nmodel: mnist-mlp\noptimizer: {type: sgd, lr: 0.1}\ninner_lr: 0.2\n")
	if s.OuterOptimizer.Type != "sgd" || s.OuterOptimizer.LR != 0.1 || s.InnerOptimizer.LR != 0.2 || s.InnerOptimizer.Type != InnerSGD {
		t.Errorf("aliases: %+v", s)
	}
	for _, c := range []struct{ spec, key string }{
		{"name: a\nmodel: mnist-mlp\noptimizer: {type: sgd, lr: 0.1}\nouter_optimizer: {type: sgd, lr: 0.1}\n", "outer_optimizer"},
		{"name: a\nmodel: mnist-mlp\nouter_optimizer: {type: sgd, lr: 0.1}\noptimizer: {type: sgd, lr: 0.1}\n", "optimizer"},
		{"name: a\nmodel: mnist-mlp\ninner_lr: 0.1\ninner_optimizer: {lr: 0.1}\n", "inner_lr"},
		{"name: a\nmodel: mnist-mlp\ninner_optimizer: {type: sgd, lr: 0.1}\ninner_lr: 0.1\n", "inner_lr"},
	} {
		_, err := Parse([]byte(c.spec))
		if err == nil || !strings.Contains(err.Error(), c.key) || !strings.Contains(err.Error(), "same setting") {
			t.Errorf("%q: got %v, want an error naming %s as the same setting", c.spec, err, c.key)
		}
	}
	// inner_lr with an inner_optimizer that does not set lr is fine.
	s = mustParse(t, "name: a\nmodel: mnist-mlp\ninner_optimizer: {type: sgd}\ninner_lr: 0.3\n")
	if s.InnerOptimizer.LR != 0.3 {
		t.Errorf("inner_lr beside inner_optimizer without lr: %+v", s.InnerOptimizer)
	}
}

func TestModeKeyErrors(t *testing.T) {
	for _, c := range []struct{ spec, key, words string }{
		{"mode: federated\n", "mode", "async, sync, diloco"},
		{"mode: sync\nround_size: 0\n", "round_size", "1..1024"},
		{"mode: sync\nbackup_workers: -1\n", "backup_workers", "0..1024"},
		{"mode: sync\nround_timeout: 1ms\n", "round_timeout", "100ms"},
		{"mode: sync\nround_timeout: later\n", "round_timeout", "duration"},
		{"inner_optimizer: {type: adam}\n", "inner_optimizer.type", "sgd or adamw"},
		{"inner_optimizer: {type: adamw, lr: 0}\n", "inner_optimizer.lr", "> 0"},
		{"inner_optimizer: {type: adamw, beta2: 1}\n", "inner_optimizer.beta2", "[0, 1)"},
		{"inner_optimizer: {type: sgd, weight_decay: 0.1}\n", "inner_optimizer", "adamw settings"},
		{"inner_optimizer: {kind: sgd}\n", "inner_optimizer.kind", "unknown key"},
		{"async_diloco: true\n", "async_diloco", "diloco"},
		{"mode: diloco\nasync_diloco: true\nouter_optimizer: {type: adam, lr: 0.001}\n", "outer_optimizer", "Delayed Nesterov"},
		{"snapshot: newest\n", "snapshot", "latest or granted"},
		{"mode: sync\nsnapshot: latest\n", "snapshot", "asynchronous"},
		{"mode: sync\ndynamic_local_steps: true\n", "dynamic_local_steps", "sync"},
		{"dynamic_local_steps: true\nmin_local_steps: 4\nmax_local_steps: 2\n", "max_local_steps", "min_local_steps"},
		{"dynamic_local_steps: true\nmin_local_steps: 2\nlocal_steps: 1\n", "local_steps", "min_local_steps..max_local_steps"},
		{"local_steps: 32\nshard_size: 1000\n", "batch_size", "shard_size"},
		{"optimizer: {type: sgd, lr: 0}\n", "outer_optimizer.lr", "> 0"},
	} {
		_, err := Parse([]byte("name: a\nmodel: mnist-mlp\n" + c.spec))
		var se *Error
		if !errors.As(err, &se) || !strings.Contains(err.Error(), c.key) || !strings.Contains(err.Error(), c.words) {
			t.Errorf("%q: got %v, want an *Error naming %q and saying %q", c.spec, err, c.key, c.words)
		}
	}
}

// An old stored spec (before modes) resumes as it trained: async, granted
// snapshots, its optimizer and inner rate.
func TestLegacyStoredSpec(t *testing.T) {
	old := `{"name":"x","model":{"input":[1,28,28],"layers":[{"type":"dense","units":10}]},"dataset":"mnist",
	"optimizer":{"type":"adam","lr":0.002,"beta1":0.9,"beta2":0.999,"epsilon":1e-8},"batch_size":64,"local_steps":1,
	"inner_lr":0.05,"max_staleness":8,"staleness_lr":"none","shard_size":1000,"target_accuracy":0.97,"max_epochs":10,
	"seed":1,"eval_every":250,"checkpoint_every":1000,"max_update_norm_ratio":20,"lease_timeout":"1m0s"}`
	var s Spec
	if err := json.Unmarshal([]byte(old), &s); err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(); err != nil {
		t.Fatalf("legacy spec does not validate: %v (%+v)", err, s)
	}
	if s.Mode != ModeAsync || s.Snapshot != SnapshotGranted || s.OuterOptimizer.LR != 0.002 || s.InnerOptimizer != (InnerOptimizer{Type: InnerSGD, LR: 0.05}) {
		t.Fatalf("legacy spec read as %+v", s)
	}
}

func TestPatch(t *testing.T) {
	cur := mustParse(t, "name: a\nmodel: mnist-mlp\nlocal_steps: 16\ninner_lr: 0.1\nmax_staleness: 4\n")
	next, notes, err := Patch(cur, []byte(`{"mode": "diloco", "round_size": 2}`))
	if err != nil {
		t.Fatal(err)
	}
	if next.Mode != ModeDiLoCo || next.RoundSize != 2 || next.OuterOptimizer.Type != "momentum" || next.OuterOptimizer.LR != 0.7 ||
		next.InnerOptimizer.Type != InnerAdamW || next.ShardSize != cur.ShardSize || next.MaxStaleness != 4 {
		t.Fatalf("after the mode change: %+v", next)
	}
	if j := strings.Join(notes, "; "); !strings.Contains(j, "mode async -> diloco") || !strings.Contains(j, "round_size 1 -> 2") {
		t.Errorf("notes %q", j)
	}
	// A job whose shards hold 1000 examples switches to diloco with the
	// H that fits (15 steps of 64), not the default 16, which does not.
	small := mustParse(t, "name: a\nmodel: mnist-mlp\n")
	if d, _, err := Patch(small, []byte(`{"mode": "diloco"}`)); err != nil || d.LocalSteps != 15 {
		t.Fatalf("diloco on 1000-example shards: H %d, %v; want 15", d.LocalSteps, err)
	}
	if _, _, err := Patch(small, []byte(`{"mode": "diloco", "local_steps": 16}`)); err == nil || !strings.Contains(err.Error(), "shard_size") {
		t.Fatalf("an H given that does not fit: %v", err)
	}
	// And back: diloco's AdamW settings do not follow an inner sgd.
	d, _, _ := Patch(cur, []byte(`{"mode": "diloco"}`))
	if back, _, err := Patch(d, []byte(`{"mode": "async"}`)); err != nil || back.InnerOptimizer != (InnerOptimizer{Type: InnerSGD, LR: 0.05}) {
		t.Fatalf("diloco back to async: %+v, %v", back.InnerOptimizer, err)
	}
	// The mode's keys given beside it win over the mode's defaults.
	next, _, err = Patch(cur, []byte(`{"mode": "diloco", "inner_optimizer": {"type": "sgd", "lr": 0.1}, "local_steps": 8}`))
	if err != nil || next.InnerOptimizer.Type != InnerSGD || next.LocalSteps != 8 {
		t.Fatalf("mode with its keys: %+v %v", next, err)
	}
	next, notes, err = Patch(cur, []byte(`{"lr": 0.0005}`))
	if err != nil || next.OuterOptimizer.LR != 0.0005 || next.Mode != ModeAsync || len(notes) != 1 || notes[0] != "lr 0.001 -> 0.0005" {
		t.Fatalf("lr: %+v %q %v", next.OuterOptimizer, notes, err)
	}
	// Every live key's change is a change: noted, so applied and stored.
	for _, c := range []struct{ patch, note string }{
		{`{"relay_window": "250ms"}`, "relay_window 0s -> 250ms"},
		{`{"max_comm_fraction": 0.3}`, "max_comm_fraction 0.1 -> 0.3"},
	} {
		if _, notes, err := Patch(cur, []byte(c.patch)); err != nil || len(notes) != 1 || notes[0] != c.note {
			t.Errorf("%s: notes %q, %v; want %q", c.patch, notes, err, c.note)
		}
	}
	for _, c := range []struct{ patch, key, words string }{
		{`{"batch_size": 3}`, "batch_size", "cannot be changed"},
		{`{"mode": "sideways"}`, "mode", "not a mode"},
		{`{"local_steps": 40}`, "local_steps", "shard_size"},
		{`{"lr": -1}`, "lr", "positive"},
		{`{}`, "", "nothing to change"},
		{`[1]`, "", "JSON object"},
	} {
		_, _, err := Patch(cur, []byte(c.patch))
		var se *Error
		if !errors.As(err, &se) || se.Key != c.key || !strings.Contains(err.Error(), c.words) {
			t.Errorf("%s: got %v, want an *Error for key %q saying %q", c.patch, err, c.key, c.words)
		}
	}
}

// Every key the parser knows is documented in docs/JOBS.md, from the one
// list that defines them.
func TestEveryKeyDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/JOBS.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range append(Keys(), "inner_optimizer.type", "inner_optimizer.weight_decay", "outer_optimizer.type") {
		if !strings.Contains(string(doc), "`"+k+"`") && !strings.Contains(string(doc), "`"+k+".") {
			t.Errorf("docs/JOBS.md does not document `%s`", k)
		}
	}
}
