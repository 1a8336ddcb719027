package nn

import (
	"fmt"
	"math"
)

// refModel is an independent, naive float64 implementation of the forward
// pass and loss, written directly from the spec and the documented layout
// (dense weight [out,in], conv2d weight [filters,channels,k,k], CHW
// activations, the transformer layers as PyTorch defines them). Finite
// differences on it give gradients precise enough to check the float32
// backward pass tightly.
type refModel struct {
	spec   ModelSpec
	tensor map[string]ParamTensor
	// train applies dropout with seed (as Gradient's forward pass does).
	train bool
	seed  uint64
}

func newRef(m *Model) *refModel {
	r := &refModel{spec: m.Spec, tensor: map[string]ParamTensor{}}
	for _, t := range m.Layout {
		r.tensor[t.Name] = t
	}
	return r
}

func (r *refModel) get(p []float64, name string) []float64 {
	t, ok := r.tensor[name]
	if !ok {
		panic(fmt.Sprintf("ref: no tensor %s", name))
	}
	return p[t.Offset : t.Offset+t.Size]
}

// meanLoss returns the mean softmax cross-entropy over every label position
// of the examples in x.
func (r *refModel) meanLoss(p, x []float64, labels []int32) float64 {
	in := len(r.spec.Input)
	size := 1
	for _, d := range r.spec.Input {
		size *= d
	}
	n := len(x) / size
	_ = in
	lpe := len(labels) / n
	var total float64
	for e := 0; e < n; e++ {
		out := r.forward(p, x[e*size:(e+1)*size], e)
		classes := len(out) / lpe
		for q := 0; q < lpe; q++ {
			z := out[q*classes : (q+1)*classes]
			lab := labels[e*lpe+q]
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
	}
	return total / float64(len(labels))
}

// refAct is one example's activation and its shape: kind as in shape, dims
// [c,h,w], [n], [t] or [t,d].
type refAct struct {
	a    []float64
	kind shapeKind
	dims []int
}

// forward runs example e.
func (r *refModel) forward(p, x []float64, e int) []float64 {
	act := refAct{a: append([]float64(nil), x...), dims: append([]int(nil), r.spec.Input...)}
	if len(r.spec.Input) == 1 {
		act.kind = shapeTokens
	}
	index := 0
	return r.stack(p, "", r.spec.Layers, act, e, &index).a
}

func (r *refModel) stack(p []float64, prefix string, specs []LayerSpec, act refAct, e int, index *int) refAct {
	for i, ls := range specs {
		name := fmt.Sprintf("%s%d.%s.", prefix, i, ls.Type)
		idx := *index
		*index++
		act = r.layer(p, name, ls, act, e, idx, index)
	}
	return act
}

func (r *refModel) layer(p []float64, name string, ls LayerSpec, act refAct, e, idx int, index *int) refAct {
	a := act.a
	switch ls.Type {
	case "dense":
		var W []float64
		if ls.Tied {
			W = r.get(p, r.embeddingName()+"weight")
		} else {
			W = r.get(p, name+"weight")
		}
		b := r.get(p, name+"bias")
		units := len(b)
		rows, in := 1, len(a)
		if act.kind == shapeSeq {
			rows, in = act.dims[0], act.dims[1]
		}
		out := make([]float64, rows*units)
		for q := 0; q < rows; q++ {
			for o := 0; o < units; o++ {
				s := b[o]
				for j := 0; j < in; j++ {
					s += W[o*in+j] * a[q*in+j]
				}
				out[q*units+o] = s
			}
		}
		if act.kind == shapeSeq {
			return refAct{out, shapeSeq, []int{rows, units}}
		}
		return refAct{out, shapeFlat, []int{units}}
	case "relu":
		for j := range a {
			a[j] = math.Max(a[j], 0)
		}
		return act
	case "gelu":
		for j, v := range a {
			a[j] = 0.5 * v * (1 + math.Erf(v/math.Sqrt2))
		}
		return act
	case "dropout":
		if r.train && ls.Rate > 0 {
			for j := range a {
				if DropoutKeep(r.seed, idx, e*len(a)+j, ls.Rate) {
					a[j] /= 1 - ls.Rate
				} else {
					a[j] = 0
				}
			}
		}
		return act
	case "flatten":
		return refAct{a, shapeFlat, []int{len(a)}}
	case "embedding":
		W := r.get(p, name+"weight")
		T, D := len(a), ls.Units
		out := make([]float64, T*D)
		for q := 0; q < T; q++ {
			id := int(a[q])
			for j := 0; j < D; j++ {
				out[q*D+j] = W[id*D+j]
				if ls.Positions > 0 {
					out[q*D+j] += r.get(p, name+"position")[q*D+j]
				}
			}
		}
		return refAct{out, shapeSeq, []int{T, D}}
	case "layernorm":
		g, b := r.get(p, name+"weight"), r.get(p, name+"bias")
		D := len(g)
		eps := ls.Eps
		if eps == 0 {
			eps = 1e-5
		}
		out := make([]float64, len(a))
		for q := 0; q < len(a)/D; q++ {
			x := a[q*D : (q+1)*D]
			var mean, vr float64
			for _, v := range x {
				mean += v
			}
			mean /= float64(D)
			for _, v := range x {
				vr += (v - mean) * (v - mean)
			}
			vr /= float64(D)
			for j, v := range x {
				out[q*D+j] = (v-mean)/math.Sqrt(vr+eps)*g[j] + b[j]
			}
		}
		return refAct{out, act.kind, act.dims}
	case "attention":
		return refAct{r.attention(p, name, ls, a, act.dims[0], act.dims[1]), shapeSeq, act.dims}
	case "residual":
		body := r.stack(p, name, ls.Layers, refAct{append([]float64(nil), a...), act.kind, act.dims}, e, index)
		out := make([]float64, len(a))
		for j := range a {
			out[j] = a[j] + body.a[j]
		}
		return refAct{out, act.kind, act.dims}
	case "conv2d":
		c, h, w := act.dims[0], act.dims[1], act.dims[2]
		W, b := r.get(p, name+"weight"), r.get(p, name+"bias")
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
		return refAct{out, shapeImage, []int{ls.Filters, oh, ow}}
	case "maxpool2d":
		c, h, w := act.dims[0], act.dims[1], act.dims[2]
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
		return refAct{out, shapeImage, []int{c, oh, ow}}
	}
	panic("ref: unknown layer " + ls.Type)
}

// embeddingName is the tensor prefix of the first embedding layer.
func (r *refModel) embeddingName() string {
	for i, ls := range r.spec.Layers {
		if ls.Type == "embedding" {
			return fmt.Sprintf("%d.embedding.", i)
		}
	}
	panic("ref: no embedding")
}

// attention is torch.nn.MultiheadAttention's forward on one sequence x
// [T, D], written out loop by loop.
func (r *refModel) attention(p []float64, name string, ls LayerSpec, x []float64, T, D int) []float64 {
	W, B := r.get(p, name+"in_proj_weight"), r.get(p, name+"in_proj_bias")
	Wo, Bo := r.get(p, name+"out_proj.weight"), r.get(p, name+"out_proj.bias")
	H := ls.Heads
	dh := D / H
	proj := func(block, q, j int) float64 { // (x·Wᵀ + b)[q][block*D + j]
		o := block*D + j
		s := B[o]
		for c := 0; c < D; c++ {
			s += W[o*D+c] * x[q*D+c]
		}
		return s
	}
	Q, K, V := make([]float64, T*D), make([]float64, T*D), make([]float64, T*D)
	for q := 0; q < T; q++ {
		for j := 0; j < D; j++ {
			Q[q*D+j], K[q*D+j], V[q*D+j] = proj(0, q, j), proj(1, q, j), proj(2, q, j)
		}
	}
	ctx := make([]float64, T*D)
	for h := 0; h < H; h++ {
		for i := 0; i < T; i++ {
			n := T
			if ls.Causal {
				n = i + 1
			}
			sc := make([]float64, n)
			mx := math.Inf(-1)
			for j := 0; j < n; j++ {
				var s float64
				for c := 0; c < dh; c++ {
					s += Q[i*D+h*dh+c] * K[j*D+h*dh+c]
				}
				sc[j] = s / math.Sqrt(float64(dh))
				mx = math.Max(mx, sc[j])
			}
			var sum float64
			for j := range sc {
				sc[j] = math.Exp(sc[j] - mx)
				sum += sc[j]
			}
			for j := range sc {
				for c := 0; c < dh; c++ {
					ctx[i*D+h*dh+c] += sc[j] / sum * V[j*D+h*dh+c]
				}
			}
		}
	}
	out := make([]float64, T*D)
	for q := 0; q < T; q++ {
		for o := 0; o < D; o++ {
			s := Bo[o]
			for c := 0; c < D; c++ {
				s += Wo[o*D+c] * ctx[q*D+c]
			}
			out[q*D+o] = s
		}
	}
	return out
}

func to64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}
