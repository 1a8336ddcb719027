// Package asha is the rule of a hyperparameter sweep's early stopping:
// asynchronous successive halving (ASHA, Li et al. 2020). Trials are
// compared at rungs of examples seen; at each rung a trial goes on only
// if its metric is among the best 1/reduction of the trials that reached
// the rung, and, once every trial that can reach a rung has, the rest
// stop. A promotion never waits for slow trials; a stop waits for the
// rung to be complete, so one early bad result cannot end a good trial.
//
// It works on plain values: the coordinator pauses a trial at each rung,
// evaluates it, asks Decide, and resumes or stops it.
package asha
