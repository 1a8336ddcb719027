package onnx

import (
	"fmt"
	"io"
	"math"
	"sort"

	"github.com/crowdtrain/crowdtrain/nn"
)

// Opset is the version of ONNX's default operator set (ai.onnx) an exported
// model imports: 17 is the first with LayerNormalization. GELU, an
// operator only from opset 20, is written out with Erf.
const Opset = 17

// irVersion is the ONNX IR version that goes with Opset 17.
const irVersion = 8

// Names of the graph's input and output. The batch dimension of both is
// named BatchDim, so any batch size runs.
const (
	ImageInput = "input"  // float32 [batch, channels, height, width]
	TokenInput = "tokens" // int64 [batch, t]
	Output     = "logits" // float32 [batch, classes] or [batch, t, vocab]
	BatchDim   = "batch"
)

// Write writes m with params (len m.NumParams) as an ONNX model: one
// initializer per parameter tensor, named as in m.Layout (a tied
// output layer reads the embedding's), and metadata (may be nil) as the
// model's metadata_props, sorted by key. The graph's input is ImageInput
// for a model on images or feature vectors and TokenInput for one on token
// ids; its output, Output, is the logits Model.Forward computes. A layer
// type with no translation yet is an error that names it; nothing is
// written then.
func Write(w io.Writer, m *nn.Model, params []float32, metadata map[string]string) error {
	if len(params) != m.NumParams {
		return fmt.Errorf("onnx: %d parameters for a model of %d", len(params), m.NumParams)
	}
	if err := checkSize(m.NumParams); err != nil {
		return err
	}
	g, err := buildGraph(m.Spec.Input, m.Plan(), m.Layout, params)
	if err != nil {
		return fmt.Errorf("onnx: %w", err)
	}
	doc := &model{
		irVersion:    irVersion,
		opset:        Opset,
		producerName: "crowdtrain",
		docString:    "exported by crowdtrain: the network of a model spec with its parameters; the output is its logits",
		graph:        *g,
	}
	keys := make([]string, 0, len(metadata))
	for k := range metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		doc.metadata = append(doc.metadata, [2]string{k, metadata[k]})
	}
	_, err = w.Write(doc.marshal())
	return err
}

// maxInlineParams is the most parameters an exported model holds: a
// protobuf message, the whole model here, is limited to 2 GiB, and the
// initializers take 4 bytes a parameter (1 MiB is left for the graph).
const maxInlineParams = (1<<31 - 1<<20) / 4

// checkSize refuses a model whose parameters do not fit in one ONNX file.
func checkSize(numParams int) error {
	if numParams > maxInlineParams {
		return fmt.Errorf("onnx: %d parameters take %d MiB, past the 2 GiB a single ONNX file holds (ONNX's external data, which would lift it, is not written yet); export this model as safetensors", numParams, numParams*4>>20)
	}
	return nil
}

// builder turns a model's layer plan into graph nodes. Each layer reads
// the tensor named cur and leaves its output there.
type builder struct {
	g       *graph
	params  []float32
	layout  map[string]nn.ParamTensor
	next    int    // number of the next node
	prefix  string // the layer being translated, for node names
	embed   string // the first embedding's weight, which a tied dense layer reads
	cur     string
	curRank int // of cur, the batch dimension included
}

func buildGraph(input []int, plan []nn.LayerPlan, layout []nn.ParamTensor, params []float32) (*graph, error) {
	b := &builder{g: &graph{name: "crowdtrain", initializerOf: map[string]bool{}}, params: params, layout: map[string]nn.ParamTensor{}}
	for _, t := range layout {
		b.layout[t.Name] = t
	}
	in := valueInfo{name: ImageInput, elemType: elemFloat, dims: []dim{{param: BatchDim}}}
	if len(input) == 1 {
		in.name, in.elemType = TokenInput, elemInt64
	}
	for _, d := range input {
		in.dims = append(in.dims, dim{value: int64(d)})
	}
	b.g.inputs = []valueInfo{in}
	b.cur, b.curRank = in.name, len(in.dims)
	if err := b.stack(plan, ""); err != nil {
		return nil, err
	}
	last := plan[len(plan)-1]
	out := valueInfo{name: Output, elemType: elemFloat, dims: []dim{{param: BatchDim}}}
	for _, d := range last.OutShape {
		out.dims = append(out.dims, dim{value: int64(d)})
	}
	b.g.outputs = []valueInfo{out}
	b.g.nodes = append(b.g.nodes, node{name: Output, opType: "Identity", inputs: []string{b.cur}, outputs: []string{Output}})
	return b.g, nil
}

// stack translates a list of layers; path is the stack's place in the
// model ("" at the top, "3." in the body of residual layer 3).
func (b *builder) stack(plan []nn.LayerPlan, path string) error {
	for i, l := range plan {
		b.prefix = fmt.Sprintf("%s%d.%s", path, i, l.Type)
		if err := b.layer(l, fmt.Sprintf("%s%d.", path, i)); err != nil {
			return fmt.Errorf("layer %s%d (%s): %w", path, i, l.Type, err)
		}
	}
	return nil
}

func (b *builder) layer(l nn.LayerPlan, path string) error {
	switch l.Type {
	case nn.TypeDense:
		return b.dense(l)
	case nn.TypeReLU:
		b.cur = b.op("Relu", []string{b.cur})
	case nn.TypeConv2D:
		w, bias, err := b.weightAndBias(l)
		if err != nil {
			return err
		}
		k, s, p := int64(l.Kernel), int64(l.Stride), int64(l.Padding)
		b.cur = b.op("Conv", []string{b.cur, w, bias},
			intsAttr("kernel_shape", k, k), intsAttr("strides", s, s), intsAttr("pads", p, p, p, p))
	case nn.TypeMaxPool2D:
		k, s := int64(l.Kernel), int64(l.Stride)
		b.cur = b.op("MaxPool", []string{b.cur}, intsAttr("kernel_shape", k, k), intsAttr("strides", s, s))
	case nn.TypeFlatten:
		b.flatten()
	case nn.TypeDropout:
		// Off outside training, as in Model.Forward: the identity.
	case nn.TypeEmbedding:
		return b.embedding(l)
	case nn.TypeLayerNorm:
		w, bias, err := b.weightAndBias(l)
		if err != nil {
			return err
		}
		b.cur = b.op("LayerNormalization", []string{b.cur, w, bias}, intAttr("axis", -1), floatAttr("epsilon", float32(l.Eps)))
	case nn.TypeGELU:
		// x·Φ(x) = x · 0.5 · (1 + erf(x/√2)), as nn computes it.
		x := b.cur
		e := b.op("Erf", []string{b.op("Mul", []string{x, b.scalar("inv_sqrt2", 1/math.Sqrt2)})})
		half := b.op("Mul", []string{b.op("Add", []string{e, b.scalar("one", 1)}), b.scalar("half", 0.5)})
		b.cur = b.op("Mul", []string{x, half})
	case nn.TypeAttention:
		return b.attention(l)
	case nn.TypeResidual:
		x, prefix := b.cur, b.prefix
		if err := b.stack(l.Body, path); err != nil {
			return err
		}
		b.prefix = prefix
		b.cur = b.op("Add", []string{x, b.cur})
	default:
		return fmt.Errorf("no ONNX translation for %s layers yet; export this model as safetensors (--format safetensors)", l.Type)
	}
	return nil
}

// dense is Gemm (y = x·Wᵀ + b) on a flat vector; on a sequence, the same
// on every position: [batch·t, d] in, reshaped back to [batch, t, units].
func (b *builder) dense(l nn.LayerPlan) error {
	var w, bias string
	var err error
	if l.Tied {
		if b.embed == "" {
			return fmt.Errorf("tied to an embedding that has no initializer")
		}
		if len(l.Tensors) != 1 {
			return fmt.Errorf("a tied dense layer has %d tensors, want its bias only", len(l.Tensors))
		}
		w = b.embed
		bias, err = b.initializer(l.Tensors[0])
	} else {
		w, bias, err = b.weightAndBias(l)
	}
	if err != nil {
		return err
	}
	if l.InKind != "sequence" {
		if b.curRank != 2 {
			b.flatten()
		}
		b.cur = b.op("Gemm", []string{b.cur, w, bias}, intAttr("transB", 1))
		return nil
	}
	t, d := int64(l.InShape[0]), int64(l.InShape[1])
	rows := b.reshape(b.cur, -1, d)
	y := b.op("Gemm", []string{rows, w, bias}, intAttr("transB", 1))
	b.cur, b.curRank = b.reshape(y, -1, t, int64(l.Units)), 3
	return nil
}

// embedding gathers the tokens' rows of the table and adds the first t
// rows of the position table, if there is one.
func (b *builder) embedding(l nn.LayerPlan) error {
	if len(l.Tensors) == 0 {
		return fmt.Errorf("no weight tensor")
	}
	w, err := b.initializer(l.Tensors[0])
	if err != nil {
		return err
	}
	if b.embed == "" {
		b.embed = w
	}
	x := b.op("Gather", []string{w, b.cur}, intAttr("axis", 0))
	if l.PositionSize > 0 {
		if len(l.Tensors) != 2 {
			return fmt.Errorf("a position table but %d tensors", len(l.Tensors))
		}
		p, err := b.initializer(l.Tensors[1])
		if err != nil {
			return err
		}
		t := int64(l.InShape[0])
		rows := b.op("Slice", []string{p, b.ints("zero", 0), b.ints(fmt.Sprint(t), t), b.ints("zero", 0)})
		x = b.op("Add", []string{x, rows})
	}
	b.cur, b.curRank = x, 3
	return nil
}

// attention is nn's multi-head self-attention: q|k|v from in_proj for all
// positions at once, split into heads [batch, heads, t, dh]; softmax of the
// scaled scores (with the causal mask, -inf above the diagonal) times v;
// the heads side by side through out_proj.
func (b *builder) attention(l nn.LayerPlan) error {
	if len(l.Tensors) != 4 {
		return fmt.Errorf("%d tensors, want in_proj_weight, in_proj_bias, out_proj.weight and out_proj.bias", len(l.Tensors))
	}
	var names [4]string
	for i, pt := range l.Tensors {
		var err error
		if names[i], err = b.initializer(pt); err != nil {
			return err
		}
	}
	t, d, h := int64(l.InShape[0]), int64(l.InShape[1]), int64(l.Heads)
	dh := d / h
	qkv := b.op("Gemm", []string{b.reshape(b.cur, -1, d), names[0], names[1]}, intAttr("transB", 1))
	// [batch·t, 3d] → [batch, t, 3, heads, dh] → [3, batch, heads, t, dh]
	heads := b.op("Transpose", []string{b.reshape(qkv, -1, t, 3, h, dh)}, intsAttr("perm", 2, 0, 3, 1, 4))
	part := func(i int64) string {
		return b.op("Gather", []string{heads, b.scalarInt(i)}, intAttr("axis", 0))
	}
	q, k, v := part(0), part(1), part(2)
	kT := b.op("Transpose", []string{k}, intsAttr("perm", 0, 1, 3, 2))
	scores := b.op("Mul", []string{b.op("MatMul", []string{q, kT}), b.scalar(fmt.Sprintf("attention_scale_%d", dh), 1/math.Sqrt(float64(dh)))})
	if l.Causal {
		scores = b.op("Add", []string{scores, b.causalMask(t)})
	}
	probs := b.op("Softmax", []string{scores}, intAttr("axis", -1))
	ctx := b.op("MatMul", []string{probs, v})
	// [batch, heads, t, dh] → [batch, t, heads, dh] → [batch·t, d]
	ctx = b.reshape(b.op("Transpose", []string{ctx}, intsAttr("perm", 0, 2, 1, 3)), -1, d)
	out := b.op("Gemm", []string{ctx, names[2], names[3]}, intAttr("transB", 1))
	b.cur, b.curRank = b.reshape(out, -1, t, d), 3
	return nil
}

func (b *builder) flatten() {
	b.cur, b.curRank = b.op("Flatten", []string{b.cur}, intAttr("axis", 1)), 2
}

// weightAndBias adds a layer's first two tensors as initializers.
func (b *builder) weightAndBias(l nn.LayerPlan) (w, bias string, err error) {
	if len(l.Tensors) != 2 {
		return "", "", fmt.Errorf("%d tensors, want a weight and a bias", len(l.Tensors))
	}
	if w, err = b.initializer(l.Tensors[0]); err != nil {
		return "", "", err
	}
	bias, err = b.initializer(l.Tensors[1])
	return w, bias, err
}

// initializer adds a parameter tensor of the layout, by name and shape,
// and returns its name.
func (b *builder) initializer(pt nn.ParamTensor) (string, error) {
	lt, ok := b.layout[pt.Name]
	if !ok || lt.Offset != pt.Offset || lt.Size != pt.Size || pt.Offset+pt.Size > len(b.params) {
		return "", fmt.Errorf("tensor %s is not in the model's layout", pt.Name)
	}
	if !b.g.initializerOf[pt.Name] {
		dims := make([]int64, len(pt.Shape))
		for i, d := range pt.Shape {
			dims[i] = int64(d)
		}
		b.addInitializer(floatTensor(pt.Name, dims, b.params[pt.Offset:pt.Offset+pt.Size]))
	}
	return pt.Name, nil
}

func (b *builder) addInitializer(t tensor) {
	b.g.initializerOf[t.name] = true
	b.g.initializers = append(b.g.initializers, t)
}

// scalar is a float32 constant of rank 0.
func (b *builder) scalar(name string, v float64) string {
	name = "const." + name
	if !b.g.initializerOf[name] {
		b.addInitializer(floatTensor(name, nil, []float32{float32(v)}))
	}
	return name
}

// scalarInt is an int64 constant of rank 0 (a Gather index that drops the
// axis).
func (b *builder) scalarInt(v int64) string {
	name := fmt.Sprintf("const.index_%d", v)
	if !b.g.initializerOf[name] {
		b.addInitializer(int64Tensor(name, nil, []int64{v}))
	}
	return name
}

// ints is an int64 vector constant (a shape, Slice's starts and ends).
func (b *builder) ints(name string, v ...int64) string {
	name = "const." + name
	if !b.g.initializerOf[name] {
		b.addInitializer(int64Tensor(name, []int64{int64(len(v))}, v))
	}
	return name
}

func (b *builder) reshape(x string, shape ...int64) string {
	name := "shape"
	for _, d := range shape {
		name += fmt.Sprintf("_%d", d)
	}
	return b.op("Reshape", []string{x, b.ints(name, shape...)})
}

// causalMask is [t, t]: 0 where position p may see position q (q <= p),
// -inf above the diagonal, added to the scores before the softmax.
func (b *builder) causalMask(t int64) string {
	name := fmt.Sprintf("const.causal_mask_%d", t)
	if !b.g.initializerOf[name] {
		m := make([]float32, t*t)
		for p := range t {
			for q := p + 1; q < t; q++ {
				m[p*t+q] = float32(math.Inf(-1))
			}
		}
		b.addInitializer(floatTensor(name, []int64{t, t}, m))
	}
	return name
}

// op adds a node with one output and returns the output's name.
func (b *builder) op(opType string, inputs []string, attrs ...attribute) string {
	name := fmt.Sprintf("%s/%s_%d", b.prefix, opType, b.next)
	b.next++
	b.g.nodes = append(b.g.nodes, node{name: name, opType: opType, inputs: inputs, outputs: []string{name}, attrs: attrs})
	return name
}
