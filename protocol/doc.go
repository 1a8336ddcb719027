// Package protocol defines the messages that workers and the coordinator
// exchange over a websocket, their msgpack encoding, and the limits and
// validation every decoded message passes before anything acts on it.
//
// Every frame is a msgpack array [version, type, body]. Float vectors travel
// as msgpack bin holding little-endian float32s (type Floats), never as
// arrays of msgpack floats: a 235k-parameter update is one copy, not 235k
// tagged values. Decode checks the frame size before decoding, rejects an
// unknown version or type, and validates the body (counts, ranges, finite
// values); the coordinator then checks what only it can know (the job,
// the lease, the parameter count).
//
// Snapshots (model parameters at a version) are not websocket messages:
// they are immutable HTTP resources whose body is EncodeFloats output.
//
// protocol imports nn (for the model spec a welcome carries) and nothing
// else of ours; it builds for js/wasm, where the browser worker uses it.
package protocol
