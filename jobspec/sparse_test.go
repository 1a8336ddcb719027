package jobspec

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestSparseCodecKeys(t *testing.T) {
	// Defaults: 1% of 4096-value chunks, spot checks off; in every mode.
	for _, mode := range []string{"diloco\nasync_diloco: true", "diloco", "async", "sync"} {
		s := mustParse(t, "name: t\nmodel: mnist-mlp\nupdate_codec: sparse\nmode: "+mode+"\n")
		if s.SparseK != DefaultSparseK || s.SparseChunk != DefaultSparseChunk || s.SpotCheck != 0 {
			t.Errorf("mode %s: sparse_k %v, sparse_chunk %d, spot_check %v; want %v, %d, 0",
				mode, s.SparseK, s.SparseChunk, s.SpotCheck, DefaultSparseK, DefaultSparseChunk)
		}
	}
	// DiLoCo's outer momentum is lower with sparse, unless given.
	for spec, want := range map[string]float64{
		"mode: diloco\nupdate_codec: sparse\n":                     SparseOuterMomentum,
		"mode: diloco\nasync_diloco: true\nupdate_codec: sparse\n": SparseOuterMomentum,
		"mode: diloco\nupdate_codec: topk\nspot_check: 0\n":        0.9,
		"mode: diloco\nupdate_codec: sparse\n" +
			"outer_optimizer: {type: momentum, lr: 0.7, momentum: 0.9, nesterov: true}\n": 0.9,
	} {
		if o := mustParse(t, "name: t\nmodel: mnist-mlp\n"+spec).OuterOptimizer; o.Momentum != want || o.LR != 0.7 || !o.Nesterov {
			t.Errorf("%q: outer optimizer %+v, want Nesterov momentum %v at lr 0.7", spec, o, want)
		}
	}
	s := mustParse(t, "name: t\nmodel: mnist-mlp\nmode: diloco\nupdate_codec: sparse\nsparse_k: 0.25\nsparse_chunk: 64\n")
	if s.SparseK != 0.25 || s.SparseChunk != 64 {
		t.Fatalf("given: sparse_k %v, sparse_chunk %d", s.SparseK, s.SparseChunk)
	}
	// The stored spec records them and reads back the same; one stored
	// without them (or another codec's) gets the defaults (or none).
	b, _ := json.Marshal(s)
	var back Spec
	if err := json.Unmarshal(b, &back); err != nil || back.SparseK != 0.25 || back.SparseChunk != 64 {
		t.Fatalf("stored sparse spec reads back as %v %v (%v)", back.SparseK, back.SparseChunk, err)
	}
	var old Spec
	if err := old.UnmarshalJSON([]byte(`{"name":"t","mode":"diloco","update_codec":"sparse"}`)); err != nil ||
		old.SparseK != DefaultSparseK || old.SparseChunk != DefaultSparseChunk {
		t.Fatalf("stored sparse spec without the keys: %v %v (%v)", old.SparseK, old.SparseChunk, err)
	}
	if fp := mustParse(t, "name: t\nmodel: mnist-mlp\n"); fp.SparseK != 0 || fp.SparseChunk != 0 {
		t.Fatalf("an fp32 spec has sparse_k %v, sparse_chunk %d", fp.SparseK, fp.SparseChunk)
	}

	for bad, want := range map[string]string{
		"update_codec: sparse\nsparse_k: 0":          "sparse_k: must be a fraction in (0, 0.25]",
		"update_codec: sparse\nsparse_k: 0.3":        "sparse_k: must be a fraction in (0, 0.25]",
		"update_codec: sparse\nsparse_k: .nan":       "sparse_k:",
		"update_codec: sparse\nsparse_chunk: 32":     "sparse_chunk: must be in 64..65536",
		"update_codec: sparse\nsparse_chunk: 131072": "sparse_chunk: must be in 64..65536",
		"update_codec: sparse\nspot_check: 0.1":      "spot_check: must be 0 with update_codec sparse",
		"update_codec: topk\nsparse_k: 0.01":         "sparse_k: applies to update_codec sparse only, not topk",
		"sparse_chunk: 4096":                         "sparse_chunk: applies to update_codec sparse only, not fp32",
		"update_codec: sparse\nsparse_chunk: lots":   "sparse_chunk",
		"update_codec: sparsest":                     "update_codec: \"sparsest\" is not a codec (want fp32, fp16, int8, topk or sparse)",
	} {
		_, err := Parse([]byte("name: t\nmodel: mnist-mlp\nmode: diloco\n" + bad + "\n"))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want an error saying %q", bad, err, want)
		}
	}
}
