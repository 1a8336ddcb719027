// Package attack runs hostile volunteers against a coordinator, so that an
// operator can test a grid's defences the way a chaos tool tests a
// service. Every attacker speaks the protocol correctly (hello, want,
// start, result, bye): only what it computes, or claims, is a lie.
//
// The kinds, each precisely (h is the honest update the attacker computes
// for the lease in hand with the worker's own computation, S the --scale
// value, or the kind's default when --scale is not given):
//
//   - signflip: sends −S·h (S defaults to 1).
//   - scale: sends −k·h with k = 0.95 × the job's max_update_norm_ratio,
//     read from the job's public spec (GET /api/v1/jobs/{id}): just under
//     the norm gate, 19x under the default ratio of 20. --scale sets k
//     itself. A job without the gate (ratio 0) gets k = 19.
//   - ratchet: sends −k·h, where k starts at 1 and is multiplied by
//     1 + S after each accepted result (S defaults to 0.1) and halved after
//     each rejected one, so the norm grows a little each time and a gate
//     that follows a running mean follows it.
//   - early: sends −S·h from the first result on (S defaults to 1e6):
//     huge updates before a gate has seen enough honest norms to compare
//     against.
//   - alie (a little is enough, Baruch et al. 2019): every attacker computes
//     h honestly, and the N attackers pool their latest honest updates; each
//     then sends μ − S·σ, the coordinate-wise mean minus S standard
//     deviations (population) of that pool (S = z, defaults to 1). With one
//     attacker the pool holds its own last two honest updates.
//   - ipm (inner-product manipulation, Xie et al. 2020): sends −S·μ, with μ
//     the mean of the pool of honest updates as in alie (S = ε, defaults
//     to 0.5).
//   - labelflip: trains honestly on flipped labels, C−1−y for a model of C
//     classes (9−y for MNIST), and sends that update.
//   - nan: sends an update whose every value is NaN (nothing computed).
//   - noise: random work claimed as real: Gaussian noise scaled to S times
//     the norm of the attacker's first honest update (S defaults to 1),
//     with the first update the only one it computes.
//   - mimic: sends, for lease after lease, a copy of an update it computed
//     honestly for another lease (of a different shard when the job has
//     more than one): the reference is recomputed every 20 leases, and
//     those 20 results cost one computation.
//   - replay: computes its first lease honestly; after an accepted result
//     it sends the same message again, same lease (replay-same-lease), and
//     answers its next lease with that accepted update again, under the new
//     lease's id and base (replay-new-lease), without computing. Then it
//     computes honestly again, and so on.
//   - hostage: takes as many leases as the coordinator grants, starts
//     them, and never answers; it asks for more each lease timeout.
//   - sybil: many identities at once (N defaults to 20 connections from
//     one address), each taking every lease it is granted and answering
//     with an all-zero update for the lease's examples, nothing computed.
//   - zero: the same all-zero answers, from N attackers (default 1): put
//     20 on one address to flood, or each on its own (Config.Binds,
//     Config.Keys) to pose as separate volunteers.
//   - forge-rollout: takes RL jobs' leases (hello.caps.rl) and answers
//     each rollout lease without sampling: the task's right answer,
//     solved from the prompt, as every other completion and a wrong one
//     between, every token's log-probability claimed at -0.01; learn
//     leases it computes honestly.
package attack
