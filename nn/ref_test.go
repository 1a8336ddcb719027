package nn

import (
	"fmt"
	"math"
)

// refModel is an independent, naive float64 implementation of the forward
// pass and loss, written directly from the spec and the documented layout
// (dense weight [out,in], conv2d weight [filters,channels,k,k], CHW
// activations). Finite differences on it give gradients precise enough to
// check the float32 backward pass tightly.
type refModel struct {
	spec   ModelSpec
	tensor map[string]ParamTensor
}

func newRef(m *Model) *refModel {
	r := &refModel{spec: m.Spec, tensor: map[string]ParamTensor{}}
	for _, t := range m.Layout {
		r.tensor[t.Name] = t
	}
	return r
}

func (r *refModel) get(p []float64, i int, typ, kind string) []float64 {
	t, ok := r.tensor[fmt.Sprintf("%d.%s.%s", i, typ, kind)]
	if !ok {
		panic(fmt.Sprintf("ref: no tensor %d.%s.%s", i, typ, kind))
	}
	return p[t.Offset : t.Offset+t.Size]
}

// meanLoss returns the mean softmax cross-entropy over the n examples in x.
func (r *refModel) meanLoss(p, x []float64, labels []int32) float64 {
	in := len(x) / len(labels)
	var total float64
	for e, lab := range labels {
		z := r.forward(p, x[e*in:(e+1)*in])
		mx := math.Inf(-1)
		for _, v := range z {
			mx = math.Max(mx, v)
		}
		var s float64
		for _, v := range z {
			s += math.Exp(v - mx)
		}
		total += mx + math.Log(s) - z[lab]
	}
	return total / float64(len(labels))
}

// forward runs one example.
func (r *refModel) forward(p, x []float64) []float64 {
	c, h, w := r.spec.Input[0], r.spec.Input[1], r.spec.Input[2]
	a := append([]float64(nil), x...)
	for i, ls := range r.spec.Layers {
		switch ls.Type {
		case "dense":
			W, b := r.get(p, i, "dense", "weight"), r.get(p, i, "dense", "bias")
			in := len(a)
			out := make([]float64, ls.Units)
			for o := range out {
				s := b[o]
				for j := 0; j < in; j++ {
					s += W[o*in+j] * a[j]
				}
				out[o] = s
			}
			a, c, h, w = out, ls.Units, 1, 1
		case "relu":
			for j := range a {
				a[j] = math.Max(a[j], 0)
			}
		case "flatten":
			c, h, w = c*h*w, 1, 1
		case "conv2d":
			W, b := r.get(p, i, "conv2d", "weight"), r.get(p, i, "conv2d", "bias")
			k, s, pad := ls.Kernel, max(ls.Stride, 1), ls.Padding
			oh, ow := (h+2*pad-k)/s+1, (w+2*pad-k)/s+1
			out := make([]float64, ls.Filters*oh*ow)
			// out[f][y][x] = b[f] + sum W[f][ci][kh][kw] * a[ci][y*s-pad+kh][x*s-pad+kw]
			for f := 0; f < ls.Filters; f++ {
				of := out[f*oh*ow : (f+1)*oh*ow]
				for j := range of {
					of[j] = b[f]
				}
				for ci := 0; ci < c; ci++ {
					for kh := 0; kh < k; kh++ {
						for kw := 0; kw < k; kw++ {
							wv := W[((f*c+ci)*k+kh)*k+kw]
							for y := 0; y < oh; y++ {
								iy := y*s - pad + kh
								if iy < 0 || iy >= h {
									continue
								}
								row := a[(ci*h+iy)*w : (ci*h+iy+1)*w]
								for xx := 0; xx < ow; xx++ {
									if ix := xx*s - pad + kw; ix >= 0 && ix < w {
										of[y*ow+xx] += wv * row[ix]
									}
								}
							}
						}
					}
				}
			}
			a, c, h, w = out, ls.Filters, oh, ow
		case "maxpool2d":
			k := ls.Kernel
			if k == 0 {
				k = 2
			}
			s := ls.Stride
			if s == 0 {
				s = k
			}
			oh, ow := (h-k)/s+1, (w-k)/s+1
			out := make([]float64, c*oh*ow)
			for ci := 0; ci < c; ci++ {
				for y := 0; y < oh; y++ {
					for xx := 0; xx < ow; xx++ {
						mx := math.Inf(-1)
						for ky := 0; ky < k; ky++ {
							for kx := 0; kx < k; kx++ {
								mx = math.Max(mx, a[(ci*h+y*s+ky)*w+xx*s+kx])
							}
						}
						out[(ci*oh+y)*ow+xx] = mx
					}
				}
			}
			a, h, w = out, oh, ow
		default:
			panic("ref: unknown layer " + ls.Type)
		}
	}
	return a
}

func to64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}
