package coordinator

import (
	"fmt"

	"github.com/crowdtrain/crowdtrain/engine"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// Updates that move nothing. A flood of all-zero updates costs an
// attacker nothing to compute, would be accepted as steps (each a version
// that trains nothing, with Adam's moments pulled towards zero) and earn
// credit. An honest gradient is all zeros only where the model fits every
// example of the batch exactly (loss 0 to float32 precision: a model
// trained long on easy data may): so the coordinator scores the task's
// first batch itself. Where the model fits it, the zero is applied as
// any result; where it does not, the zero is a lie, refused as invalid,
// and evidence by itself, as a spot check's mismatch is: its volunteer is
// struck. A volunteer caught once is struck for its later zeros without
// the forward pass, so a flood buys no work on the loop.
//
// An update that is not zero but far below every accepted norm (1e-4 of
// the norm gate's reference: engine.NormGate.MovesNothing) is refused
// too, and a spot check may look at it; it is not struck, since a batch
// the model fits has a small honest gradient.
//
// A model whose every unit is dead, if its loss is not zero, makes every
// honest volunteer send zeros: only a volunteer that is the first to send
// zeros since another's non-zero update was accepted is struck, so such a
// model costs each volunteer at most one strike.

// emptyUpdates is a job's memory for the rule above.
type emptyUpdates struct {
	// mover is the volunteer of the last accepted update; senders are the
	// volunteers that sent all-zero updates since.
	mover   string
	senders map[string]bool
	// caught are the volunteers an all-zero update was shown false of.
	caught map[string]bool
	// refused counts all-zero and near-zero updates refused, struck the
	// strikes they brought, fitted the all-zero ones the model's fit
	// vouched for.
	refused, struck, fitted int64
}

// maxCaught bounds emptyUpdates.caught: past it, the memory starts over
// (a caught volunteer then gets one more forward pass).
const maxCaught = 4096

// accepted notes an applied update of volunteer v.
func (e *emptyUpdates) accepted(v string) {
	e.mover = v
	clear(e.senders)
}

// emptyUpdate refuses sub when its update moves nothing, striking its
// volunteer for an all-zero one the model's fit does not vouch for. It
// reports whether it answered.
func (j *Job) emptyUpdate(sub submission, l *engine.Lease, reject func(reason, detail string) protocol.Ack) (protocol.Ack, bool) {
	st := &j.st
	e := &st.empty
	if sub.norm == 0 && allZero(sub.res.Update) {
		if j.zeroFits(sub.volunteer, l.Task) {
			return protocol.Ack{}, false // applied as any result
		}
		j.requeue(l)
		detail := "the update is all zeros, but the model does not fit the task's examples (the coordinator scored them), so their gradient is not zero; the task is queued again"
		if j.zeroEvidence(sub.volunteer, l.ID) {
			detail += "; this volunteer is struck"
		}
		return reject(protocol.ReasonInvalid, detail), true
	}
	if nothing, ref := st.norms.MovesNothing(st.spec.MaxUpdateNormRatio, sub.norm); nothing {
		j.requeue(l)
		j.spotRefused(sub, l)
		e.refused++
		return reject(protocol.ReasonInvalid, fmt.Sprintf("update norm %.3g is 1/%.0f of the typical norm %.3g of accepted updates: it moves the model by nothing; the task is queued again",
			sub.norm, ref/sub.norm, ref)), true
	}
	return protocol.Ack{}, false
}

// zeroFits reports whether an all-zero update of volunteer v for task t
// may be honest: the model, as it is now, fits t's first batch exactly.
// A volunteer caught before gets no forward pass.
func (j *Job) zeroFits(v string, t engine.Task) bool {
	st := &j.st
	if st.empty.caught[v] || j.validator == nil || t.Shard < 0 || t.Shard >= len(j.shards) {
		return false
	}
	idx := j.shards[t.Shard].Indices
	lo, hi := t.Start, min(t.Start+max(1, min(t.Count, st.spec.BatchSize)), len(idx))
	if lo < 0 || lo >= hi {
		return false
	}
	if j.validator.fits(st.model.Params, idx[lo:hi]) {
		st.empty.fitted++
		return true
	}
	return false
}

// zeroEvidence counts an all-zero update (or spot check copy) of
// volunteer v for lease id that the model's fit does not vouch for, and
// strikes v unless the model itself may be what gives zeros. It reports
// whether v was struck.
func (j *Job) zeroEvidence(v string, id uint64) bool {
	e := &j.st.empty
	e.refused++
	if e.senders == nil {
		e.senders = map[string]bool{}
	}
	e.senders[v] = true
	if e.caught == nil || len(e.caught) >= maxCaught {
		e.caught = map[string]bool{}
	}
	e.caught[v] = true
	if v == "" || e.mover == "" || e.mover == v || len(e.senders) > 1 {
		return false
	}
	e.struck++
	j.strike(v, fmt.Sprintf("an all-zero update for lease %d on examples the model does not fit, while other volunteers' updates move it", id))
	return true
}

func allZero(u []float32) bool {
	for _, v := range u {
		if v != 0 {
			return false
		}
	}
	return true
}

// strike records one strike against volunteer v for detail, and bans it
// when its strikes, all jobs together, reach the spot checks' limit.
func (j *Job) strike(v, detail string) {
	p := j.st.spot
	j.st.norms.Forget(v) // a liar's norms are no reference (engine.NormGate)
	total := j.ledger.Strike(v, j.ID, detail)
	j.log.Warn(fmt.Sprintf("job %s: volunteer %s struck (%d strikes of %d): %s", j.ID, v, total, p.Strikes, detail), logVolunteer, v, "strikes", total)
	if p.SyncStrikes(v, total) {
		reason := fmt.Sprintf("%d strikes: results that spot checks or the coordinator's own checks proved false", total)
		j.ledger.Ban(v, reason)
		j.log.Warn(fmt.Sprintf("job %s: volunteer %s banned: %s", j.ID, v, reason), logVolunteer, v)
	}
}
