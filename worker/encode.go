package worker

import (
	"fmt"
	"slices"

	"github.com/crowdtrain/crowdtrain/protocol"
)

// encoder sends a session's results in the update codec its welcome
// named, keeping that codec's error-feedback residual (protocol.
// UpdateEncoder) for the session's life. Its buffers are reused: once
// warm it allocates nothing (the browser's rule).
type encoder struct {
	enc    protocol.UpdateEncoder
	packed protocol.Packed
}

// newEncoder is the encoder for welcome's job: f32 when the welcome names
// no codec. A codec this worker does not speak, a topk fraction outside
// (0, 1], or sparse parameters out of bounds get f32 (which every coordinator takes) and a warning
// saying why, for the log.
func newEncoder(job protocol.JobInfo) (*encoder, string) {
	c, warn := job.UpdateCodec, ""
	switch {
	case c == "":
		c = protocol.CodecF32
	case !slices.Contains(protocol.UpdateCodecs, c):
		warn = fmt.Sprintf("the coordinator asked for update codec %q, which this worker does not speak; sending %s", truncate(c, 32), protocol.CodecF32)
		c = protocol.CodecF32
	case c == protocol.CodecTopK && !(job.TopKFraction > 0 && job.TopKFraction <= 1):
		warn = fmt.Sprintf("the coordinator asked for topk with fraction %v, outside (0, 1]; sending %s", job.TopKFraction, protocol.CodecF32)
		c = protocol.CodecF32
	case c == protocol.CodecSparse && protocol.CheckSparseParams(job.SparseChunk, job.SparseFraction) != nil:
		warn = fmt.Sprintf("the coordinator asked for sparse with sparse_chunk %d and sparse_k %v: %v; sending %s",
			job.SparseChunk, job.SparseFraction, protocol.CheckSparseParams(job.SparseChunk, job.SparseFraction), protocol.CodecF32)
		c = protocol.CodecF32
	}
	return &encoder{enc: protocol.UpdateEncoder{Codec: c, TopKFraction: job.TopKFraction,
		SparseChunk: job.SparseChunk, SparseFraction: job.SparseFraction}}, warn
}

// codec is the session's update codec.
func (e *encoder) codec() string { return e.enc.Codec }

// pack turns res (an f32 result of lease l) into the session's codec: the
// update encoded into Packed (a reused buffer) and Update cleared. A spot
// check's copy (CopyOf != 0) of a lossy error-feedback job goes as f32,
// the residual untouched, so that it compares with the primary exactly;
// an f16 copy goes as f16 (both sides round alike). An update the codec
// cannot encode (a non-finite value) goes as f32 too: the coordinator
// judges it as it always has, and pack says why.
func (e *encoder) pack(res *protocol.Result, l protocol.Lease) error {
	c := e.enc.Codec
	// An RL lease's result goes as it is: a rollout result has no
	// update, and a learn lease's gradient is not the residual's.
	if c == protocol.CodecF32 || (l.CopyOf != 0 && c != protocol.CodecF16) || l.Rollout != nil || l.Learn != nil {
		return nil
	}
	b, err := e.enc.Encode(e.packed[:0], res.Update, l.CopyOf == 0)
	if err != nil {
		return err
	}
	e.packed = b
	res.Codec, res.Packed, res.Update = c, e.packed, nil
	return nil
}
