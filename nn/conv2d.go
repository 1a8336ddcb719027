package nn

import "fmt"

// layer holds the resolved fields of the windowed image layers (conv2d and
// maxpool2d), whose kernels below read them directly.
type layer struct {
	layerBase
	// Parameter tensors (conv2d): weight is [filters, channels, k, k], i.e.
	// rows are output units.
	wOff, wLen, bOff, bLen int
	fanIn                  int

	// conv2d and maxpool2d.
	k, stride, pad int
	// conv2d im2col matrix: colRows = channels*k*k, colCols = outH*outW.
	colRows, colCols int
	rowMode          bool // conv2d: see rowModeMinR
}

// convLayer is a 2-D convolution over [channels, height, width] with square
// kernels, stride and zero padding: weight [filters, channels, k, k], bias
// [filters].
type convLayer struct{ layer }

func init() {
	registerLayer(TypeConv2D, []string{"filters", "kernel", "stride", "padding"}, resolveConv)
}

func resolveConv(r *resolver, ls LayerSpec, cur shape) (Layer, error) {
	l := &convLayer{}
	if cur.kind != shapeImage {
		return nil, fmt.Errorf("needs a [channels,height,width] input but gets %s %v; put conv2d layers before flatten and dense", kindName(cur), cur)
	}
	if ls.Filters < 1 {
		return nil, fmt.Errorf("filters must be >= 1, got %d (set filters to the number of output channels)", ls.Filters)
	}
	if ls.Kernel < 1 {
		return nil, fmt.Errorf("kernel must be >= 1, got %d (set kernel to the square kernel size, e.g. 3)", ls.Kernel)
	}
	l.k, l.stride, l.pad = ls.Kernel, ls.Stride, ls.Padding
	if l.stride == 0 {
		l.stride = 1
	}
	ph, pw := cur.h+2*l.pad, cur.w+2*l.pad
	if l.k > ph || l.k > pw {
		return nil, fmt.Errorf("kernel %d larger than padded input %dx%d", l.k, ph, pw)
	}
	oh, ow := (ph-l.k)/l.stride+1, (pw-l.k)/l.stride+1
	if ls.Filters > maxActivation || l.k > maxActivation ||
		int64(ls.Filters)*int64(oh)*int64(ow) > maxActivation ||
		int64(cur.c)*int64(l.k)*int64(l.k)*int64(oh)*int64(ow) > maxActivation {
		return nil, fmt.Errorf("%d filters of %dx%d on %v is too large (at most %d values per example in one tensor)", ls.Filters, l.k, l.k, cur, maxActivation)
	}
	l.in = cur
	l.out = imageShape(ls.Filters, oh, ow)
	l.inSize = cur.size()
	l.colRows, l.colCols = cur.c*l.k*l.k, oh*ow
	l.rowMode = l.colRows >= rowModeMinR
	l.fanIn = l.colRows
	var err error
	if l.wOff, l.wLen, err = r.tensor(&l.layerBase, "weight", []int{ls.Filters, cur.c, l.k, l.k}, initUniform, heUniform(l.fanIn)); err != nil {
		return nil, err
	}
	if l.bOff, l.bLen, err = r.tensor(&l.layerBase, "bias", []int{ls.Filters}, initZero, 0); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *convLayer) canFuseReLU() bool { return true }

// convState keeps the batch's patch matrices for the backward pass.
type convState struct{ cols []float32 }

func (l *convLayer) newState(b *wsBuilder, maxBatch int) any {
	if l.convDirect() {
		return &convState{}
	}
	if l.needDIn || b.allDIn {
		b.needScratch(l.colRows * l.colCols) // one example's patch gradient
	}
	return &convState{cols: b.floats(maxBatch * l.colRows * l.colCols)}
}

func (l *convLayer) forward(c *runCtx, st any, params, in, out []float32, n int) {
	convForward(c.gemm, &l.layer, params, in, out, st.(*convState).cols, n)
}

func (l *convLayer) backward(c *runCtx, st any, params, in, out, dOut, dIn, grad []float32, n int) {
	convBackward(c.gemm, &l.layer, params, in, st.(*convState).cols, dOut, dIn, c.scratch, grad, n)
}

func (l *convLayer) describe(p *LayerPlan) {
	p.WeightOffset, p.WeightSize, p.BiasOffset, p.BiasSize = l.wOff, l.wLen, l.bOff, l.bLen
	p.Kernel, p.Stride, p.Padding = l.k, l.stride, l.pad
}

// convDirect reports whether the im2col matrix equals the input (1x1 kernel,
// stride 1, no padding), so the copy can be skipped.
func (l *layer) convDirect() bool { return l.k == 1 && l.stride == 1 && l.pad == 0 }

// Conv layers use im2col-style GEMMs in one of two arrangements, chosen per
// layer (layer.rowMode) from the patch length R = C*K*K and the platform
// (rowModeMinR):
//
//   - col mode: the batch's im2col matrices col_e[R×P] (P = outH*outW) are
//     kept from the forward pass; forward is out_e = W·col_e (axpys of length
//     P) and dW sums dOut_e·col_eᵀ (dots of length P).
//   - row mode: the transposed patches rows_e[P×R] are kept; forward is
//     out_e = W·rows_eᵀ (dots of length R) and both backward GEMMs take dOut_e
//     as their left operand, whose zero entries gonum skips. After a relu and
//     a 2x2 maxpool, three quarters or more of dOut is zero, which makes the
//     backward pass several times faster.

// convForward computes out_e[F×P] = W[F×R] · patches_e + b for each example,
// keeping the patch matrices in cols for the backward pass. With
// l.fusedReLU, out is the relu's output and is rectified in place.
func convForward(s *gemmScratch, l *layer, params, in, out, cols []float32, n int) {
	if g, ok := dconvFits(s, l, cols, n); ok {
		dconvForward(s, g, l, params, in, out, cols, n)
		return
	}
	F, R, P := l.out.c, l.colRows, l.colCols
	w := params[l.wOff : l.wOff+l.wLen]
	b := params[l.bOff : l.bOff+l.bLen]
	for e := 0; e < n; e++ {
		inE := in[e*l.inSize : (e+1)*l.inSize]
		outE := out[e*F*P : (e+1)*F*P]
		var beta float32
		if !l.fusedReLU {
			// Seed with the bias and accumulate; with a fused relu the
			// bias is added in the relu pass instead.
			beta = 1
			for f := 0; f < F; f++ {
				fill(outE[f*P:(f+1)*P], b[f])
			}
		}
		switch {
		case l.convDirect():
			gemm(s, false, false, F, P, R, 1, w, R, inE, P, beta, outE, P)
		case l.rowMode:
			rows := cols[e*R*P : (e+1)*R*P]
			im2row(l, inE, rows)
			gemm(s, false, true, F, P, R, 1, w, R, rows, R, beta, outE, P)
		default:
			col := cols[e*R*P : (e+1)*R*P]
			im2col(l, inE, col)
			gemm(s, false, false, F, P, R, 1, w, R, col, P, beta, outE, P)
		}
		if l.fusedReLU {
			for f := 0; f < F; f++ {
				o := outE[f*P : (f+1)*P]
				biasReLU(o, b[f], o)
			}
		}
	}
}

// convBackward writes dW and db and, if dIn is non-nil, the input gradient,
// using scratch (R*P floats) for one example's patch gradient.
func convBackward(s *gemmScratch, l *layer, params, in, cols, dOut, dIn, scratch, grad []float32, n int) {
	if g, ok := dconvFits(s, l, cols, n); ok {
		dconvBackward(s, g, l, params, cols, dOut, dIn, grad, n)
		return
	}
	F, R, P := l.out.c, l.colRows, l.colCols
	w := params[l.wOff : l.wOff+l.wLen]
	gw := grad[l.wOff : l.wOff+l.wLen]
	db := grad[l.bOff : l.bOff+l.bLen]
	clear(db)
	for e := 0; e < n; e++ {
		dOutE := dOut[e*F*P : (e+1)*F*P]
		for f := 0; f < F; f++ {
			db[f] += sum(dOutE[f*P : (f+1)*P])
		}
		var beta float32 = 1 // the first example overwrites dW
		if e == 0 {
			beta = 0
		}
		var dInE []float32
		if dIn != nil {
			dInE = dIn[e*l.inSize : (e+1)*l.inSize]
		}
		switch {
		case l.convDirect():
			// dW[F×C] (+)= dOut_e · in_eᵀ; dIn_e[C×P] = Wᵀ · dOut_e.
			gemm(s, false, true, F, R, P, 1, dOutE, P, in[e*l.inSize:(e+1)*l.inSize], P, beta, gw, R)
			if dInE != nil {
				gemm(s, true, false, R, P, F, 1, w, R, dOutE, P, 0, dInE, P)
			}
		case l.rowMode:
			rows := cols[e*R*P : (e+1)*R*P]
			// dW[F×R] (+)= dOut_e[F×P] · rows_e[P×R]
			gemm(s, false, false, F, R, P, 1, dOutE, P, rows, R, beta, gw, R)
			if dInE != nil {
				// dRows[P×R] = dOut_eᵀ · W, scattered back to the input.
				gemm(s, true, false, P, R, F, 1, dOutE, P, w, R, 0, scratch, R)
				row2im(l, scratch, dInE)
			}
		default:
			col := cols[e*R*P : (e+1)*R*P]
			// dW[F×R] (+)= dOut_e[F×P] · col_eᵀ
			gemm(s, false, true, F, R, P, 1, dOutE, P, col, P, beta, gw, R)
			if dInE != nil {
				// dCol[R×P] = Wᵀ · dOut_e, scattered back to the input.
				gemm(s, true, false, R, P, F, 1, w, R, dOutE, P, 0, scratch, P)
				col2im(l, scratch, dInE)
			}
		}
	}
}

// colRange returns the output columns [lo, hi) whose input column
// x*stride + x0 lies inside [0, w); the rest read zero padding.
func colRange(x0, stride, w, ow int) (lo, hi int) {
	if x0 < 0 {
		lo = (-x0 + stride - 1) / stride
	}
	if a := w - x0; a > 0 {
		hi = (a + stride - 1) / stride
	}
	lo, hi = min(lo, ow), min(hi, ow)
	if hi < lo {
		hi = lo
	}
	return lo, hi
}

// im2col writes col[(c*K+kh)*K+kw][oy*OW+ox] = in[c][oy*S-P+kh][ox*S-P+kw]
// (zero outside the input).
func im2col(l *layer, in, col []float32) {
	C, H, W := l.in.c, l.in.h, l.in.w
	K, S, Pd := l.k, l.stride, l.pad
	OH, OW := l.out.h, l.out.w
	idx := 0
	for c := 0; c < C; c++ {
		plane := in[c*H*W : (c+1)*H*W]
		for kh := 0; kh < K; kh++ {
			for kw := 0; kw < K; kw++ {
				x0 := kw - Pd
				lo, hi := colRange(x0, S, W, OW)
				for oy := 0; oy < OH; oy++ {
					row := col[idx : idx+OW]
					idx += OW
					iy := oy*S - Pd + kh
					if iy < 0 || iy >= H {
						clear(row)
						continue
					}
					clear(row[:lo])
					clear(row[hi:])
					src := plane[iy*W : (iy+1)*W]
					if S == 1 {
						dst := row[lo:hi]
						s := src[lo+x0 : hi+x0]
						for i := range dst {
							dst[i] = s[i]
						}
					} else {
						for x := lo; x < hi; x++ {
							row[x] = src[x*S+x0]
						}
					}
				}
			}
		}
	}
}

// col2im is the adjoint of im2col: in is overwritten with the sum of every
// col entry that was read from each input position.
func col2im(l *layer, col, in []float32) {
	C, H, W := l.in.c, l.in.h, l.in.w
	K, S, Pd := l.k, l.stride, l.pad
	OH, OW := l.out.h, l.out.w
	clear(in[:C*H*W])
	idx := 0
	for c := 0; c < C; c++ {
		plane := in[c*H*W : (c+1)*H*W]
		for kh := 0; kh < K; kh++ {
			for kw := 0; kw < K; kw++ {
				x0 := kw - Pd
				lo, hi := colRange(x0, S, W, OW)
				for oy := 0; oy < OH; oy++ {
					row := col[idx : idx+OW]
					idx += OW
					iy := oy*S - Pd + kh
					if iy < 0 || iy >= H {
						continue
					}
					dst := plane[iy*W : (iy+1)*W]
					if S == 1 {
						addTo(dst[lo+x0:hi+x0], row[lo:hi])
					} else {
						for x := lo; x < hi; x++ {
							dst[x*S+x0] += row[x]
						}
					}
				}
			}
		}
	}
}

// im2row writes the transpose of im2col: rows[oy*OW+ox][(c*K+kh)*K+kw].
// Each output position's patch row is a run of K contiguous input values per
// (c, kh), gathered with short copy loops (faster than copy() at this size).
func im2row(l *layer, in, rows []float32) {
	C, H, W := l.in.c, l.in.h, l.in.w
	K, S, Pd := l.k, l.stride, l.pad
	OH, OW := l.out.h, l.out.w
	R := C * K * K
	HW := H * W
	p := 0
	for oy := 0; oy < OH; oy++ {
		y0 := oy*S - Pd
		ylo, yhi := max(0, -y0), min(K, H-y0) // kh range inside the input
		for ox := 0; ox < OW; ox++ {
			x0 := ox*S - Pd
			klo, khi := max(0, -x0), min(K, W-x0) // kw range inside the input
			row := rows[p*R : (p+1)*R]
			p++
			if ylo == 0 && yhi == K && klo == 0 && khi == K {
				// Interior patch: no padding to write.
				r := 0
				for c := 0; c < C; c++ {
					base := c*HW + y0*W + x0
					for kh := 0; kh < K; kh++ {
						src := in[base+kh*W : base+kh*W+K]
						dst := row[r : r+K]
						for i := range dst {
							dst[i] = src[i]
						}
						r += K
					}
				}
				continue
			}
			for i := range row {
				row[i] = 0
			}
			if klo >= khi {
				continue
			}
			for c := 0; c < C; c++ {
				for kh := ylo; kh < yhi; kh++ {
					base := c*HW + (y0+kh)*W + x0
					src := in[base+klo : base+khi]
					dst := row[(c*K+kh)*K+klo : (c*K+kh)*K+khi]
					for i := range dst {
						dst[i] = src[i]
					}
				}
			}
		}
	}
}

// row2im is the adjoint of im2row: in is overwritten with the sum of every
// rows entry that was read from each input position.
func row2im(l *layer, rows, in []float32) {
	C, H, W := l.in.c, l.in.h, l.in.w
	K, S, Pd := l.k, l.stride, l.pad
	OH, OW := l.out.h, l.out.w
	R := C * K * K
	HW := H * W
	clear(in[:C*HW])
	p := 0
	for oy := 0; oy < OH; oy++ {
		y0 := oy*S - Pd
		ylo, yhi := max(0, -y0), min(K, H-y0)
		for ox := 0; ox < OW; ox++ {
			x0 := ox*S - Pd
			klo, khi := max(0, -x0), min(K, W-x0)
			row := rows[p*R : (p+1)*R]
			p++
			if klo >= khi {
				continue
			}
			for c := 0; c < C; c++ {
				for kh := ylo; kh < yhi; kh++ {
					base := c*HW + (y0+kh)*W + x0
					dst := in[base+klo : base+khi]
					src := row[(c*K+kh)*K+klo : (c*K+kh)*K+khi]
					for i := range dst {
						dst[i] += src[i]
					}
				}
			}
		}
	}
}
