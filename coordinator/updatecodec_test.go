package coordinator_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/worker"
)

// joinRawHello is joinRaw with a hello that edit changes first (nil: as
// joinRaw's).
func (g *testGrid) joinRawHello(edit func(*protocol.Hello)) *rawClient {
	g.t.Helper()
	rc := &rawClient{t: g.t, conn: g.dialRaw()}
	h := &protocol.Hello{Protocol: protocol.Version, Kind: protocol.KindNative, Backend: "raw", Threads: 1, Client: "raw test client"}
	if edit != nil {
		edit(h)
	}
	rc.send(h)
	w, ok := rc.read().(*protocol.Welcome)
	if !ok {
		g.t.Fatal("expected a welcome")
	}
	rc.welcome = w
	return rc
}

// joinRawCodecs is joinRaw with the update codecs the hello names.
func (g *testGrid) joinRawCodecs(codecs []string) *rawClient {
	g.t.Helper()
	return g.joinRawHello(func(h *protocol.Hello) { h.Codecs = codecs })
}

func codecJob(t testing.TB, codec string) jobspec.Spec {
	s := quietJob(t)
	s.UpdateCodec = codec
	if codec == jobspec.CodecTopK {
		s.SpotCheck = 0
		s.TopKFraction = 0.02
	}
	if codec == jobspec.CodecSparse {
		s.SpotCheck = 0
		s.SparseK, s.SparseChunk = 0.02, 1024
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestWelcomeNamesTheUpdateCodec(t *testing.T) {
	g := newTestGrid(t, codecJob(t, jobspec.CodecTopK))
	for _, c := range []struct {
		codecs      []string
		codec       string
		topkNonZero bool
	}{
		{protocol.UpdateCodecs, protocol.CodecTopK, true},
		{[]string{protocol.CodecF32, protocol.CodecI8}, protocol.CodecF32, false}, // does not speak topk
		{nil, protocol.CodecF32, false},
	} {
		j := g.joinRawCodecs(c.codecs).welcome.Job
		got := j.UpdateCodec
		if got == "" {
			got = protocol.CodecF32
		}
		if got != c.codec || (j.TopKFraction == 0.02) != c.topkNonZero {
			t.Errorf("hello codecs %v: welcome update_codec %q topk_fraction %v, want %q (fraction set: %v)",
				c.codecs, j.UpdateCodec, j.TopKFraction, c.codec, c.topkNonZero)
		}
	}
}

func packedResult(l protocol.Lease, codec string, packed []byte) *protocol.Result {
	return &protocol.Result{LeaseID: l.ID, JobID: l.JobID, BaseVersion: l.BaseVersion, Codec: codec,
		Packed: packed, Examples: l.Count, LossSum: 1}
}

func le32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

// Each malformed packed update is refused as invalid with its reason, and
// the model's parameters stay bit for bit what they were; a good one is
// then applied.
func TestMalformedPackedUpdatesAreRejected(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, codec := range []string{jobspec.CodecInt8, jobspec.CodecTopK, jobspec.CodecSparse} {
		t.Run(codec, func(t *testing.T) {
			g := newTestGrid(t, codecJob(t, codec))
			rc := g.joinRawCodecs(protocol.UpdateCodecs)
			wire := rc.welcome.Job.UpdateCodec
			if wire != map[string]string{jobspec.CodecInt8: protocol.CodecI8, jobspec.CodecTopK: protocol.CodecTopK,
				jobspec.CodecSparse: protocol.CodecSparse}[codec] {
				t.Fatalf("welcome update_codec %q", wire)
			}
			if j := rc.welcome.Job; wire == protocol.CodecSparse && (j.SparseFraction != 0.02 || j.SparseChunk != 1024) {
				t.Fatalf("welcome sparse_k %v, sparse_chunk %d; want the job's 0.02 and 1024", j.SparseFraction, j.SparseChunk)
			}
			n := rc.welcome.Job.NumParams
			u := make([]float32, n)
			for i := range u {
				u[i] = float32(r.NormFloat64() * 1e-3)
			}
			enc := &protocol.UpdateEncoder{Codec: wire, TopKFraction: 0.02, SparseFraction: 0.02, SparseChunk: 1024}
			good, err := enc.Encode(nil, u, false)
			if err != nil {
				t.Fatal(err)
			}
			f16 := &protocol.UpdateEncoder{Codec: protocol.CodecF16}
			other, _ := f16.Encode(nil, u, false)
			edit := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
			putF32 := func(b []byte, at int, v float32) []byte {
				binary.LittleEndian.PutUint32(b[at:], math.Float32bits(v))
				return b
			}
			type badCase struct {
				name, codec string
				packed      []byte
				reason      string
			}
			cases := []badCase{
				{"truncated", wire, good[:len(good)-1], "truncated"},
				{"over-long", wire, append(bytes.Clone(good), 0), "over-long"},
				{"another codec", protocol.CodecF16, other, "neither"},
			}
			if wire == protocol.CodecI8 {
				blk := 3 * (8 + protocol.I8Block) // block 3's header
				cases = append(cases,
					badCase{"NaN min", wire, edit(func(b []byte) []byte { return putF32(b, blk, float32(math.NaN())) }), "block 3: min is NaN"},
					badCase{"Inf step", wire, edit(func(b []byte) []byte { return putF32(b, blk+4, float32(math.Inf(1))) }), "block 3: step is +Inf"},
					badCase{"negative step", wire, edit(func(b []byte) []byte { return putF32(b, blk+4, -1) }), "negative"},
					badCase{"overflowing block", wire, edit(func(b []byte) []byte {
						putF32(b, blk, 3e38)
						b[blk+8] = 255
						return putF32(b, blk+4, 3e38)
					}), "decodes to +Inf"})
			} else if wire == protocol.CodecSparse {
				// Header: chunk, k; chunk 0's levels at 8 and 12, its
				// 10-bit offsets from 16.
				k := binary.LittleEndian.Uint32(good[4:])
				cases = append(cases,
					badCase{"header only", wire, good[:8], "truncated"},
					badCase{"another chunk size", wire, edit(func(b []byte) []byte {
						binary.LittleEndian.PutUint32(b, 2048)
						return b
					}), "want this job's chunk 1024 with 21"},
					badCase{"more entries than the job's", wire, edit(func(b []byte) []byte {
						binary.LittleEndian.PutUint32(b[4:], k+1)
						return b
					}), "chunk 1024 with 22 entries"},
					badCase{"NaN level", wire, edit(func(b []byte) []byte { return putF32(b, 12, float32(math.NaN())) }), "chunk 0: levels"},
					badCase{"levels out of order", wire, edit(func(b []byte) []byte { return putF32(b, 8, 1) }), "is above hi"},
					badCase{"offsets out of order", wire, edit(func(b []byte) []byte {
						b[16], b[17] = 0xff, b[17]|0x03 // the first offset 1023
						return b
					}), "offsets must increase"})
			} else {
				k := int(binary.LittleEndian.Uint32(good))
				cases = append(cases,
					badCase{"k = 0", wire, le32(0), "k = 0"},
					badCase{"k > n", wire, le32(uint32(n + 1)), "k = "},
					badCase{"index out of range", wire, edit(func(b []byte) []byte {
						binary.LittleEndian.PutUint32(b[4+4*(k-1):], uint32(n))
						return b
					}), "out of range"},
					badCase{"index repeated", wire, edit(func(b []byte) []byte {
						copy(b[4+4*5:], b[4+4*4:4+4*5])
						return b
					}), "repeated"},
					badCase{"indices unsorted", wire, edit(func(b []byte) []byte {
						i4, i5 := bytes.Clone(b[4+4*4:4+4*5]), bytes.Clone(b[4+4*5:4+4*6])
						copy(b[4+4*4:], i5)
						copy(b[4+4*5:], i4)
						return b
					}), "must increase"},
					badCase{"NaN value", wire, edit(func(b []byte) []byte { return putF32(b, 4+4*k+8, float32(math.NaN())) }), "NaN"})
			}

			l := rc.leases(1)[0]
			before := snapshotBytes(t, g, l)
			for _, c := range cases {
				res := packedResult(l, c.codec, c.packed)
				rc.send(res)
				a := rc.ack(res.LeaseID)
				if a.Accepted || a.Reason != protocol.ReasonInvalid || !strings.Contains(a.Detail, c.reason) {
					t.Errorf("%s: ack %+v, want rejected %s saying %q", c.name, a, protocol.ReasonInvalid, c.reason)
				}
				// The lease went back to the queue: take it again.
				l = rc.leases(1)[0]
				if l.BaseVersion != 0 {
					t.Fatalf("%s: the model moved to version %d", c.name, l.BaseVersion)
				}
				if after := snapshotBytes(t, g, l); !bytes.Equal(before, after) {
					t.Fatalf("%s: the model's parameters changed", c.name)
				}
			}
			v := g.jobView()
			if v.Version != 0 || v.UpdatesApplied != 0 || v.Rejections["invalid"] != int64(len(cases)) {
				t.Fatalf("version %d, applied %d, rejections %v; want nothing applied and %d invalid",
					v.Version, v.UpdatesApplied, v.Rejections, len(cases))
			}

			// A good packed update is decoded and applied on the same
			// connection, and so is an f32 one (always accepted).
			res := packedResult(l, wire, good)
			rc.send(res)
			if a := rc.ack(l.ID); !a.Accepted || a.Version != 1 {
				t.Fatalf("a valid %s update: %+v", wire, a)
			}
			l = rc.leases(1)[0]
			rc.send(&protocol.Result{LeaseID: l.ID, JobID: l.JobID, BaseVersion: l.BaseVersion, Codec: protocol.CodecF32,
				Update: u, Examples: l.Count, LossSum: 1})
			if a := rc.ack(l.ID); !a.Accepted || a.Version != 2 {
				t.Fatalf("a valid f32 update in a %s job: %+v", wire, a)
			}
		})
	}
}

// Real workers train in each update codec: the accepted results grow and
// none is refused as invalid.
func TestWorkersTrainInEachUpdateCodec(t *testing.T) {
	wireName := map[string]string{jobspec.CodecFP32: protocol.CodecF32, jobspec.CodecFP16: protocol.CodecF16,
		jobspec.CodecInt8: protocol.CodecI8, jobspec.CodecTopK: protocol.CodecTopK, jobspec.CodecSparse: protocol.CodecSparse}
	for _, codec := range []string{jobspec.CodecFP32, jobspec.CodecFP16, jobspec.CodecInt8, jobspec.CodecTopK, jobspec.CodecSparse} {
		t.Run(codec, func(t *testing.T) {
			g := newTestGrid(t, codecJob(t, codec))
			var mu sync.Mutex
			var connected []string
			g.addWorkerWith(1, nil, func(c *worker.Config) {
				c.Logf = func(format string, a ...any) {
					line := fmt.Sprintf(format, a...)
					if strings.HasPrefix(line, "connected as") {
						mu.Lock()
						connected = append(connected, line)
						mu.Unlock()
					}
					t.Log(line)
				}
			})
			v := g.waitFor("20 accepted results", 2*time.Minute, func(v coordinator.JobView) bool { return v.UpdatesApplied >= 20 })
			if v.Rejections["invalid"] != 0 {
				t.Fatalf("rejections %v", v.Rejections)
			}
			mu.Lock()
			defer mu.Unlock()
			want := fmt.Sprintf("updates in %q", wireName[codec])
			if len(connected) == 0 || !strings.Contains(connected[0], want) {
				t.Fatalf("worker connected with %q, want %s", connected, want)
			}
		})
	}
}

// An int8 job trains mnist-mlp with two workers of two volunteers past a
// low accuracy bar within one epoch. Spot checks run often, comparing i8
// primaries with their f32 copies at a tolerance tighter than the codec's
// error: within the codec's slack, every honest pair agrees and no one is
// struck.
func TestInt8JobTrainsMNIST(t *testing.T) {
	testenv.Long(t, "trains MNIST end to end")
	spec := jobSpec(t, "mnist-mlp", func(s *jobspec.Spec) {
		s.UpdateCodec = jobspec.CodecInt8
		s.TargetAccuracy = 0.9
		s.MaxEpochs = 1
		s.EvalEvery = 200
		s.SpotCheck = 0.2
		// Tighter than i8's own error (about 1% of the norm): only the
		// codec's slack lets an honest i8 primary agree.
		s.SpotCheckTolerance = 1e-3
	})
	g := newTestGrid(t, spec)
	for _, k := range []string{"int8-volunteer-key-000001", "int8-volunteer-key-000002"} {
		g.addWorkerWith(1, nil, func(c *worker.Config) { c.VolunteerKey = k })
	}
	v := g.waitDone(4 * time.Minute)
	if v.Eval == nil || v.Eval.Accuracy < 0.9 {
		t.Fatalf("job ended %s (%s) with eval %+v, want >= 0.9", v.State, v.Reason, v.Eval)
	}
	if v.Rejections["invalid"] != 0 {
		t.Errorf("rejections %v", v.Rejections)
	}
	if sc := v.SpotChecks; sc == nil || sc.Checked == 0 || sc.Agreed != sc.Checked || sc.Strikes != 0 {
		t.Errorf("spot checks %+v: want some, all agreed, no strikes", sc)
	}
	t.Logf("int8: accuracy %.4f at version %d, %d examples, %d results, rejections %v, spot checks %+v",
		v.Eval.Accuracy, v.Eval.Version, v.ExamplesSeen, v.UpdatesApplied, v.Rejections, v.SpotChecks)
}

// DiLoCo and async DiLoCo with the sparse codec (1% of each 4096-value
// chunk, 2-bit values, about 200x fewer bytes than f32) train mnist-mlp
// with two real workers to 90% within 3 epochs, at the outer momentum
// sparse defaults to (0.7): error feedback carries what each round did not
// send into the next. Every result arrives sparse
// and decodes, and the result frames received are over 50x smaller than
// f32 updates would be.
func TestDiLoCoSparseTrainsMNIST(t *testing.T) {
	testenv.Long(t, "trains MNIST end to end")
	for _, c := range []struct{ name, mode string }{
		{"diloco", "mode: diloco\n"},
		{"async_diloco", "mode: diloco\nasync_diloco: true\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			spec := modeSpec(t, c.mode+"local_steps: 16\nround_size: 2\nupdate_codec: sparse\n"+
				"target_accuracy: 0.9\nmax_epochs: 3\neval_every: 20\n")
			if spec.SparseK != jobspec.DefaultSparseK || spec.SparseChunk != jobspec.DefaultSparseChunk || spec.SpotCheck != 0 {
				t.Fatalf("spec sparse_k %v, sparse_chunk %d, spot_check %v", spec.SparseK, spec.SparseChunk, spec.SpotCheck)
			}
			g := newTestGrid(t, spec)
			for range 2 {
				g.addWorker(1, nil)
			}
			v := g.waitDone(4 * time.Minute)
			if v.State != coordinator.StateDone || v.Eval == nil || v.Eval.Accuracy < 0.9 {
				t.Fatalf("job ended %s (%s) with eval %+v, want done at >= 0.9", v.State, v.Reason, v.Eval)
			}
			if v.Rejections["invalid"] != 0 {
				t.Errorf("rejections %v", v.Rejections)
			}
			full := 4 * float64(v.NumParams)
			perResult := float64(v.BytesIn) / float64(v.UpdatesApplied+v.UpdatesRejected)
			t.Logf("%s sparse: accuracy %.4f at version %d, %d examples, %d results, rejections %v; %.0f bytes a result frame against %.0f for an f32 update (%.0fx)",
				c.name, v.Eval.Accuracy, v.Eval.Version, v.ExamplesSeen, v.UpdatesApplied, v.Rejections, perResult, full, full/perResult)
			if perResult > full/50 {
				t.Errorf("%.0f bytes a result, over 1/50 of f32's %.0f", perResult, full)
			}
		})
	}
}

// The job spec's sparse bounds and defaults are the protocol's: a spec
// that validates is one every worker encodes and the coordinator decodes.
func TestSparseSpecBoundsAreTheProtocols(t *testing.T) {
	if jobspec.MinSparseChunk != protocol.SparseMinChunk || jobspec.MaxSparseChunk != protocol.SparseMaxChunk ||
		jobspec.MaxSparseK != protocol.SparseMaxFraction || jobspec.DefaultSparseChunk != protocol.DefaultSparseChunk ||
		jobspec.DefaultSparseK != protocol.DefaultSparseFraction {
		t.Fatalf("jobspec sparse bounds %d..%d, k <= %v, defaults %d, %v; protocol's %d..%d, k <= %v, defaults %d, %v",
			jobspec.MinSparseChunk, jobspec.MaxSparseChunk, jobspec.MaxSparseK, jobspec.DefaultSparseChunk, jobspec.DefaultSparseK,
			protocol.SparseMinChunk, protocol.SparseMaxChunk, protocol.SparseMaxFraction, protocol.DefaultSparseChunk, protocol.DefaultSparseFraction)
	}
}
