// Runs a Go program built for GOOS=js GOARCH=wasm under Node, as Go's
// wasm_exec_node.js does, with the browser worker's SIMD module
// instantiated on the program's memory first, as web/static/worker.js
// does: globalThis.crowdtrainSIMDBlock and crowdtrainSIMDSparse are its
// functions.
//
//	node run_simd_node.js GOROOT/lib/wasm simd.wasm prog.wasm [args...]
"use strict";

const [wasmExecDir, simdPath, progPath] = process.argv.slice(2, 5);
globalThis.require = require;
globalThis.fs = require("fs");
globalThis.path = require("path");
globalThis.TextEncoder = require("util").TextEncoder;
globalThis.TextDecoder = require("util").TextDecoder;
globalThis.performance ??= require("performance");
globalThis.crypto ??= require("crypto");
require(path.join(wasmExecDir, "wasm_exec.js"));

const go = new Go();
go.argv = [progPath, ...process.argv.slice(5)];
go.env = Object.assign({ TMPDIR: require("os").tmpdir() }, process.env);
go.exit = process.exit;
WebAssembly.instantiate(fs.readFileSync(progPath), go.importObject).then(async (result) => {
	const simd = await WebAssembly.instantiate(fs.readFileSync(simdPath), { env: { mem: result.instance.exports.mem } });
	globalThis.crowdtrainSIMDBlock = simd.instance.exports.block;
	globalThis.crowdtrainSIMDSparse = simd.instance.exports.sparse;
	process.on("exit", (code) => {
		if (code === 0 && !go.exited) {
			go._pendingEvent = { id: 0 };
			go._resume();
		}
	});
	return go.run(result.instance);
}).catch((err) => {
	console.error(err);
	process.exit(1);
});
