package nn

import (
	"fmt"
)

// stack is a list of layers applied in turn: the model itself, or a
// residual block's body.
type stack struct {
	layers  []Layer
	in, out shape
}

// resolveStack resolves specs in order from the input shape in. prefix is
// put before every tensor name ("" at the top, "3.residual." in a body).
func (r *resolver) resolveStack(prefix string, specs []LayerSpec, in shape) (*stack, error) {
	s := &stack{in: in}
	cur := in
	for i, ls := range specs {
		fail := func(err error) error { return fmt.Errorf("layer %d (%s): %w", i, ls.Type, err) }
		lt, ok := registry[ls.Type]
		if !ok {
			return nil, fail(fmt.Errorf("unknown layer type %q (want %s)", ls.Type, orList(LayerTypes())))
		}
		if err := checkFields(ls, lt.fields); err != nil {
			return nil, fail(err)
		}
		needDIn := r.seenParams
		index := r.index
		r.index++
		r.prefix = tensorPrefix(prefix, i, ls.Type)
		l, err := lt.resolve(r, ls, cur)
		if err != nil {
			return nil, fail(err)
		}
		b := l.base()
		b.typ, b.index, b.in, b.inSize, b.needDIn = ls.Type, index, cur, cur.size(), needDIn
		b.outSize = b.out.size()
		if b.outSize > maxActivation {
			return nil, fail(fmt.Errorf("output %v is too large (at most %d values per example in one tensor)", b.out, maxActivation))
		}
		s.layers = append(s.layers, l)
		cur = b.out
	}
	for i := range s.layers[:max(0, len(s.layers)-1)] {
		b := s.layers[i].base()
		if f, ok := s.layers[i].(interface{ canFuseReLU() bool }); ok && f.canFuseReLU() {
			b.fusedReLU = s.layers[i+1].base().typ == TypeReLU
		}
	}
	s.out = cur
	return s, nil
}

// tensorPrefix returns the tensor name prefix of layer i of a stack.
func tensorPrefix(stackPrefix string, i int, typ string) string {
	return fmt.Sprintf("%s%d.%s.", stackPrefix, i, typ)
}

// stackState is a stack's buffers in one Workspace.
type stackState struct {
	// acts[i] is layer i's input and acts[i+1] its output. acts[0] aliases
	// the stack's input during a call; an aliasing layer's output is its
	// input, and a fused relu's input is never stored.
	acts [][]float32
	// dacts[i] is the loss gradient with respect to acts[i], allocated
	// only where someone reads it; dacts[len] is set by the caller.
	dacts  [][]float32
	states []any
}

// dTop is the gradient of the stack's output, if the caller owns it (nil
// if the caller sets dacts[len] per call).
func (s *stack) newState(b *wsBuilder, maxBatch int, dTop []float32) *stackState {
	L := len(s.layers)
	st := &stackState{
		acts:   make([][]float32, L+1),
		dacts:  make([][]float32, L+1),
		states: make([]any, L),
	}
	for i, l := range s.layers {
		lb := l.base()
		if !lb.alias && !lb.fusedReLU {
			st.acts[i+1] = b.floats(maxBatch * lb.outSize)
		}
		st.states[i] = l.newState(b, maxBatch)
	}
	st.dacts[L] = dTop
	// Walk backwards so an aliasing layer can share the buffer above it.
	// A residual body's gradients live only during its block's backward
	// pass, so bodies at the same depth share theirs.
	body := dTop == nil
	for j := L - 1; j >= 0; j-- {
		lb := s.layers[j].base()
		switch {
		case !(b.allDIn || lb.needDIn):
		case lb.alias && j > 0 && st.dacts[j+1] != nil:
			st.dacts[j] = st.dacts[j+1]
		case body:
			b.shared(fmt.Sprintf("body %d dacts %d", b.depth, j), &st.dacts[j], maxBatch*lb.inSize)
		default:
			st.dacts[j] = b.floats(maxBatch * lb.inSize)
		}
	}
	return st
}

// forward runs the stack on in (n examples) and returns its output, owned by
// st.
func (s *stack) forward(c *runCtx, st *stackState, params, in []float32, n int) []float32 {
	st.acts[0] = in
	for i := 0; i < len(s.layers); i++ {
		l := s.layers[i]
		lb := l.base()
		x := st.acts[i][:n*lb.inSize]
		if lb.alias {
			st.acts[i+1] = x
			continue
		}
		if lb.fusedReLU {
			// Write the relu's output directly and skip the relu layer.
			l.forward(c, st.states[i], params, x, st.acts[i+2][:n*lb.outSize], n)
			i++
			continue
		}
		l.forward(c, st.states[i], params, x, st.acts[i+1][:n*lb.outSize], n)
	}
	return st.acts[len(s.layers)][:n*s.out.size()]
}

// backward propagates st.dacts[len] (set by the caller) down the layers,
// writing every parameter gradient into grad. dacts[0] receives the input
// gradient if it was allocated.
func (s *stack) backward(c *runCtx, st *stackState, params, grad []float32, n int) {
	for i := len(s.layers) - 1; i >= 0; i-- {
		if st.dacts[i+1] == nil {
			break // no parameters and no wanted input gradient below here
		}
		l := s.layers[i]
		lb := l.base()
		dOut := st.dacts[i+1][:n*lb.outSize]
		var dIn []float32
		if st.dacts[i] != nil {
			dIn = st.dacts[i][:n*lb.inSize]
		}
		out := st.acts[i+1]
		if lb.fusedReLU {
			out = st.acts[i+2]
		}
		if out != nil {
			out = out[:n*lb.outSize]
		}
		in := st.acts[i] // nil for the relu after a fused layer
		if in != nil {
			in = in[:n*lb.inSize]
		}
		l.backward(c, st.states[i], params, in, out, dOut, dIn, grad, n)
	}
}

// walk calls f on every layer of the stack, depth first (residual bodies
// after their block).
func (s *stack) walk(f func(Layer)) {
	for _, l := range s.layers {
		f(l)
		if r, ok := l.(*residualLayer); ok {
			r.body.walk(f)
		}
	}
}

// wsBuilder collects shared scratch sizes while a Workspace is built, and
// counts the bytes it allocates. A dry builder allocates nothing (its
// buffers are nil) and only counts: Model.WorkspaceBytes.
type wsBuilder struct {
	allDIn  bool
	dry     bool
	bytes   int64 // allocated (or, dry, that would be)
	scratch int   // floats of ws.scratch
	// shared buffers by key: every layer that asks for a key gets the same
	// buffer, as large as the largest request (see shared).
	sharedBufs map[string]*sharedBuf
	depth      int // nesting of the stack being built (residual bodies)
}

type sharedBuf struct {
	n    int
	reqs []sharedReq
}

type sharedReq struct {
	dst *[]float32
	n   int
}

func (b *wsBuilder) needScratch(n int) { b.scratch = max(b.scratch, n) }

// floats returns a buffer of n float32s, counted; a dry build's is
// empty, but not nil (newState tells a buffer from none by nil).
func (b *wsBuilder) floats(n int) []float32 {
	b.bytes += 4 * int64(n)
	if b.dry {
		return []float32{}
	}
	return make([]float32, n)
}

// int32s returns a buffer of n int32s (empty in a dry build), counted.
func (b *wsBuilder) int32s(n int) []int32 {
	b.bytes += 4 * int64(n)
	if b.dry {
		return []int32{}
	}
	return make([]int32, n)
}

// shared sets *dst, once the Workspace is built, to a buffer of at least n
// floats that every request with the same key shares. Layers use it for
// buffers that live only during their own backward pass (gradients of
// their internals, a residual body's activation gradients), so that one
// buffer serves all layers of a kind instead of one each.
func (b *wsBuilder) shared(key string, dst *[]float32, n int) {
	if b.sharedBufs == nil {
		b.sharedBufs = map[string]*sharedBuf{}
	}
	sb := b.sharedBufs[key]
	if sb == nil {
		sb = &sharedBuf{}
		b.sharedBufs[key] = sb
	}
	sb.n = max(sb.n, n)
	sb.reqs = append(sb.reqs, sharedReq{dst, n})
}

// allocShared allocates the shared buffers and hands them out.
func (b *wsBuilder) allocShared() {
	for _, sb := range b.sharedBufs {
		buf := b.floats(sb.n)
		if b.dry {
			continue
		}
		for _, r := range sb.reqs {
			*r.dst = buf[:r.n]
		}
	}
}

// runCtx is what layers see of the Workspace during a call.
type runCtx struct {
	gemm *gemmScratch
	// scratch is shared by all layers for temporaries that do not outlive
	// one forward or backward call of one layer.
	scratch []float32
	// train: Gradient's forward pass (dropout is on), not Evaluate/Forward.
	train bool
	// seed is the dropout seed of the step in progress.
	seed uint64
	// first is the index in the step's batch of the call's first example
	// (SetFirstExample): dropout numbers the values from there.
	first int
}
