package nn

import "fmt"

// poolLayer is max pooling over square windows of each channel.
type poolLayer struct{ layer }

func init() {
	registerLayer(TypeMaxPool2D, []string{"kernel", "stride"}, resolvePool)
}

func resolvePool(r *resolver, ls LayerSpec, cur shape) (Layer, error) {
	l := &poolLayer{}
	if cur.kind != shapeImage {
		return nil, fmt.Errorf("needs a [channels,height,width] input but gets %s %v; put maxpool2d layers before flatten and dense", kindName(cur), cur)
	}
	l.k, l.stride = ls.Kernel, ls.Stride
	if l.k == 0 {
		l.k = 2
	}
	if l.stride == 0 {
		l.stride = l.k
	}
	if l.k > cur.h || l.k > cur.w {
		return nil, fmt.Errorf("window %d larger than input %dx%d (use a smaller kernel or drop this pooling layer)", l.k, cur.h, cur.w)
	}
	l.in, l.inSize = cur, cur.size()
	l.out = imageShape(cur.c, (cur.h-l.k)/l.stride+1, (cur.w-l.k)/l.stride+1)
	l.outSize = l.out.size()
	return l, nil
}

// poolState keeps the winning input index per output for the backward pass.
type poolState struct{ argmax []int32 }

func (l *poolLayer) newState(b *wsBuilder, maxBatch int) any {
	return &poolState{argmax: b.int32s(maxBatch * l.outSize)}
}

func (l *poolLayer) forward(c *runCtx, st any, params, in, out []float32, n int) {
	poolForward(&l.layer, in, out, st.(*poolState).argmax[:n*l.outSize], n)
}

func (l *poolLayer) backward(c *runCtx, st any, params, in, out, dOut, dIn, grad []float32, n int) {
	if dIn != nil {
		poolBackward(&l.layer, dOut, dIn, st.(*poolState).argmax[:n*l.outSize], n)
	}
}

func (l *poolLayer) describe(p *LayerPlan) {
	p.Kernel, p.Stride = l.k, l.stride
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
