package onnx

import (
	"encoding/binary"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// The subset of onnx.proto (ONNX's IR, proto2) that an exported model
// uses, encoded by hand with protowire. Field numbers are onnx.proto's;
// each message type below names the one it encodes. Repeated scalars are
// written unpacked, proto2's default, which every parser reads.

// Field numbers of onnx.proto.
const (
	// ModelProto
	modelIRVersion       = 1
	modelProducerName    = 2
	modelProducerVersion = 3
	modelDocString       = 6
	modelGraph           = 7
	modelOpsetImport     = 8
	modelMetadataProps   = 14
	// OperatorSetIdProto
	opsetDomain  = 1
	opsetVersion = 2
	// StringStringEntryProto
	entryKey   = 1
	entryValue = 2
	// GraphProto
	graphNode        = 1
	graphName        = 2
	graphInitializer = 5
	graphInput       = 11
	graphOutput      = 12
	// NodeProto
	nodeInput     = 1
	nodeOutput    = 2
	nodeName      = 3
	nodeOpType    = 4
	nodeAttribute = 5
	// AttributeProto
	attrName  = 1
	attrF     = 2
	attrI     = 3
	attrInts  = 8
	attrType  = 20
	attrTypeF = 1 // AttributeProto.FLOAT
	attrTypeI = 2 // AttributeProto.INT
	attrTypeN = 7 // AttributeProto.INTS
	// TensorProto
	tensorDims     = 1
	tensorDataType = 2
	tensorName     = 8
	tensorRawData  = 9
	// ValueInfoProto, TypeProto, TypeProto.Tensor, TensorShapeProto and
	// its Dimension
	valueName            = 1
	valueType            = 2
	typeTensor           = 1
	tensorElemType       = 1
	tensorShape          = 2
	shapeDim             = 1
	dimValue             = 1
	dimParam             = 2
	elemFloat      int32 = 1 // TensorProto.FLOAT
	elemInt64      int32 = 7 // TensorProto.INT64
)

// model is a ModelProto.
type model struct {
	irVersion       int64
	opset           int64 // of the default domain, ai.onnx
	producerName    string
	producerVersion string
	docString       string
	metadata        [][2]string // metadata_props, key and value
	graph           graph
}

// graph is a GraphProto.
type graph struct {
	name          string
	nodes         []node
	initializers  []tensor
	inputs        []valueInfo
	outputs       []valueInfo
	initializerOf map[string]bool // names already in initializers
}

// node is a NodeProto.
type node struct {
	name, opType    string
	inputs, outputs []string
	attrs           []attribute
}

// attribute is an AttributeProto of type FLOAT, INT or INTS.
type attribute struct {
	name string
	typ  int32
	f    float32
	i    int64
	ints []int64
}

func intAttr(name string, v int64) attribute { return attribute{name: name, typ: attrTypeI, i: v} }
func floatAttr(name string, v float32) attribute {
	return attribute{name: name, typ: attrTypeF, f: v}
}
func intsAttr(name string, v ...int64) attribute {
	return attribute{name: name, typ: attrTypeN, ints: v}
}

// tensor is a TensorProto with its data in raw_data (little-endian).
type tensor struct {
	name     string
	dims     []int64 // none: a scalar
	dataType int32
	raw      []byte
}

func floatTensor(name string, dims []int64, v []float32) tensor {
	raw := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(x))
	}
	return tensor{name: name, dims: dims, dataType: elemFloat, raw: raw}
}

func int64Tensor(name string, dims []int64, v []int64) tensor {
	raw := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(raw[8*i:], uint64(x))
	}
	return tensor{name: name, dims: dims, dataType: elemInt64, raw: raw}
}

// valueInfo is a ValueInfoProto of a tensor type: a graph's input or
// output.
type valueInfo struct {
	name     string
	elemType int32
	dims     []dim
}

// dim is a TensorShapeProto.Dimension: a fixed size, or a named one (param)
// that the caller chooses, such as the batch.
type dim struct {
	value int64
	param string
}

func appendString(b []byte, field protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, field, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendBytes(b []byte, field protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, field, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func appendVarint(b []byte, field protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, field, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func (m *model) marshal() []byte {
	var b []byte
	b = appendVarint(b, modelIRVersion, uint64(m.irVersion))
	b = appendString(b, modelProducerName, m.producerName)
	if m.producerVersion != "" {
		b = appendString(b, modelProducerVersion, m.producerVersion)
	}
	if m.docString != "" {
		b = appendString(b, modelDocString, m.docString)
	}
	b = appendBytes(b, modelGraph, m.graph.marshal())
	var op []byte
	op = appendString(op, opsetDomain, "")
	op = appendVarint(op, opsetVersion, uint64(m.opset))
	b = appendBytes(b, modelOpsetImport, op)
	for _, kv := range m.metadata {
		var e []byte
		e = appendString(e, entryKey, kv[0])
		e = appendString(e, entryValue, kv[1])
		b = appendBytes(b, modelMetadataProps, e)
	}
	return b
}

func (g *graph) marshal() []byte {
	var b []byte
	for i := range g.nodes {
		b = appendBytes(b, graphNode, g.nodes[i].marshal())
	}
	b = appendString(b, graphName, g.name)
	for i := range g.initializers {
		b = appendBytes(b, graphInitializer, g.initializers[i].marshal())
	}
	for i := range g.inputs {
		b = appendBytes(b, graphInput, g.inputs[i].marshal())
	}
	for i := range g.outputs {
		b = appendBytes(b, graphOutput, g.outputs[i].marshal())
	}
	return b
}

func (n *node) marshal() []byte {
	var b []byte
	for _, s := range n.inputs {
		b = appendString(b, nodeInput, s)
	}
	for _, s := range n.outputs {
		b = appendString(b, nodeOutput, s)
	}
	b = appendString(b, nodeName, n.name)
	b = appendString(b, nodeOpType, n.opType)
	for i := range n.attrs {
		b = appendBytes(b, nodeAttribute, n.attrs[i].marshal())
	}
	return b
}

func (a *attribute) marshal() []byte {
	var b []byte
	b = appendString(b, attrName, a.name)
	switch a.typ {
	case attrTypeF:
		b = protowire.AppendTag(b, attrF, protowire.Fixed32Type)
		b = protowire.AppendFixed32(b, math.Float32bits(a.f))
	case attrTypeI:
		b = appendVarint(b, attrI, uint64(a.i))
	case attrTypeN:
		for _, v := range a.ints {
			b = appendVarint(b, attrInts, uint64(v))
		}
	}
	return appendVarint(b, attrType, uint64(a.typ))
}

func (t *tensor) marshal() []byte {
	b := make([]byte, 0, len(t.raw)+64+len(t.name))
	for _, d := range t.dims {
		b = appendVarint(b, tensorDims, uint64(d))
	}
	b = appendVarint(b, tensorDataType, uint64(t.dataType))
	b = appendString(b, tensorName, t.name)
	return appendBytes(b, tensorRawData, t.raw)
}

func (v *valueInfo) marshal() []byte {
	var shape []byte
	for _, d := range v.dims {
		var db []byte
		if d.param != "" {
			db = appendString(db, dimParam, d.param)
		} else {
			db = appendVarint(db, dimValue, uint64(d.value))
		}
		shape = appendBytes(shape, shapeDim, db)
	}
	var tt []byte
	tt = appendVarint(tt, tensorElemType, uint64(v.elemType))
	tt = appendBytes(tt, tensorShape, shape)
	var typ []byte
	typ = appendBytes(typ, typeTensor, tt)
	var b []byte
	b = appendString(b, valueName, v.name)
	return appendBytes(b, valueType, typ)
}
