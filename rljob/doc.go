// Package rljob holds the coordinator's rules for an RL job (kind: rl),
// apart from its leases and sockets: which prompt a rollout lease gets
// (Job.NextRollout), how a rollout result is checked and scored by the
// task's own checker (Job.Score: the worker's tokens only, never a
// reward it claims), the check of a rollout's log-probabilities against
// the policy version its lease named (CheckLogProbs, which
// Job.ScoreVerified applies before scoring), the buffer of scored groups that learn leases draw
// from while at most max_rollout_staleness versions old
// (Job.NextLearn), and the evaluation on a fixed held-out set of prompts
// with greedy decoding (Evaluate: reward and solved).
//
// Prompts and completions are text in the policy's tokens (Codec): bytes
// for a byte-level policy, its tokenizer's ids for a tokenized one. A
// problem's prompt is a newline (the end of the problem before it, as
// the task data set's text has it) and the prompt's text; a completion
// ends after its first token that holds a newline.
package rljob
