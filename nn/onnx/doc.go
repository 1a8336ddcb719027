// Package onnx writes an nn model with its parameters as an ONNX model
// (opset 17), for ONNX Runtime and the other runtimes that read ONNX:
// `crowdtrain export --format onnx`.
//
// The protobuf is written by hand with protowire (proto.go): only the
// messages an exported model uses, so no generated onnx.proto code. Each
// nn layer type becomes a few standard operators (export.go); parameters
// are float32 initializers named as in the model's layout, the names a
// safetensors export uses. The batch dimension is dynamic. A layer type
// without a translation is an error naming it, never a wrong model.
//
// ONNX Runtime checks the exported presets against nn's own forward pass
// (onnx_test.go).
package onnx
