package nn

// Direct convolution for stride-1 conv2d layers on the avx512 kernel: no
// im2col matrix and no packing of one.
//
// Each example's input is copied once into a zero-padded staging plane
// (Hs×Ws per channel, Hs = H+2·pad, Ws = W+2·pad). An output position
// (oy, ox) is computed on a "virtual" grid of width Ws: at q = oy·Ws + ox
// the tap (c, kh, kw) reads staged[q + c·Hs·Ws + kh·Ws + kw], so for 32
// consecutive q one tap reads 32 consecutive floats. The micro-kernel
// (convFwd8x32, conv_direct_amd64.s) is the GEMM micro-kernel with B's rows
// taken from the staging plane at a per-tap offset instead of from a packed
// panel: 8 output channels × 32 positions per call, one FMA pair per tap
// and channel. Columns with ox ≥ OW are computed and dropped (for a 28-wide
// output on a 32-wide plane, 4 of 32).
//
//   - forward: the staged inputs of the batch are kept (in the layer's
//     patch buffer, which they fit in many times over) for the backward pass;
//   - weight gradient: dW[f][tap] = Σ_q dOut[f][q] · staged[q + off(tap)],
//     8 channels × 2 taps at a time with 16-lane partial sums
//     (convGradW8x2), summed over the batch before one horizontal reduction;
//   - input gradient: the forward kernel again, as a "full" convolution of
//     the output gradient (staged with K-1-pad zeros around it) with the
//     kernels flipped and input/output channels swapped.
//
// It is used when the step's kernel is avx512 and the layer fits: stride 1,
// pad < K, filters (and, for the input gradient, input channels) a multiple
// of 8. Otherwise the layer runs as before (layers.go).

// dconvOff turns the direct path off (tests compare it with im2col).
var dconvOff = false

// dconvGeom is a conv layer's shape as the direct path needs it.
type dconvGeom struct {
	C, H, W, F, K, Pad, OH, OW int
	Hs, Ws, T, Q16, S          int // staging plane, 32-wide tiles, 16-wide chunks, staged floats per example
	taps, maxOff               int
}

func newDconvGeom(C, H, W, F, K, pad, OH, OW int) dconvGeom {
	g := dconvGeom{C: C, H: H, W: W, F: F, K: K, Pad: pad, OH: OH, OW: OW}
	g.Hs, g.Ws = H+2*pad, W+2*pad
	g.T = ceilDiv(OH*g.Ws, 32)
	g.Q16 = ceilDiv(OH*g.Ws, 16) * 16
	g.taps = C * K * K
	g.maxOff = (C-1)*g.Hs*g.Ws + (K-1)*g.Ws + K - 1
	g.S = g.T*32 + g.maxOff
	return g
}

// dconvFits reports whether layer l takes the direct path on n examples
// with the step's kernel; forward and backward ask the same question and
// get the same answer.
func dconvFits(s *gemmScratch, l *layer, cols []float32, n int) (dconvGeom, bool) {
	if dconvOff || !s.kernel().directConv || l.stride != 1 || l.k < 2 || l.pad >= l.k || l.out.c%8 != 0 {
		return dconvGeom{}, false
	}
	g := newDconvGeom(l.in.c, l.in.h, l.in.w, l.out.c, l.k, l.pad, l.out.h, l.out.w)
	if n*g.S > len(cols) {
		return dconvGeom{}, false
	}
	return g, true
}

// dconvScratch holds the direct path's buffers, grown on first use.
type dconvScratch struct {
	out  []float32 // one group's virtual output grid, 8 × T·32
	wpk  []float32 // weights packed [F/8][taps][8]
	off  []int32   // each tap's offset in the staging plane
	dpk  []float32 // one group's output gradient, [Q16/16][8][16]
	acc  []float32 // weight-gradient partial sums, [F/8][taps/2][8][2][16]
	dst  []float32 // the output gradient staged for the input gradient
	dwpk []float32 // flipped, transposed weights packed [ceil(C/8)][F·K·K][8]
	doff []int32
	din  []float32 // the input gradient when C is not a multiple of 8
}

func growF(p *[]float32, n int) []float32 {
	if cap(*p) < n {
		*p = make([]float32, n)
	}
	return (*p)[:n]
}

func growI(p *[]int32, n int) []int32 {
	if cap(*p) < n {
		*p = make([]int32, n)
	}
	return (*p)[:n]
}

// tapOffsets writes the staging-plane offset of every tap (c, kh, kw) of
// a K×K kernel over C planes of hs×ws; with an odd count one more tap at
// offset 0 pads it to a whole pair (its result is dropped).
func tapOffsets(p *[]int32, C, K, hs, ws int) []int32 {
	taps := C * K * K
	off := growI(p, taps+taps%2)
	t := 0
	for c := 0; c < C; c++ {
		for kh := 0; kh < K; kh++ {
			for kw := 0; kw < K; kw++ {
				off[t] = int32(c*hs*ws + kh*ws + kw)
				t++
			}
		}
	}
	if taps%2 == 1 {
		off[taps] = 0
	}
	return off
}

// stage copies one example's C planes of h×w into dst's zeroed planes of
// hs×ws at (pad, pad); dst's tail past the planes is zeroed too.
func stage(dst, src []float32, C, h, w, hs, ws, pad int) {
	clear(dst)
	for c := 0; c < C; c++ {
		for y := 0; y < h; y++ {
			d := dst[c*hs*ws+(y+pad)*ws+pad:]
			copy(d[:w], src[c*h*w+y*w:c*h*w+(y+1)*w])
		}
	}
}

// directFwd computes, for each group of 8 output channels, out[f][oy][ox]
// (OH×OW, f < Fo) = Σ_tap wpk · staged + bias[f] (bias may be nil),
// rectified when relu; staged is one example staged on planes of width ws.
func directFwd(ds *dconvScratch, staged, wpk []float32, off []int32, taps, Fo, ws, OH, OW int, bias []float32, relu bool, out []float32) {
	T := ceilDiv(OH*ws, 32)
	ld := T * 32
	v := growF(&ds.out, 8*ld)
	var zero [8]float32
	for g := 0; g < Fo/8; g++ {
		a := wpk[g*taps*8 : (g+1)*taps*8]
		b := zero[:]
		if bias != nil {
			b = bias[g*8 : g*8+8]
		}
		for t := 0; t < T; t++ {
			convFwd8x32Checked(taps, a, staged[t*32:], off[:taps], b, relu, v[t*32:], ld)
		}
		for i := 0; i < 8; i++ {
			f := g*8 + i
			row := v[i*ld:]
			o := out[f*OH*OW : (f+1)*OH*OW]
			for oy := 0; oy < OH; oy++ {
				copy(o[oy*OW:(oy+1)*OW], row[oy*ws:oy*ws+OW])
			}
		}
	}
}

// dconvForward is convForward on the direct path; it keeps the staged
// inputs in cols.
func dconvForward(s *gemmScratch, g dconvGeom, l *layer, params, in, out, cols []float32, n int) {
	ds := &s.dconv
	w := params[l.wOff : l.wOff+l.wLen]
	b := params[l.bOff : l.bOff+l.bLen]
	// Pack the weights: wpk[grp][tap][i] = W[grp*8+i][tap].
	wpk := growF(&ds.wpk, g.F*g.taps)
	for f := 0; f < g.F; f++ {
		grp, i := f/8, f%8
		for t, v := range w[f*g.taps : (f+1)*g.taps] {
			wpk[(grp*g.taps+t)*8+i] = v
		}
	}
	off := tapOffsets(&ds.off, g.C, g.K, g.Hs, g.Ws)
	inSize, outSize := g.C*g.H*g.W, g.F*g.OH*g.OW
	for e := 0; e < n; e++ {
		st := cols[e*g.S : (e+1)*g.S]
		stage(st, in[e*inSize:(e+1)*inSize], g.C, g.H, g.W, g.Hs, g.Ws, g.Pad)
		directFwd(ds, st, wpk, off, g.taps, g.F, g.Ws, g.OH, g.OW, b, l.fusedReLU, out[e*outSize:(e+1)*outSize])
	}
}

// dconvBackward is convBackward on the direct path: cols holds the staged
// inputs from the forward pass.
func dconvBackward(s *gemmScratch, g dconvGeom, l *layer, params, cols, dOut, dIn, grad []float32, n int) {
	ds := &s.dconv
	gw := grad[l.wOff : l.wOff+l.wLen]
	db := grad[l.bOff : l.bOff+l.bLen]
	clear(db)
	outSize := g.F * g.OH * g.OW
	off := tapOffsets(&ds.off, g.C, g.K, g.Hs, g.Ws)
	pairs := len(off) / 2
	acc := growF(&ds.acc, g.F*pairs*2*16)
	clear(acc)
	dpk := growF(&ds.dpk, 8*g.Q16)
	for e := 0; e < n; e++ {
		dOutE := dOut[e*outSize : (e+1)*outSize]
		for f := 0; f < g.F; f++ {
			db[f] += sum8(dOutE[f*g.OH*g.OW : (f+1)*g.OH*g.OW])
		}
		st := cols[e*g.S : (e+1)*g.S]
		for grp := 0; grp < g.F/8; grp++ {
			// dpk[q/16][i][q%16] = dOut[grp*8+i] at q = oy*Ws+ox, zero
			// where ox >= OW: each row in runs that stay in one chunk.
			clear(dpk)
			for i := 0; i < 8; i++ {
				src := dOutE[(grp*8+i)*g.OH*g.OW:]
				for oy := 0; oy < g.OH; oy++ {
					row := src[oy*g.OW : (oy+1)*g.OW]
					q := oy * g.Ws
					for len(row) > 0 {
						lane := q & 15
						r := min(len(row), 16-lane)
						d := (q>>4)*128 + i*16 + lane
						copy(dpk[d:d+r], row[:r])
						row = row[r:]
						q += r
					}
				}
			}
			a := acc[grp*pairs*2*8*16 : (grp+1)*pairs*2*8*16]
			for p := 0; p < pairs; p++ {
				convGradW8x2Checked(g.Q16/16, dpk, st, int(off[2*p]), int(off[2*p+1]), a[p*256:(p+1)*256])
			}
		}
	}
	// Reduce the 16 lanes: acc[grp][p][i][t][l] is channel grp*8+i, tap 2p+t.
	for f := 0; f < g.F; f++ {
		grp, i := f/8, f%8
		a := acc[grp*pairs*256 : (grp+1)*pairs*256]
		row := gw[f*g.taps : (f+1)*g.taps]
		for t := range row {
			lanes := a[(t/2)*256+i*32+(t%2)*16:][:16]
			row[t] = sum8(lanes)
		}
	}
	if dIn == nil {
		return
	}
	// The input gradient: a stride-1 convolution of dOut, padded by
	// K-1-pad, with W'[c][f][a][b] = W[f][c][K-1-a][K-1-b].
	w := params[l.wOff : l.wOff+l.wLen]
	pd := g.K - 1 - g.Pad
	hd, wd := g.OH+2*pd, g.OW+2*pd
	dtaps := g.F * g.K * g.K
	T := ceilDiv(g.H*wd, 32)
	dS := T*32 + (g.F-1)*hd*wd + (g.K-1)*wd + g.K - 1
	dst := growF(&ds.dst, dS)
	C8 := ceilDiv(g.C, 8) * 8
	dwpk := growF(&ds.dwpk, C8*dtaps)
	clear(dwpk[g.C*dtaps:]) // channels past C, if any: zero weights
	KK := g.K * g.K
	for c := 0; c < g.C; c++ {
		grp, i := c/8, c%8
		for f := 0; f < g.F; f++ {
			src := w[(f*g.C+c)*KK : (f*g.C+c+1)*KK]
			for a := 0; a < g.K; a++ {
				for b := 0; b < g.K; b++ {
					t := (f*g.K+a)*g.K + b
					dwpk[(grp*dtaps+t)*8+i] = src[(g.K-1-a)*g.K+g.K-1-b]
				}
			}
		}
	}
	doff := tapOffsets(&ds.doff, g.F, g.K, hd, wd)
	inSize := g.C * g.H * g.W
	for e := 0; e < n; e++ {
		stage(dst, dOut[e*outSize:(e+1)*outSize], g.F, g.OH, g.OW, hd, wd, pd)
		dInE := dIn[e*inSize : (e+1)*inSize]
		if C8 == g.C {
			directFwd(ds, dst, dwpk, doff, dtaps, g.C, wd, g.H, g.W, nil, false, dInE)
			continue
		}
		// Whole groups of 8 into a buffer, then the C that exist.
		tmp := growF(&ds.din, C8*g.H*g.W)
		directFwd(ds, dst, dwpk, doff, dtaps, C8, wd, g.H, g.W, nil, false, tmp)
		copy(dInE, tmp[:inSize])
	}
}

// sum8 is sum with eight running sums, so the additions do not wait on
// each other.
func sum8(x []float32) float32 {
	var s0, s1, s2, s3, s4, s5, s6, s7 float32
	for len(x) >= 8 {
		s0 += x[0]
		s1 += x[1]
		s2 += x[2]
		s3 += x[3]
		s4 += x[4]
		s5 += x[5]
		s6 += x[6]
		s7 += x[7]
		x = x[8:]
	}
	for _, v := range x {
		s0 += v
	}
	return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
}
