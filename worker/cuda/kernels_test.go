//go:build linux

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/worker/cuda/driver"
	"github.com/crowdtrain/crowdtrain/worker/gpu"
)

// The sequence layers' kernels, one at a time, against float64 references
// in Go on random inputs. Each backward kernel is checked against central
// differences of its forward reference, so the test does not share a
// derivation with the kernel. They run on the emulator with one thread per
// block and with blocks of 8 real threads (the reductions' trees, the
// grid-stride loops and the atomics as a GPU runs them), and on a GPU where
// there is one.

// rig runs single kernels on a backend from the test goroutine.
type rig struct {
	t     *testing.T
	name  string // the device, in what closeTo logs
	b     *Backend
	alloc []driver.DevicePtr
}

func forEachKernelDevice(t *testing.T, f func(t *testing.T, k *rig)) {
	for _, threads := range []int32{1, 8} {
		t.Run(fmt.Sprintf("emulator %d thread(s) per block", threads), func(t *testing.T) {
			b := devices()[0].open(t)
			defer b.Close()
			n := emuVar[int32](t, "emu_threads")
			*n = threads
			defer func() { *n = 1 }()
			k := &rig{t: t, name: fmt.Sprintf("emulator, %d thread(s) per block", threads), b: b}
			defer k.free()
			f(t, k)
		})
	}
	t.Run("gpu", func(t *testing.T) {
		b := openGPU(t)
		defer b.Close()
		k := &rig{t: t, name: "gpu", b: b}
		defer k.free()
		f(t, k)
	})
}

func (k *rig) do(f func() error) {
	k.t.Helper()
	if err := k.b.th.do(f); err != nil {
		k.t.Fatal(err)
	}
}

func (k *rig) free() {
	k.b.th.do(func() error {
		for _, p := range k.alloc {
			k.b.d.Free(p)
		}
		return nil
	})
}

// floats puts v on the device.
func (k *rig) floats(v []float32) driver.DevicePtr {
	k.t.Helper()
	var p driver.DevicePtr
	k.do(func() (err error) {
		if p, err = k.b.d.Alloc(4 * max(1, len(v))); err != nil {
			return err
		}
		k.alloc = append(k.alloc, p)
		if len(v) == 0 {
			return nil
		}
		return k.b.d.UploadBytes(p, unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v)))
	})
	return p
}

func (k *rig) read(p driver.DevicePtr, n int) []float32 {
	k.t.Helper()
	v := make([]float32, n)
	k.do(func() error { return k.b.d.DownloadBytes(unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*n), p) })
	return v
}

func (k *rig) launch(name string, total int, args ...any) {
	k.t.Helper()
	k.do(func() error { return k.b.launch(name, total, args...) })
}

func (k *rig) rows(name string, rows int, args ...any) {
	k.t.Helper()
	k.do(func() error { return k.b.launchRows(name, rows, args...) })
}

func randFloats(rng *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(scale * rng.NormFloat64())
	}
	return v
}

func f64(v []float32) []float64 {
	r := make([]float64, len(v))
	for i, x := range v {
		r[i] = float64(x)
	}
	return r
}

// closeTo fails unless got is within tol of want, relative to want's
// largest magnitude (so an entry near zero is not held to a relative error
// it cannot have in float32).
func (k *rig) closeTo(what string, got []float32, want []float64, tol float64) {
	t := k.t
	t.Helper()
	what = k.name + ": " + what
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	scale := 0.0
	for _, w := range want {
		scale = max(scale, math.Abs(w))
	}
	scale = max(scale, 1e-30)
	worst, at := 0.0, 0
	for i := range want {
		e := math.Abs(float64(got[i])-want[i]) / scale
		if e > worst || math.IsNaN(e) {
			worst, at = e, i
		}
	}
	if worst > tol || math.IsNaN(worst) {
		t.Errorf("%s: entry %d is %v, want %v (error %.3g of the largest, tolerance %.1g)", what, at, got[at], want[at], worst, tol)
	} else {
		t.Logf("%s: within %.2g of the reference", what, worst)
	}
}

// numGrad is the gradient of sum(dout * f(x)) by central differences of a
// float64 function: the reference for every backward kernel.
func numGrad(f func(x []float64) []float64, x []float64, dout []float64) []float64 {
	g := make([]float64, len(x))
	xs := append([]float64(nil), x...)
	for i := range x {
		h := 1e-6 * max(1, math.Abs(x[i]))
		xs[i] = x[i] + h
		up := f(xs)
		xs[i] = x[i] - h
		down := f(xs)
		xs[i] = x[i]
		s := 0.0
		for j := range up {
			s += dout[j] * (up[j] - down[j])
		}
		g[i] = s / (2 * h)
	}
	return g
}

// Forward and backward tolerances: float32 arithmetic against float64
// references over short sums (rows of at most a few dozen values).
const fwdTol, bwdTol = 2e-6, 2e-5

func TestEmbeddingKernels(t *testing.T) {
	forEachKernelDevice(t, func(t *testing.T, k *rig) {
		rng := rand.New(rand.NewPCG(1, 1))
		const n, tt, d, vocab, positions = 3, 5, 6, 7, 8
		rows := n * tt
		tokens := make([]float32, rows)
		for i := range tokens {
			tokens[i] = float32(rng.IntN(vocab))
		}
		tokens[3], tokens[9] = 4, 4 // shared tokens add up
		w, pos := randFloats(rng, vocab*d, 1), randFloats(rng, positions*d, 1)
		dout := randFloats(rng, rows*d, 1)
		pre := randFloats(rng, vocab*d, 1) // what a tied output layer wrote first
		x, pw, pp, pd := k.floats(tokens), k.floats(w), k.floats(pos), k.floats(dout)
		for _, withPos := range []bool{true, false} {
			out := k.floats(make([]float32, rows*d))
			ppos := pp
			if !withPos {
				ppos = 0
			}
			k.launch("embedding_forward", rows*d, x, pw, ppos, out, rows, tt, d, vocab)
			want := make([]float64, rows*d)
			for r := range rows {
				for j := range d {
					want[r*d+j] = float64(w[int(tokens[r])*d+j])
					if withPos {
						want[r*d+j] += float64(pos[(r%tt)*d+j])
					}
				}
			}
			k.closeTo(fmt.Sprintf("embedding forward, position table %v", withPos), k.read(out, rows*d), want, fwdTol)
		}
		want := f64(pre)
		for r := range rows {
			for j := range d {
				want[int(tokens[r])*d+j] += float64(dout[r*d+j])
			}
		}
		for _, kernel := range []string{"embedding_backward_gather", "embedding_backward_scatter"} {
			dw := k.floats(pre)
			total := rows * d
			if kernel == "embedding_backward_gather" {
				total = vocab * d
			}
			k.launch(kernel, total, x, pd, dw, rows, d, vocab)
			k.closeTo(kernel+": token table gradient, added to what was there", k.read(dw, vocab*d), want, fwdTol)
		}
		dp := k.floats(randFloats(rng, positions*d, 1)) // overwritten, rows t.. with 0
		k.launch("embedding_backward_positions", positions*d, pd, dp, n, tt, positions, d)
		want = make([]float64, positions*d)
		for r := range rows {
			for j := range d {
				want[(r%tt)*d+j] += float64(dout[r*d+j])
			}
		}
		k.closeTo("embedding position table gradient", k.read(dp, positions*d), want, fwdTol)
	})
}

func layernormRef(x, w, b []float64, rows, d int, eps float64) (y, mean, rstd []float64) {
	y, mean, rstd = make([]float64, len(x)), make([]float64, rows), make([]float64, rows)
	for r := range rows {
		row := x[r*d : (r+1)*d]
		mu, v := 0.0, 0.0
		for _, a := range row {
			mu += a
		}
		mu /= float64(d)
		for _, a := range row {
			v += (a - mu) * (a - mu)
		}
		rs := 1 / math.Sqrt(v/float64(d)+eps)
		for j, a := range row {
			y[r*d+j] = (a-mu)*rs*w[j] + b[j]
		}
		mean[r], rstd[r] = mu, rs
	}
	return y, mean, rstd
}

func TestLayerNormKernels(t *testing.T) {
	forEachKernelDevice(t, func(t *testing.T, k *rig) {
		rng := rand.New(rand.NewPCG(2, 1))
		for _, c := range []struct{ rows, d int }{{7, 37}, {3, 128}, {2, 1}} {
			rows, d := c.rows, c.d
			const eps = 1e-5
			x := randFloats(rng, rows*d, 2)
			for j := range d { // an offset the normalisation removes
				x[j] += 3
			}
			w, b := randFloats(rng, d, 1), randFloats(rng, d, 1)
			dout := randFloats(rng, rows*d, 1)
			px, pw, pb, pd := k.floats(x), k.floats(w), k.floats(b), k.floats(dout)
			out, mean, rstd := k.floats(make([]float32, rows*d)), k.floats(make([]float32, rows)), k.floats(make([]float32, rows))
			k.rows("layernorm_forward", rows, px, pw, pb, out, mean, rstd, rows, d, float32(eps))
			wantY, wantMean, wantRstd := layernormRef(f64(x), f64(w), f64(b), rows, d, eps)
			what := fmt.Sprintf("layernorm %d×%d", rows, d)
			k.closeTo(what+" forward", k.read(out, rows*d), wantY, fwdTol)
			k.closeTo(what+" mean", k.read(mean, rows), wantMean, fwdTol)
			k.closeTo(what+" rstd", k.read(rstd, rows), wantRstd, 1e-5) // 1/sqrt(var+eps) of a tiny var magnifies rounding

			din := k.floats(make([]float32, rows*d))
			k.rows("layernorm_backward", rows, px, pd, pw, mean, rstd, din, rows, d)
			fx := func(xs []float64) []float64 { y, _, _ := layernormRef(xs, f64(w), f64(b), rows, d, eps); return y }
			k.closeTo(what+" input gradient", k.read(din, rows*d), numGrad(fx, f64(x), f64(dout)), bwdTol)
			dw, db := k.floats(make([]float32, d)), k.floats(make([]float32, d))
			k.rows("layernorm_param_grads", d, px, pd, mean, rstd, dw, db, rows, d)
			fw := func(ws []float64) []float64 { y, _, _ := layernormRef(f64(x), ws, f64(b), rows, d, eps); return y }
			fb := func(bs []float64) []float64 { y, _, _ := layernormRef(f64(x), f64(w), bs, rows, d, eps); return y }
			k.closeTo(what+" weight gradient", k.read(dw, d), numGrad(fw, f64(w), f64(dout)), bwdTol)
			k.closeTo(what+" bias gradient", k.read(db, d), numGrad(fb, f64(b), f64(dout)), bwdTol)
		}
	})
}

func geluRef(x []float64) []float64 {
	y := make([]float64, len(x))
	for i, a := range x {
		y[i] = 0.5 * a * (1 + math.Erf(a/math.Sqrt2))
	}
	return y
}

func TestGELUKernels(t *testing.T) {
	forEachKernelDevice(t, func(t *testing.T, k *rig) {
		rng := rand.New(rand.NewPCG(3, 1))
		const n = 301
		x, dout := randFloats(rng, n, 2), randFloats(rng, n, 1)
		x[0], x[1], x[2] = 0, -8, 8
		px, pd, out, din := k.floats(x), k.floats(dout), k.floats(make([]float32, n)), k.floats(make([]float32, n))
		k.launch("gelu_forward", n, px, out, n)
		k.closeTo("gelu forward", k.read(out, n), geluRef(f64(x)), fwdTol)
		k.launch("gelu_backward", n, px, pd, din, n)
		k.closeTo("gelu backward", k.read(din, n), numGrad(geluRef, f64(x), f64(dout)), bwdTol)
	})
}

// attentionSoftmaxRef is softmax(scale*s) per row of t, masked when causal.
func attentionSoftmaxRef(s []float64, rows, t int, scale float64, causal bool) []float64 {
	p := make([]float64, len(s))
	for r := range rows {
		n := t
		if causal {
			n = r%t + 1
		}
		z := s[r*t : r*t+n]
		mx := math.Inf(-1)
		for _, v := range z {
			mx = max(mx, v*scale)
		}
		sum := 0.0
		for _, v := range z {
			sum += math.Exp(v*scale - mx)
		}
		for j, v := range z {
			p[r*t+j] = math.Exp(v*scale-mx) / sum
		}
	}
	return p
}

func TestAttentionSoftmaxKernels(t *testing.T) {
	forEachKernelDevice(t, func(t *testing.T, k *rig) {
		rng := rand.New(rand.NewPCG(4, 1))
		const mats, tt = 3, 6
		rows := mats * tt
		scale := 1 / math.Sqrt(5)
		s, dp := randFloats(rng, rows*tt, 2), randFloats(rng, rows*tt, 1)
		ps, pdp := k.floats(s), k.floats(dp)
		for _, causal := range []bool{true, false} {
			what := fmt.Sprintf("attention softmax, causal %v", causal)
			p := k.floats(randFloats(rng, rows*tt, 1)) // masked entries must be overwritten with 0
			k.rows("attention_softmax", rows, ps, p, rows, tt, float32(scale), map[bool]int{true: 1}[causal])
			k.closeTo(what+", forward", k.read(p, rows*tt), attentionSoftmaxRef(f64(s), rows, tt, scale, causal), fwdTol)
			ds := k.floats(dp) // in place: ds starts as dp
			k.rows("attention_softmax_backward", rows, p, ds, ds, rows, tt, float32(scale))
			f := func(x []float64) []float64 { return attentionSoftmaxRef(x, rows, tt, scale, causal) }
			k.closeTo(what+", backward (in place)", k.read(ds, rows*tt), numGrad(f, f64(s), f64(dp)), bwdTol)
			ds2 := k.floats(make([]float32, rows*tt))
			k.rows("attention_softmax_backward", rows, p, pdp, ds2, rows, tt, float32(scale))
			k.closeTo(what+", backward", k.read(ds2, rows*tt), numGrad(f, f64(s), f64(dp)), bwdTol)
		}
	})
}

// The existing kernels the sequence layers reuse, at sequence shapes: a
// dense layer's bias per position (rows = n*t), its bias gradient over
// n*t rows, the residual add, and softmax cross-entropy with a label per
// position.
func TestPerPositionKernels(t *testing.T) {
	forEachKernelDevice(t, func(t *testing.T, k *rig) {
		rng := rand.New(rand.NewPCG(5, 1))
		const n, tt, classes = 3, 5, 11
		rows := n * tt
		m, bias := randFloats(rng, rows*classes, 1), randFloats(rng, classes, 1)
		pm, pb := k.floats(m), k.floats(bias)
		k.launch("add_bias", rows*classes, pm, pb, rows, classes)
		want := make([]float64, rows*classes)
		for i := range want {
			want[i] = float64(m[i]) + float64(bias[i%classes])
		}
		k.closeTo("bias per position", k.read(pm, rows*classes), want, fwdTol)

		sums := k.floats(make([]float32, classes))
		k.do(func() error { return k.b.launchGrid("column_sums", classes, 256, pm, sums, rows, classes) })
		wantSums := make([]float64, classes)
		for i, v := range want {
			wantSums[i%classes] += v
		}
		k.closeTo("bias gradient over n*t rows", k.read(sums, classes), wantSums, fwdTol)

		a, b := randFloats(rng, 77, 1), randFloats(rng, 77, 1)
		pa, pbb := k.floats(a), k.floats(b)
		k.launch("add", 77, pa, pbb, pa, 77) // in place, as a residual's output
		wantAdd := make([]float64, 77)
		for i := range wantAdd {
			wantAdd[i] = float64(a[i]) + float64(b[i])
		}
		k.closeTo("residual add", k.read(pa, 77), wantAdd, fwdTol)

		logits := randFloats(rng, rows*classes, 2)
		labels := make([]int32, rows)
		for i := range labels {
			labels[i] = int32(rng.IntN(classes))
		}
		labels[0] = int32(argmax(logits[:classes])) // at least one right
		// Ties: the first maximum is the prediction.
		logits[classes+3], logits[classes+7], labels[1] = 9, 9, 3     // right
		logits[2*classes+2], logits[2*classes+5], labels[2] = 9, 9, 5 // wrong
		pl := k.floats(logits)
		plab := k.floats(unsafe.Slice((*float32)(unsafe.Pointer(&labels[0])), rows))
		dl := k.floats(make([]float32, rows*classes))
		acc := k.floats(make([]float32, 4))
		rowLoss, rowHit := k.floats(make([]float32, rows)), k.floats(make([]float32, rows))
		scale := 1 / float32(rows)
		k.rows("softmax_xent", rows, pl, plab, dl, rows, classes, scale, rowLoss, rowHit)
		k.do(func() error { return k.b.launchGrid("sum_losses", 1, 256, rowLoss, rowHit, rows, acc, acc+8) })
		wantD := make([]float64, rows*classes)
		wantLoss, wantHits := 0.0, 0
		for r := range rows {
			z := f64(logits[r*classes : (r+1)*classes])
			mx := slicesMax(z)
			sum := 0.0
			for _, v := range z {
				sum += math.Exp(v - mx)
			}
			wantLoss += mx + math.Log(sum) - z[labels[r]]
			if argmax(logits[r*classes:(r+1)*classes]) == int(labels[r]) {
				wantHits++
			}
			for j, v := range z {
				wantD[r*classes+j] = math.Exp(v-mx) / sum * float64(scale)
			}
			wantD[r*classes+int(labels[r])] -= float64(scale)
		}
		k.closeTo("softmax cross-entropy gradient, a label per position", k.read(dl, rows*classes), wantD, fwdTol)
		raw := k.read(acc, 4)
		loss := math.Float64frombits(uint64(math.Float32bits(raw[0])) | uint64(math.Float32bits(raw[1]))<<32)
		hits := int(int32(math.Float32bits(raw[2])))
		if math.Abs(loss-wantLoss) > 1e-5*wantLoss || hits != wantHits {
			t.Errorf("softmax cross-entropy over %d positions: loss %v, %d right; want %v, %d", rows, loss, hits, wantLoss, wantHits)
		}
	})
}

func argmax(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

func slicesMax(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

func TestDropoutKernel(t *testing.T) {
	forEachKernelDevice(t, func(t *testing.T, k *rig) {
		rng := rand.New(rand.NewPCG(6, 1))
		const n = 50000
		x := randFloats(rng, n, 1)
		px := k.floats(x)
		const layer = 3
		for _, rate := range []float64{0.1, 0.5} {
			th, scale := gpu.DropoutThreshold(rate), float32(1/(1-rate))
			var masks [2][]bool
			for si, seed := range []uint64{12345, 12346} {
				out := k.floats(make([]float32, n))
				k.launch("dropout_apply", n, px, out, n, seed, layer, th, scale)
				got := k.read(out, n)
				want := make([]float64, n)
				kept := 0
				masks[si] = make([]bool, n)
				for i := range want {
					if nn.DropoutKeep(seed, layer, i, rate) { // the CPU's mask
						want[i] = float64(x[i] * scale)
						kept++
						masks[si][i] = true
					}
				}
				k.closeTo(fmt.Sprintf("dropout %.1f, seed %d", rate, seed), got, want, 0)
				if frac := float64(kept) / n; math.Abs(frac-(1-rate)) > 0.01 {
					t.Errorf("dropout %.1f keeps %.4f of the values", rate, frac)
				}
			}
			same := 0
			for i := range n {
				if masks[0][i] == masks[1][i] {
					same++
				}
			}
			// Independent masks agree on (1-r)² + r² of the values.
			if want := (1-rate)*(1-rate) + rate*rate; math.Abs(float64(same)/n-want) > 0.01 {
				t.Errorf("dropout %.1f: seeds 12345 and 12346 agree on %.4f of the mask, independent ones on %.4f", rate, float64(same)/n, want)
			}
		}
	})
}

// attentionRef is multi-head self-attention in float64 (see attention):
// x [n*t×d], win [3d×d], bin [3d], wout [d×d], bout [d].
func attentionRef(x, win, bin, wout, bout []float64, n, t, d, heads int, causal bool) []float64 {
	hs := d / heads
	qkv := make([]float64, n*t*3*d)
	for r := range n * t {
		for o := range 3 * d {
			s := bin[o]
			for i := range d {
				s += x[r*d+i] * win[o*d+i]
			}
			qkv[r*3*d+o] = s
		}
	}
	ctx := make([]float64, n*t*d)
	scale := 1 / math.Sqrt(float64(hs))
	for e := range n {
		for h := range heads {
			for p := range t {
				at := func(pos, block, c int) float64 { return qkv[(e*t+pos)*3*d+block*d+h*hs+c] }
				keys := t
				if causal {
					keys = p + 1
				}
				sc := make([]float64, keys)
				mx := math.Inf(-1)
				for j := range keys {
					for c := range hs {
						sc[j] += at(p, 0, c) * at(j, 1, c)
					}
					sc[j] *= scale
					mx = max(mx, sc[j])
				}
				sum := 0.0
				for j := range sc {
					sc[j] = math.Exp(sc[j] - mx)
					sum += sc[j]
				}
				for j := range sc {
					for c := range hs {
						ctx[(e*t+p)*d+h*hs+c] += sc[j] / sum * at(j, 2, c)
					}
				}
			}
		}
	}
	out := make([]float64, n*t*d)
	for r := range n * t {
		for o := range d {
			s := bout[o]
			for i := range d {
				s += ctx[r*d+i] * wout[o*d+i]
			}
			out[r*d+o] = s
		}
	}
	return out
}

// Attention as the backend computes it (GEMMs, strided-batched per head,
// and the softmax kernels) against attentionRef, forward and every
// gradient.
func TestAttentionMatchesReference(t *testing.T) {
	forEachKernelDevice(t, func(t *testing.T, k *rig) {
		rng := rand.New(rand.NewPCG(7, 1))
		for _, c := range []struct {
			n, t, d, heads int
			causal         bool
		}{{2, 5, 6, 2, true}, {3, 4, 8, 4, false}, {1, 3, 4, 1, true}} {
			n, tt, d := c.n, c.t, c.d
			rows := n * tt
			x, dout := randFloats(rng, rows*d, 1), randFloats(rng, rows*d, 1)
			win, bin := randFloats(rng, 3*d*d, 0.5), randFloats(rng, 3*d, 0.1)
			wout, bout := randFloats(rng, d*d, 0.5), randFloats(rng, d, 0.1)
			// gp puts v on the device as the executor's pointer.
			gp := func(v []float32) gpu.Ptr { return gpu.Ptr(k.floats(v)) }
			a := &gpu.Attention{N: n, T: tt, D: d, Heads: c.heads, Causal: c.causal,
				Win: gp(win), Bin: gp(bin), Wout: gp(wout), Bout: gp(bout),
				GWin: gp(make([]float32, 3*d*d)), GBin: gp(make([]float32, 3*d)),
				GWout: gp(make([]float32, d*d)), GBout: gp(make([]float32, d))}
			a.QKV, a.Probs, a.Ctx = gp(make([]float32, a.QKVSize())), gp(make([]float32, a.ProbsSize())), gp(make([]float32, a.CtxSize()))
			s := gpu.AttentionScratch{DCtx: gp(make([]float32, a.CtxSize())), DProbs: gp(make([]float32, a.ProbsSize())), DQKV: gp(make([]float32, a.QKVSize()))}
			px, pd, out, dx := gp(x), gp(dout), gp(make([]float32, rows*d)), gp(make([]float32, rows*d))
			k.do(func() error { return a.Forward(k.b.dev, px, out) })
			k.do(func() error { return a.Backward(k.b.dev, s, px, pd, dx) })
			what := fmt.Sprintf("attention n=%d t=%d d=%d heads=%d causal=%v", n, tt, d, c.heads, c.causal)
			ref := func(x, win, bin, wout, bout []float64) []float64 {
				return attentionRef(x, win, bin, wout, bout, n, tt, d, c.heads, c.causal)
			}
			X, Win, Bin, Wout, Bout, D := f64(x), f64(win), f64(bin), f64(wout), f64(bout), f64(dout)
			k.closeTo(what+": output", k.read(driver.DevicePtr(out), rows*d), ref(X, Win, Bin, Wout, Bout), fwdTol)
			k.closeTo(what+": input gradient", k.read(driver.DevicePtr(dx), rows*d), numGrad(func(v []float64) []float64 { return ref(v, Win, Bin, Wout, Bout) }, X, D), bwdTol)
			k.closeTo(what+": in_proj_weight gradient", k.read(driver.DevicePtr(a.GWin), 3*d*d), numGrad(func(v []float64) []float64 { return ref(X, v, Bin, Wout, Bout) }, Win, D), bwdTol)
			k.closeTo(what+": in_proj_bias gradient", k.read(driver.DevicePtr(a.GBin), 3*d), numGrad(func(v []float64) []float64 { return ref(X, Win, v, Wout, Bout) }, Bin, D), bwdTol)
			k.closeTo(what+": out_proj.weight gradient", k.read(driver.DevicePtr(a.GWout), d*d), numGrad(func(v []float64) []float64 { return ref(X, Win, Bin, v, Bout) }, Wout, D), bwdTol)
			k.closeTo(what+": out_proj.bias gradient", k.read(driver.DevicePtr(a.GBout), d), numGrad(func(v []float64) []float64 { return ref(X, Win, Bin, Wout, v) }, Bout, D), bwdTol)
		}
	})
}

// The clip kernels scale a vector by min(1, c/(‖g‖₂+1e-6)) as nn.ClipScale
// does: by the same factor to float32 rounding when the norm is above c,
// not at all (bit for bit) when it is below.
func TestClipKernels(t *testing.T) {
	forEachKernelDevice(t, func(t *testing.T, k *rig) {
		rng := rand.New(rand.NewPCG(8, 1))
		const n = 100003 // more than the grid's threads, not a multiple of the block
		g := randFloats(rng, n, 0.1)
		var ss float64
		for _, v := range g {
			ss += float64(v) * float64(v)
		}
		norm := math.Sqrt(ss)
		for _, c := range []float64{norm / 4, norm * 2} {
			pg := k.floats(g)
			partial := k.floats(make([]float32, 2*gpu.ClipBlocks))
			scale := k.floats([]float32{0})
			k.do(func() error {
				if err := k.b.launchGrid("grad_sumsq_partial", gpu.ClipBlocks, 256, pg, n, partial); err != nil {
					return err
				}
				if err := k.b.launchGrid("clip_scale", 1, 256, partial, gpu.ClipBlocks, float32(c), scale); err != nil {
					return err
				}
				return k.b.launch("scale_by", n, pg, scale, n)
			})
			s := math.Min(1, c/(norm+1e-6))
			if got := k.read(scale, 1)[0]; math.Abs(float64(got)-s) > 1e-6*s {
				t.Errorf("%s: clip %.4g of a norm %.4g: scale %v, want %v", k.name, c, norm, got, s)
			}
			if want := nn.ClipScale(g, c); want != float32(s) {
				t.Fatalf("nn.ClipScale is %v, want %v", want, s)
			}
			want := make([]float64, n)
			tol := 1e-6
			for i, v := range g {
				want[i] = float64(v) * s
			}
			if s == 1 {
				tol = 0
			}
			k.closeTo(fmt.Sprintf("clip %.4g of a norm %.4g", c, norm), k.read(pg, n), want, tol)
		}
	})
}
