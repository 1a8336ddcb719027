// Package rl holds the learning side of reinforcement learning on
// crowdtrain's sequence models: the GRPO loss (Group Relative Policy
// Optimization) of a batch of completions and its gradient with respect
// to the model's parameters.
//
// A batch is groups of completions of one prompt each, as workers would
// sample them with nn.Decoder: the prompt and completion tokens, the
// log-probability the sampling policy gave each completion token, and the
// completion's reward (a task's checker, package rltask). Advantages are
// relative to the group, so no value model is needed. The gradient goes
// through nn.Model.GradientOfLogits, the same backward pass supervised
// training uses, so any optimizer of package nn can apply it.
//
// No job runs this yet: it is the piece an RL job's learner will call.
package rl
