package coordinator

import (
	"fmt"
	"slices"

	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// Update codecs on the coordinator's side (protocol/updatecodec.go has the
// byte layouts). The welcome tells each worker its codec: the job's, when
// the worker's hello names it, else f32. A result in a codec other than
// f32 is decoded on its connection's goroutine, into the frame buffer's
// reused update storage, before the job sees it: the norm gate, the
// replay hash, robust clipping and spot checks all run on the decoded
// update, as on an f32 one.

// wireUpdateCodec is the protocol's name of a spec's update codec (the
// job spec knows no protocol, so the mapping lives here).
func wireUpdateCodec(s jobspec.Spec) string {
	switch s.UpdateCodec {
	case jobspec.CodecFP16:
		return protocol.CodecF16
	case jobspec.CodecInt8:
		return protocol.CodecI8
	case jobspec.CodecTopK:
		return protocol.CodecTopK
	case jobspec.CodecSparse:
		return protocol.CodecSparse
	}
	return protocol.CodecF32
}

// wireSnapshotCodec is the protocol's name of a spec's snapshot codec.
func wireSnapshotCodec(s jobspec.Spec) string {
	if s.SnapshotCodec == jobspec.CodecFP16 {
		return protocol.SnapshotF16
	}
	return protocol.SnapshotF32
}

// updateCodecFor is the update codec a worker that speaks codecs sends
// in.
func (j *Job) updateCodecFor(codecs []string) string {
	if c := wireUpdateCodec(j.Spec); c != protocol.CodecF32 && slices.Contains(codecs, c) {
		return c
	}
	return protocol.CodecF32
}

// welcomeCodec fills info's update codec for a worker that speaks codecs.
func (j *Job) welcomeCodec(info *protocol.JobInfo, codecs []string) {
	info.UpdateCodec = j.updateCodecFor(codecs)
	switch info.UpdateCodec {
	case protocol.CodecTopK:
		info.TopKFraction = j.Spec.TopKFraction
	case protocol.CodecSparse:
		info.SparseFraction, info.SparseChunk = j.Spec.SparseK, j.Spec.SparseChunk
	}
}

// unpackUpdate decodes a result's packed update into buf's update storage
// and sets res.Update. It returns why the result must be refused as
// invalid, or "": a codec other than f32 and the job's, a sparse update
// whose chunk size or count is not the job's, or a packed update that does
// not decode (protocol.DecodeUpdate says what is wrong).
func (j *Job) unpackUpdate(res *protocol.Result, buf *decodeBuf) string {
	if res.Codec == "" || res.Codec == protocol.CodecF32 {
		return ""
	}
	if want := wireUpdateCodec(j.Spec); res.Codec != want {
		return fmt.Sprintf("update codec %q is neither %q nor this job's (%q)", res.Codec, protocol.CodecF32, want)
	}
	if res.Codec == protocol.CodecSparse {
		// The header says how to read the rest; it must say what the
		// welcome asked for, or a worker could send more than its share.
		chunk, k, ok := protocol.SparseParams(res.Packed)
		wantK := protocol.SparseCount(j.Spec.SparseChunk, j.Spec.SparseK)
		if ok && (chunk != j.Spec.SparseChunk || k != wantK) {
			return fmt.Sprintf("sparse update: chunk %d with %d entries, want this job's chunk %d with %d (sparse_chunk %d, sparse_k %v)",
				chunk, k, j.Spec.SparseChunk, wantK, j.Spec.SparseChunk, j.Spec.SparseK)
		}
	}
	u, err := protocol.DecodeUpdate(res.Codec, res.Packed, j.model.NumParams, buf.update)
	buf.update = u[:0]
	if err != nil {
		return err.Error()
	}
	res.Update = u
	return ""
}
