package nn

import "math"

// Layer kernels. Activations are row-major per example; spatial tensors are
// channel-major (CHW). Each function handles a batch of n examples.

// denseForward computes out[n×O] = in[n×I] · Wᵀ + b (W is [O×I]) in one of
// two ways:
//
//   - dots: gemm(in, Wᵀ), one dot product of length I per output;
//   - axpys: W is transposed into wT[I×O] and gemm(in, wT) adds one row of wT
//     per input value, skipping the zeros. The transpose costs O*I copies,
//     against n*O*I multiply-adds.
//
// Which is faster depends on how many inputs are zero (relu outputs are about
// half zeros, MNIST pixels about 80%) and on the platform (see
// axpyZeroQuarters), so the input is counted on each call: a cheap pass next
// to the GEMM.
func denseForward(s *gemmScratch, l *layer, params, in, out, wT []float32, n int) {
	I, O := l.inSize, l.outSize
	w := params[l.wOff : l.wOff+l.wLen]
	b := params[l.bOff : l.bOff+l.bLen]
	// Seed each row with the bias and let the GEMM accumulate into it (beta=1),
	// which saves a separate pass over the output.
	for e := 0; e < n; e++ {
		copy(out[e*O:(e+1)*O], b)
	}
	if !denseAxpys(s, in) {
		gemm(s, false, true, n, O, I, 1, in, I, w, I, 1, out, O)
		return
	}
	wT = wT[:I*O]
	transpose(w, O, I, wT)
	gemm(s, false, false, n, O, I, 1, in, I, wT, O, 1, out, O)
}

// denseForwardMode overrides denseAxpys when non-zero (tests use it to
// check both paths): 1 forces dots, 2 forces axpys.
var denseForwardMode = 0

// denseAxpys reports whether denseForward should use the axpy formulation
// for this input.
func denseAxpys(s *gemmScratch, in []float32) bool {
	if denseForwardMode != 0 {
		return denseForwardMode == 2
	}
	if !s.skipZeros() {
		// A packed kernel does the same work for zeros, so the
		// transpose would be pure cost.
		return false
	}
	// Count zeros in an evenly strided sample of at most about 4096 values,
	// without branches: x = bits<<1 drops the sign, and (x | -x) has its top
	// bit set exactly when x != 0.
	step := max(1, len(in)/4096)
	zeros, total := 0, 0
	for i := 0; i < len(in); i += step {
		x := math.Float32bits(in[i]) << 1
		zeros += int(1 - (x|-x)>>31)
		total++
	}
	return zeros*4 >= axpyZeroQuarters*total
}

// transpose writes the transpose of a (rows×cols, row-major) to t, in
// blocks so both sides stay in cache.
func transpose(a []float32, rows, cols int, t []float32) {
	const blk = 32
	for i0 := 0; i0 < rows; i0 += blk {
		i1 := min(i0+blk, rows)
		for j0 := 0; j0 < cols; j0 += blk {
			j1 := min(j0+blk, cols)
			for i := i0; i < i1; i++ {
				row := a[i*cols+j0 : i*cols+j1]
				for j, v := range row {
					t[(j0+j)*rows+i] = v
				}
			}
		}
	}
}

func denseBackward(s *gemmScratch, l *layer, params, in, dOut, dIn, grad []float32, n int) {
	I, O := l.inSize, l.outSize
	// dW[O×I] = dOutᵀ · in
	gemm(s, true, false, O, I, n, 1, dOut, O, in, I, 0, grad[l.wOff:l.wOff+l.wLen], I)
	db := grad[l.bOff : l.bOff+l.bLen]
	copy(db, dOut[:O])
	for e := 1; e < n; e++ {
		addTo(db, dOut[e*O:(e+1)*O])
	}
	if dIn != nil {
		// dIn[n×I] = dOut · W
		gemm(s, false, false, n, I, O, 1, dOut, O, params[l.wOff:l.wOff+l.wLen], I, 0, dIn, I)
	}
}

// reluForward works on the bit patterns (clearing values whose sign bit is
// set): with random signs a compare-and-branch mispredicts half the time and
// costs several times more than the masking.
func reluForward(in, out []float32) {
	out = out[:len(in)]
	for i, v := range in {
		b := math.Float32bits(v)
		b &^= uint32(int32(b) >> 31) // all ones if the sign bit is set
		out[i] = math.Float32frombits(b)
	}
}

// reluBackward passes dOut where the relu output is > 0. Outputs are never
// negative, so "> 0" is "bits != 0", and (bits + 0x7fffffff) >> 31 is 1
// exactly then.
func reluBackward(out, dOut, dIn []float32) {
	dOut = dOut[:len(out)]
	dIn = dIn[:len(out)]
	for i, v := range out {
		mask := -((math.Float32bits(v) + 0x7fffffff) >> 31)
		dIn[i] = math.Float32frombits(math.Float32bits(dOut[i]) & mask)
	}
}

// biasReLU writes relu(x + b) to out (which may be x).
func biasReLU(x []float32, b float32, out []float32) {
	out = out[:len(x)]
	for i, v := range x {
		bits := math.Float32bits(v + b)
		bits &^= uint32(int32(bits) >> 31)
		out[i] = math.Float32frombits(bits)
	}
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

// poolForward takes the max over each window and records, per output, the
// index of the winning input within its example for the backward pass.
func poolForward(l *layer, in, out []float32, argmax []int32, n int) {
	C, H, W := l.in.c, l.in.h, l.in.w
	K, S := l.k, l.stride
	OH, OW := l.out.h, l.out.w
	if K == 2 && S == 2 {
		pool2x2(l, in, out, argmax, n)
		return
	}
	o := 0
	for e := 0; e < n; e++ {
		inE := in[e*l.inSize : (e+1)*l.inSize]
		for c := 0; c < C; c++ {
			base := c * H * W
			for oy := 0; oy < OH; oy++ {
				for ox := 0; ox < OW; ox++ {
					start := base + oy*S*W + ox*S
					best, bi := inE[start], start
					for ky := 0; ky < K; ky++ {
						r := start + ky*W
						for kx, v := range inE[r : r+K] {
							if v > best {
								best, bi = v, r+kx
							}
						}
					}
					out[o] = best
					argmax[o] = int32(bi)
					o++
				}
			}
		}
	}
}

// pool2x2 is poolForward for the common 2x2 window with stride 2.
func pool2x2(l *layer, in, out []float32, argmax []int32, n int) {
	H, W := l.in.h, l.in.w
	OH, OW := l.out.h, l.out.w
	o := 0
	for e := 0; e < n; e++ {
		inE := in[e*l.inSize : (e+1)*l.inSize]
		for c := 0; c < l.in.c; c++ {
			base := c * H * W
			for oy := 0; oy < OH; oy++ {
				r0 := base + 2*oy*W
				top := inE[r0 : r0+2*OW]
				bot := inE[r0+W : r0+W+2*OW]
				outRow := out[o : o+OW]
				argRow := argmax[o : o+OW]
				for ox := range outRow {
					// Written so the compiler emits conditional moves: with
					// random data, branches here mispredict constantly.
					x := 2 * ox
					best, bi := top[x], x
					if v := top[x+1]; v > best {
						bi = x + 1
					}
					best = max(best, top[x+1])
					if v := bot[x]; v > best {
						bi = W + x
					}
					best = max(best, bot[x])
					if v := bot[x+1]; v > best {
						bi = W + x + 1
					}
					best = max(best, bot[x+1])
					bi += r0
					outRow[ox] = best
					argRow[ox] = int32(bi)
				}
				o += OW
			}
		}
	}
}

func poolBackward(l *layer, dOut, dIn []float32, argmax []int32, n int) {
	clear(dIn[:n*l.inSize])
	O := l.outSize
	for e := 0; e < n; e++ {
		dInE := dIn[e*l.inSize : (e+1)*l.inSize]
		for j, g := range dOut[e*O : (e+1)*O] {
			dInE[argmax[e*O+j]] += g
		}
	}
}

// softmaxCE returns the summed cross-entropy of softmax(logits) against labels
// and the number of rows whose argmax equals the label. If dLogits is non-nil
// it receives (softmax - onehot) * scale. Sums run in float64; the max is
// subtracted before exponentiating so large logits cannot overflow.
func softmaxCE(logits []float32, labels []int32, classes int, dLogits []float32, scale float32) (lossSum float64, correct int) {
	for e, lab := range labels {
		if lab < 0 || int(lab) >= classes {
			panic(badLabel(e, lab, classes))
		}
		z := logits[e*classes : (e+1)*classes]
		mx, arg := z[0], 0
		for j, v := range z {
			if v > mx {
				mx, arg = v, j
			}
		}
		if arg == int(lab) {
			correct++
		}
		m64 := float64(mx)
		var s float64
		if dLogits == nil {
			for _, v := range z {
				s += math.Exp(float64(v) - m64)
			}
		} else {
			d := dLogits[e*classes : (e+1)*classes]
			for j, v := range z {
				ex := math.Exp(float64(v) - m64)
				d[j] = float32(ex)
				s += ex
			}
			inv := float64(scale) / s
			for j := range d {
				d[j] = float32(float64(d[j]) * inv)
			}
			d[lab] -= scale
		}
		lossSum += m64 + math.Log(s) - float64(z[lab])
	}
	return lossSum, correct
}

func fill(x []float32, v float32) {
	for i := range x {
		x[i] = v
	}
}

func addTo(dst, src []float32) {
	src = src[:len(dst)]
	for i, v := range src {
		dst[i] += v
	}
}

func sum(x []float32) float32 {
	var s float32
	for _, v := range x {
		s += v
	}
	return s
}
