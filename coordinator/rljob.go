package coordinator

import "github.com/crowdtrain/crowdtrain/jobspec"

// refuseRL refuses a kind: rl job. Its spec parses and validates
// (jobspec/rl.go), workers compute its rollout and learn leases
// (compute/rl.go) and package rljob holds its scoring, buffer and
// evaluation rules, but the coordinator's lease loop does not drive them
// yet.
func refuseRL(spec JobSpec) error {
	if spec.Kind != jobspec.KindRL {
		return nil
	}
	return &SpecError{Key: "kind", Problem: "RL jobs (kind: rl) are not available yet on this coordinator: the spec is valid, but rollout and learn leases are not scheduled yet; to fine-tune on a task's answers, run a supervised job with dataset: {type: task, ...}"}
}
