package coordinator

import (
	"math"

	"github.com/crowdtrain/crowdtrain/jobspec"
)

// Weight prediction for asynchronous jobs. A result computed from version
// v is applied at v+s, s its staleness: with two workers nearly every
// result has s = 1, and on a transformer under Adam that one step of
// delay cost 1.5 to 2 times the updates to a given loss (docs/TRAINING.md,
// "A second worker on the transformer"). The snapshot of version v
// therefore holds the model where it will likely be when the result lands:
//
//	ŵ_v = w_v + ŝ · (w_v − w_p) / (v − p)
//
// with p the previously published version (so (w_v − w_p)/(v − p) is the
// mean step since) and ŝ predictGain times the smoothed staleness of the
// results applied lately. Adam's steps follow their momentum, so the next
// steps are close to the last one repeated (Chen et al. 2018, SpecTrain;
// Hakimi et al. 2019, DANA). A crowd of one has ŝ = 0 and gets w_v itself.
//
// The prediction is made once, when the version is published, and is
// the version's snapshot for everyone: a spot check's copy, a backup and
// a delta between two versions all see the same bytes. The model, its
// checkpoints, evaluations and the validation of results stay w_v.

// predictDecay is the weight the older staleness keeps at each result.
const predictDecay = 0.95

// predictGain scales the smoothed staleness into the prediction's reach.
// Measured on charlm-tiny with two workers (TestASecondWorkerPaysOff,
// versions to 2.8 bits per character against one worker's 425, runs of
// each): a reach of 1x the staleness took 500 to 600 (mean 562), 1.5x 500
// to 525, 2x 500 to 550 (mean 520), 3x 575; mnist-mlp is the same at 1x
// and 2x. A gradient taken at w_v is applied at v+s and its effect, through
// Adam's momentum, lasts beyond: aiming past the landing point pays.
const predictGain = 2

// predicts reports whether the job's snapshots are predicted: async mode,
// where results land stale; rounds compute and apply at one version.
func (j *Job) predicts() bool { return j.st.spec.Mode == jobspec.ModeAsync }

// observeStaleness adds an applied step of results results (a relay's
// aggregate holds many), each at staleness s, to the smoothed value the
// next predictions use.
func (j *Job) observeStaleness(s int64, results int) {
	keep := math.Pow(predictDecay, float64(max(results, 1)))
	j.st.predictStaleness = keep*j.st.predictStaleness + (1-keep)*float64(s)
}

// predictBlock is how many parameters snapshotParams predicts at a time:
// a block that stays in the L1 cache between its prediction and its
// encoding, so that the prediction is never written out whole.
const predictBlock = 1024

// snapshotParams hands what the current version's snapshot holds to emit,
// in order, in blocks: the model, or its prediction (above). It remembers
// the model for the next version's step. A block is emit's only until it
// returns.
func (j *Job) snapshotParams(emit func(block []float32)) {
	st := &j.st
	w := st.model.Params
	if !j.predicts() {
		emit(w)
		return
	}
	from, fromVersion := st.predictFrom, st.predictFromVersion
	if s := predictGain * st.predictStaleness; s >= 0.1 && len(from) == len(w) && fromVersion < st.model.Version {
		k := float32(s / float64(st.model.Version-fromVersion))
		// One pass makes the prediction, remembers the model and
		// hands the prediction on.
		var buf [predictBlock]float32
		for start := 0; start < len(w); start += predictBlock {
			ws := w[start:min(start+predictBlock, len(w))]
			fs := from[start : start+len(ws)]
			out := buf[:len(ws)]
			for i, v := range ws {
				out[i] = v + k*(v-fs[i])
				fs[i] = v
			}
			emit(out)
		}
	} else {
		st.predictFrom = append(from[:0], w...)
		emit(w)
	}
	st.predictFromVersion = st.model.Version
}
