package jobspec

import (
	"fmt"
	"slices"
	"strings"
)

// Patch applies a change to a running job's spec: a JSON (or YAML)
// mapping of live keys. A new mode (or async_diloco) resets the keys whose
// default depends on the mode to the new mode's defaults, unless the
// change gives them too; shard_size and the other keys fixed at the
// start stay. It returns the new spec and one note per changed key.
func Patch(cur Spec, data []byte) (Spec, []string, error) {
	m, err := mapping(data, "must be a JSON object of settings such as {\"mode\": \"diloco\"}")
	if err != nil {
		return cur, nil, err
	}
	live := LiveKeys()
	for i := 0; i < len(m.Content); i += 2 {
		if k := m.Content[i].Value; !slices.Contains(live, k) {
			return cur, nil, Errorf(k, "cannot be changed on a running job; these can: %s", strings.Join(live, ", "))
		}
	}
	if err := checkKeys("", m, live); err != nil {
		return cur, nil, err
	}
	if len(m.Content) == 0 {
		return cur, nil, Errorf("", "nothing to change: give one or more of %s", strings.Join(live, ", "))
	}
	next, g := cur, given{}
	var lr *float64
	for i := 0; i < len(m.Content); i += 2 {
		if m.Content[i].Value == "lr" {
			v := 0.0
			if err := m.Content[i+1].Decode(&v); err != nil {
				return cur, nil, Errorf("lr", "%v", cleanYAMLError(err))
			}
			if !(v > 0) || v > 1e6 {
				return cur, nil, Errorf("lr", "must be a positive number, got %v", v)
			}
			lr = &v
			m.Content = slices.Delete(m.Content, i, i+2)
			i -= 2
		}
	}
	if err := decodeAll(m, &next, g); err != nil {
		return cur, nil, err
	}
	if cur.Kind == KindRL && (next.Mode != cur.Mode || next.LocalSteps != cur.LocalSteps || next.AsyncDiLoCo != cur.AsyncDiLoCo) {
		// Its buffer's learn leases are cut for the mode's steps when
		// the job is created (coordinator/rljob.go), and they are
		// granted as a round's places or not by the mode.
		return cur, nil, Errorf("mode", "an RL job's mode, async_diloco and local_steps are fixed when it is created (%s, %v, %d): submit a new job with the policy to change them",
			cur.Mode, cur.AsyncDiLoCo, cur.LocalSteps)
	}
	if next.Mode != cur.Mode || next.AsyncDiLoCo != cur.AsyncDiLoCo || next.DynamicLocalSteps != cur.DynamicLocalSteps {
		// Keys fixed at the start are never reset.
		g["shard_size"] = true
		if next.Mode == cur.Mode && next.AsyncDiLoCo == cur.AsyncDiLoCo {
			// Only dynamic_local_steps changed: keep the mode's choices.
			for _, k := range []string{"outer_optimizer", "inner_optimizer.type", "inner_optimizer.lr",
				"inner_optimizer.weight_decay", "local_steps", "round_size", "backup_workers", "round_timeout", "snapshot", "min_local_steps"} {
				g[k] = true
			}
		}
		modeDefaults(&next, g)
		// The shards were cut when the job started: a mode's default H
		// shrinks to what one shard holds (16 steps of 64 need 1024).
		fit := max(1, next.ShardSize/next.BatchSize)
		if !g["local_steps"] && next.LocalSteps > fit {
			next.LocalSteps = fit
		}
		if !g["max_local_steps"] && next.MaxLocalSteps > fit {
			next.MaxLocalSteps = max(fit, next.MinLocalSteps)
		}
	}
	if lr != nil {
		next.OuterOptimizer.LR = *lr
	}
	next.OuterOptimizer = next.OuterOptimizer.WithDefaults()
	if next.BatchSize*next.TaskSteps() > next.ShardSize {
		return cur, nil, Errorf("local_steps", "batch_size*%d steps (%d examples) exceeds the job's shard_size %d, fixed when it started",
			next.TaskSteps(), next.BatchSize*next.TaskSteps(), next.ShardSize)
	}
	if err := next.Validate(); err != nil {
		return cur, nil, err
	}
	return next, diff(cur, next), nil
}

// diff describes what changed between two specs, one note per key.
func diff(a, b Spec) []string {
	var notes []string
	add := func(k string, x, y any) {
		if fmt.Sprint(x) != fmt.Sprint(y) {
			notes = append(notes, fmt.Sprintf("%s %v -> %v", k, x, y))
		}
	}
	add("mode", a.Mode, b.Mode)
	add("async_diloco", a.AsyncDiLoCo, b.AsyncDiLoCo)
	if a.OuterOptimizer.Type == b.OuterOptimizer.Type && a.OuterOptimizer.LR != b.OuterOptimizer.LR {
		add("lr", a.OuterOptimizer.LR, b.OuterOptimizer.LR)
		a.OuterOptimizer.LR = b.OuterOptimizer.LR
	}
	add("outer_optimizer", fmt.Sprintf("%+v", a.OuterOptimizer), fmt.Sprintf("%+v", b.OuterOptimizer))
	add("inner_optimizer", fmt.Sprintf("%+v", a.InnerOptimizer), fmt.Sprintf("%+v", b.InnerOptimizer))
	add("local_steps", a.LocalSteps, b.LocalSteps)
	add("round_size", a.RoundSize, b.RoundSize)
	add("backup_workers", a.BackupWorkers, b.BackupWorkers)
	add("round_timeout", a.RoundTimeout.Duration, b.RoundTimeout.Duration)
	add("dynamic_local_steps", a.DynamicLocalSteps, b.DynamicLocalSteps)
	add("min_local_steps", a.MinLocalSteps, b.MinLocalSteps)
	add("max_local_steps", a.MaxLocalSteps, b.MaxLocalSteps)
	add("snapshot", a.Snapshot, b.Snapshot)
	add("max_staleness", a.MaxStaleness, b.MaxStaleness)
	add("staleness_lr", a.StalenessLR, b.StalenessLR)
	add("relay_window", a.EffectiveRelayWindow(), b.EffectiveRelayWindow())
	add("max_comm_fraction", a.MaxCommFraction, b.MaxCommFraction)
	add("weight", a.EffectiveWeight(), b.EffectiveWeight())
	add("priority", a.Priority, b.Priority)
	return notes
}
