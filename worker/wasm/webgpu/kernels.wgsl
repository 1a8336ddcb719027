// Compute kernels of the browser worker's WebGPU backend: a port of
// worker/cuda/kernels.cu (read that file for each kernel's maths and
// layouts; the comments here note only what differs). Layouts are those of
// package nn: activations row-major per example, spatial tensors CHW.
//
// Every kernel shares one pipeline layout: binding 0 is the arena, all of
// the device's memory as one array of f32, and binding 1 holds up to 32
// scalar arguments, in the order of the CUDA kernel's parameters. A
// "pointer" argument is the u32 index of a float in the arena (0xFFFFFFFF
// for none, where CUDA allows NULL); integer buffers (labels, argmax, row
// hits) live in the arena as i32 bit patterns. An unsigned long long takes
// two arguments, low word first.
//
// Dispatch:
//   - elementwise kernels (CUDA's GRID_STRIDE): workgroup_size(256),
//     min(ceil(total/256), 65535) workgroups, a grid-stride loop;
//   - row kernels (BLOCK_ROWS with block_sum/block_max/block_argmax):
//     workgroup_size(128), min(rows, 65535) workgroups, a workgroup per row
//     (several when there are more rows than workgroups);
//   - column_sums: workgroup_size(256), a workgroup per column;
//   - grad_sumsq_partial: workgroup_size(256), exactly 256 workgroups;
//     clip_scale: one workgroup of 256;
//   - gemm: workgroup_size(16, 16), (ceil(N/64), ceil(M/64), batches).
//
// Reductions run in the fixed order of the CUDA kernels (a strided partial
// per thread, then a halving tree), so a result does not depend on
// scheduling. Barriers stay in uniform control flow: row loops depend only
// on workgroup_id, num_workgroups and the uniform arguments.

@group(0) @binding(0) var<storage, read_write> m: array<f32>;
@group(0) @binding(1) var<uniform> a: array<vec4<u32>, 8>;

fn arg_u(i: u32) -> u32 { return a[i / 4u][i % 4u]; }
fn arg_i(i: u32) -> i32 { return bitcast<i32>(arg_u(i)); }
fn arg_f(i: u32) -> f32 { return bitcast<f32>(arg_u(i)); }

fn ld_i(p: u32) -> i32 { return bitcast<i32>(m[p]); }
fn st_i(p: u32, v: i32) { m[p] = bitcast<f32>(v); }

const NONE: u32 = 0xFFFFFFFFu;
const FLT_LOWEST: f32 = -3.402823466e+38f;

// Workgroup scratch of the reductions: row kernels use the first 128
// entries, the 256-thread ones all of them.
var<workgroup> sh: array<f32, 256>;
var<workgroup> shi: array<i32, 256>;

// block_sum of kernels.cu for a workgroup of 128: the sum of v over the
// workgroup in a fixed tree order, returned to every invocation. Every
// invocation must call it, in uniform control flow.
fn block_sum(v: f32, tid: u32) -> f32 {
	sh[tid] = v;
	workgroupBarrier();
	for (var k = 64u; k > 0u; k = k / 2u) {
		if (tid < k) { sh[tid] = sh[tid] + sh[tid + k]; }
		workgroupBarrier();
	}
	let r = sh[0];
	workgroupBarrier(); // sh is free again when the caller reuses it
	return r;
}

// block_max of kernels.cu, as block_sum.
fn block_max(v: f32, tid: u32) -> f32 {
	sh[tid] = v;
	workgroupBarrier();
	for (var k = 64u; k > 0u; k = k / 2u) {
		if (tid < k) { sh[tid] = max(sh[tid], sh[tid + k]); }
		workgroupBarrier();
	}
	let r = sh[0];
	workgroupBarrier();
	return r;
}

struct ArgMax {
	v: f32,
	i: i32,
}

// block_argmax of kernels.cu: the larger value wins, a tie goes to the
// smaller index.
fn block_argmax(v: f32, i: i32, tid: u32) -> ArgMax {
	sh[tid] = v;
	shi[tid] = i;
	workgroupBarrier();
	for (var k = 64u; k > 0u; k = k / 2u) {
		if (tid < k) {
			let va = sh[tid];
			let vb = sh[tid + k];
			let ia = shi[tid];
			let ib = shi[tid + k];
			if (vb > va || (vb == va && ib < ia)) {
				sh[tid] = vb;
				shi[tid] = ib;
			}
		}
		workgroupBarrier();
	}
	let r = ArgMax(sh[0], shi[0]);
	workgroupBarrier();
	return r;
}

// The sum of v over a workgroup of 256, left in sh[0] (read it after this
// returns; the trailing barrier of the tree has run).
fn tree_sum256(v: f32, tid: u32) {
	sh[tid] = v;
	workgroupBarrier();
	for (var k = 128u; k > 0u; k = k / 2u) {
		if (tid < k) { sh[tid] = sh[tid] + sh[tid + k]; }
		workgroupBarrier();
	}
}

// ---- dense, conv and pooling layers ----

// add_bias(out, b, rows, cols)
@compute @workgroup_size(256)
fn add_bias(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
		@builtin(num_workgroups) nwg: vec3<u32>) {
	let outp = arg_u(0u);
	let b = arg_u(1u);
	let cols = u32(arg_i(3u));
	let total = u32(arg_i(2u)) * cols;
	for (var i = wid.x * 256u + lid.x; i < total; i += nwg.x * 256u) {
		m[outp + i] = m[outp + i] + m[b + i % cols];
	}
}

// relu_forward(in, out, n)
@compute @workgroup_size(256)
fn relu_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
		@builtin(num_workgroups) nwg: vec3<u32>) {
	let inp = arg_u(0u);
	let outp = arg_u(1u);
	let total = u32(arg_i(2u));
	for (var i = wid.x * 256u + lid.x; i < total; i += nwg.x * 256u) {
		let x = m[inp + i];
		m[outp + i] = select(0.0f, x, x > 0.0f);
	}
}

// relu_backward(out, dout, din, n): dIn = dOut where the relu's output is > 0.
@compute @workgroup_size(256)
fn relu_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
		@builtin(num_workgroups) nwg: vec3<u32>) {
	let outp = arg_u(0u);
	let dout = arg_u(1u);
	let din = arg_u(2u);
	let total = u32(arg_i(3u));
	for (var i = wid.x * 256u + lid.x; i < total; i += nwg.x * 256u) {
		m[din + i] = select(0.0f, m[dout + i], m[outp + i] > 0.0f);
	}
}

// im2row(in, rows, n, C, H, W, K, S, pad, OH, OW)
@compute @workgroup_size(256)
fn im2row(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
		@builtin(num_workgroups) nwg: vec3<u32>) {
	let inp = arg_u(0u);
	let rowsp = arg_u(1u);
	let n = arg_i(2u);
	let C = arg_i(3u);
	let H = arg_i(4u);
	let W = arg_i(5u);
	let K = arg_i(6u);
	let S = arg_i(7u);
	let pad = arg_i(8u);
	let OH = arg_i(9u);
	let OW = arg_i(10u);
	let R = C * K * K;
	let P = OH * OW;
	let total = u32(n) * u32(P) * u32(R);
	for (var i = wid.x * 256u + lid.x; i < total; i += nwg.x * 256u) {
		let r = i32(i % u32(R));
		let ep = i / u32(R);
		let p = i32(ep % u32(P));
		let e = i32(ep / u32(P));
		let c = r / (K * K);
		let kh = (r / K) % K;
		let kw = r % K;
		let iy = (p / OW) * S - pad + kh;
		let ix = (p % OW) * S - pad + kw;
		var v = 0.0f;
		if (iy >= 0 && iy < H && ix >= 0 && ix < W) {
			v = m[inp + u32((e * C + c) * H * W + iy * W + ix)];
		}
		m[rowsp + i] = v;
	}
}

// row2im(drows, din, n, C, H, W, K, S, pad, OH, OW): the adjoint of im2row,
// a gather (no atomics).
@compute @workgroup_size(256)
fn row2im(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
		@builtin(num_workgroups) nwg: vec3<u32>) {
	let drows = arg_u(0u);
	let din = arg_u(1u);
	let n = arg_i(2u);
	let C = arg_i(3u);
	let H = arg_i(4u);
	let W = arg_i(5u);
	let K = arg_i(6u);
	let S = arg_i(7u);
	let pad = arg_i(8u);
	let OH = arg_i(9u);
	let OW = arg_i(10u);
	let R = C * K * K;
	let P = OH * OW;
	let total = u32(n) * u32(C) * u32(H) * u32(W);
	for (var i = wid.x * 256u + lid.x; i < total; i += nwg.x * 256u) {
		let x = i32(i % u32(W));
		let y = i32((i / u32(W)) % u32(H));
		let c = i32((i / (u32(W) * u32(H))) % u32(C));
		let e = i32(i / (u32(W) * u32(H) * u32(C)));
		var s = 0.0f;
		for (var kh = 0; kh < K; kh++) {
			let ty = y + pad - kh;
			if (ty < 0 || ty % S != 0 || ty / S >= OH) { continue; }
			let oy = ty / S;
			for (var kw = 0; kw < K; kw++) {
				let tx = x + pad - kw;
				if (tx < 0 || tx % S != 0 || tx / S >= OW) { continue; }
				let ox = tx / S;
				s += m[drows + u32((e * P + oy * OW + ox) * R + (c * K + kh) * K + kw)];
			}
		}
		m[din + i] = s;
	}
}

// conv_output(outT, b, out, n, F, P)
@compute @workgroup_size(256)
fn conv_output(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
		@builtin(num_workgroups) nwg: vec3<u32>) {
	let outT = arg_u(0u);
	let b = arg_u(1u);
	let outp = arg_u(2u);
	let n = u32(arg_i(3u));
	let F = u32(arg_i(4u));
	let P = u32(arg_i(5u));
	let total = n * F * P;
	for (var i = wid.x * 256u + lid.x; i < total; i += nwg.x * 256u) {
		let p = i % P;
		let f = (i / P) % F;
		let e = i / (P * F);
		m[outp + i] = m[outT + (e * P + p) * F + f] + m[b + f];
	}
}

// conv_grad_rows(dout, doutT, n, F, P)
@compute @workgroup_size(256)
fn conv_grad_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
		@builtin(num_workgroups) nwg: vec3<u32>) {
	let dout = arg_u(0u);
	let doutT = arg_u(1u);
	let n = u32(arg_i(2u));
	let F = u32(arg_i(3u));
	let P = u32(arg_i(4u));
	let total = n * F * P;
	for (var i = wid.x * 256u + lid.x; i < total; i += nwg.x * 256u) {
		let p = i % P;
		let f = (i / P) % F;
		let e = i / (P * F);
		m[doutT + (e * P + p) * F + f] = m[dout + i];
	}
}

// column_sums(mat, out, rows, cols): one workgroup of 256 per column.
@compute @workgroup_size(256)
fn column_sums(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
		@builtin(num_workgroups) nwg: vec3<u32>) {
	let mat = arg_u(0u);
	let outp = arg_u(1u);
	let rows = u32(arg_i(2u));
	let cols = u32(arg_i(3u));
	let tid = lid.x;
	for (var c = wid.x; c < cols; c += nwg.x) {
		var s = 0.0f;
		for (var r = tid; r < rows; r += 256u) { s += m[mat + r * cols + c]; }
		tree_sum256(s, tid);
		if (tid == 0u) { m[outp + c] = sh[0]; }
		workgroupBarrier(); // sh is free again for the next column
	}
}

// maxpool_forward(in, out, argmax, n, C, H, W, K, S, OH, OW): argmax is the
// winner's index within its example, the first maximum in row-major window
// order.
@compute @workgroup_size(256)
fn maxpool_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
		@builtin(num_workgroups) nwg: vec3<u32>) {
	let inp = arg_u(0u);
	let outp = arg_u(1u);
	let argmax = arg_u(2u);
	let n = arg_i(3u);
	let C = arg_i(4u);
	let H = arg_i(5u);
	let W = arg_i(6u);
	let K = arg_i(7u);
	let S = arg_i(8u);
	let OH = arg_i(9u);
	let OW = arg_i(10u);
	let total = u32(n) * u32(C) * u32(OH) * u32(OW);
	for (var i = wid.x * 256u + lid.x; i < total; i += nwg.x * 256u) {
		let ox = i32(i % u32(OW));
		let oy = i32((i / u32(OW)) % u32(OH));
		let c = i32((i / (u32(OW) * u32(OH))) % u32(C));
		let e = i / (u32(OW) * u32(OH) * u32(C));
		let inE = inp + e * u32(C * H * W);
		let start = c * H * W + oy * S * W + ox * S;
		var best = m[inE + u32(start)];
		var bi = start;
		for (var ky = 0; ky < K; ky++) {
			for (var kx = 0; kx < K; kx++) {
				let j = start + ky * W + kx;
				let v = m[inE + u32(j)];
				if (v > best) {
					best = v;
					bi = j;
				}
			}
		}
		m[outp + i] = best;
		st_i(argmax + i, bi);
	}
}

// maxpool_backward(dout, argmax, din, n, C, H, W, K, S, OH, OW): each input
// gathers the gradients of the windows it won.
@compute @workgroup_size(256)
fn maxpool_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
		@builtin(num_workgroups) nwg: vec3<u32>) {
	let dout = arg_u(0u);
	let argmax = arg_u(1u);
	let din = arg_u(2u);
	let n = arg_i(3u);
	let C = arg_i(4u);
	let H = arg_i(5u);
	let W = arg_i(6u);
	let K = arg_i(7u);
	let S = arg_i(8u);
	let OH = arg_i(9u);
	let OW = arg_i(10u);
	let total = u32(n) * u32(C) * u32(H) * u32(W);
	for (var i = wid.x * 256u + lid.x; i < total; i += nwg.x * 256u) {
		let x = i32(i % u32(W));
		let y = i32((i / u32(W)) % u32(H));
		let c = i32((i / (u32(W) * u32(H))) % u32(C));
		let e = i32(i / (u32(W) * u32(H) * u32(C)));
		let idx = c * H * W + y * W + x;
		var s = 0.0f;
		let oy0 = select(0, (y - K) / S + 1, y >= K);
		let ox0 = select(0, (x - K) / S + 1, x >= K);
		for (var oy = oy0; oy <= y / S && oy < OH; oy++) {
			for (var ox = ox0; ox <= x / S && ox < OW; ox++) {
				let o = u32(((e * C + c) * OH + oy) * OW + ox);
				if (ld_i(argmax + o) == idx) { s += m[dout + o]; }
			}
		}
		m[din + i] = s;
	}
}

// softmax_xent(logits, labels, dlogits, rows, classes, scale, row_loss,
// row_hit): a workgroup per row; row_hit is written as i32 0 or 1.
@compute @workgroup_size(128)
fn softmax_xent(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
		@builtin(num_workgroups) nwg: vec3<u32>) {
	let logits = arg_u(0u);
	let labels = arg_u(1u);
	let dlogits = arg_u(2u);
	let rows = u32(arg_i(3u));
	let classes = arg_i(4u);
	let scale = arg_f(5u);
	let row_loss = arg_u(6u);
	let row_hit = arg_u(7u);
	let tid = lid.x;
	for (var r = wid.x; r < rows; r += nwg.x) {
		let z = logits + r * u32(classes);
		let d = dlogits + r * u32(classes);
		let lab = ld_i(labels + r);
		var mx = FLT_LOWEST;
		var arg = classes;
		for (var j = i32(tid); j < classes; j += 128) {
			let v = m[z + u32(j)];
			if (v > mx || arg == classes) {
				mx = v;
				arg = j;
			}
		}
		let am = block_argmax(mx, arg, tid);
		mx = am.v;
		arg = am.i;
		var s = 0.0f;
		for (var j = i32(tid); j < classes; j += 128) {
			let e = exp(m[z + u32(j)] - mx);
			m[d + u32(j)] = e;
			s += e;
		}
		s = block_sum(s, tid);
		let inv = scale / s;
		for (var j = i32(tid); j < classes; j += 128) {
			m[d + u32(j)] = m[d + u32(j)] * inv - select(0.0f, scale, j == lab);
		}
		if (tid == 0u) {
			m[row_loss + r] = mx + log(s) - m[z + u32(lab)];
			st_i(row_hit + r, select(0, 1, arg == lab));
		}
	}
}

// ---- optimiser steps ----

// sgd_step(w, g, lr, n): w -= lr * g.
@compute @workgroup_size(256)
fn sgd_step(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
		@builtin(num_workgroups) nwg: vec3<u32>) {
	let w = arg_u(0u);
	let g = arg_u(1u);
	let lr = arg_f(2u);
	let total = u32(arg_i(3u));
	for (var i = wid.x * 256u + lid.x; i < total; i += nwg.x * 256u) {
		m[w + i] = m[w + i] - lr * m[g + i];
	}
}

// pseudo_gradient(base, w, out, inv_lr, n): out = (base - w) * inv_lr.
@compute @workgroup_size(256)
fn pseudo_gradient(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
		@builtin(num_workgroups) nwg: vec3<u32>) {
	let base = arg_u(0u);
	let w = arg_u(1u);
	let outp = arg_u(2u);
	let inv_lr = arg_f(3u);
	let total = u32(arg_i(4u));
	for (var i = wid.x * 256u + lid.x; i < total; i += nwg.x * 256u) {
		m[outp + i] = (m[base + i] - m[w + i]) * inv_lr;
	}
}

// grad_sumsq_partial(g, n, partial): exactly 256 workgroups of 256, each
// writing its partial sum of squares to partial[workgroup]. WGSL has no
// f64: the sums are f32.
@compute @workgroup_size(256)
fn grad_sumsq_partial(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
		@builtin(num_workgroups) nwg: vec3<u32>) {
	let g = arg_u(0u);
	let total = u32(arg_i(1u));
	let partial = arg_u(2u);
	let tid = lid.x;
	var s = 0.0f;
	for (var i = wid.x * 256u + tid; i < total; i += nwg.x * 256u) {
		let v = m[g + i];
		s += v * v;
	}
	tree_sum256(s, tid);
	if (tid == 0u) { m[partial + wid.x] = sh[0]; }
}

// clip_scale(partial, parts, c, scale): one workgroup of 256; scale[0] =
// min(1, c/(sqrt(sum)+1e-6)), in f32.
@compute @workgroup_size(256)
fn clip_scale(@builtin(local_invocation_id) lid: vec3<u32>) {
	let partial = arg_u(0u);
	let parts = u32(arg_i(1u));
	let c = arg_f(2u);
	let scale = arg_u(3u);
	let tid = lid.x;
	var s = 0.0f;
	for (var i = tid; i < parts; i += 256u) { s += m[partial + i]; }
	tree_sum256(s, tid);
	if (tid == 0u) {
		let coef = c / (sqrt(sh[0]) + 1e-6f);
		m[scale] = select(coef, 1.0f, coef >= 1.0f);
	}
}

// scale_by(g, scale, n): g *= scale[0], nothing when that is 1.
@compute @workgroup_size(256)
fn scale_by(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
		@builtin(num_workgroups) nwg: vec3<u32>) {
	let g = arg_u(0u);
	let s = m[arg_u(1u)];
	let total = u32(arg_i(2u));
	if (s == 1.0f) { return; }
	for (var i = wid.x * 256u + lid.x; i < total; i += nwg.x * 256u) {
		m[g + i] = m[g + i] * s;
	}
}

// adamw_step(w, g, m, v, lr, wd, b1, b2, eps, c1, c2, n), in the order of
// nn.AdamWUpdate.
@compute @workgroup_size(256)
fn adamw_step(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
		@builtin(num_workgroups) nwg: vec3<u32>) {
	let w = arg_u(0u);
	let g = arg_u(1u);
	let mom = arg_u(2u);
	let vel = arg_u(3u);
	let lr = arg_f(4u);
	let wd = arg_f(5u);
	let b1 = arg_f(6u);
	let b2 = arg_f(7u);
	let eps = arg_f(8u);
	let c1 = arg_f(9u);
	let c2 = arg_f(10u);
	let total = u32(arg_i(11u));
	for (var i = wid.x * 256u + lid.x; i < total; i += nwg.x * 256u) {
		let w0 = m[w + i];
		let wi = w0 - lr * wd * w0;
		let gi = m[g + i];
		let mi = b1 * m[mom + i] + (1.0f - b1) * gi;
		let vi = b2 * m[vel + i] + (1.0f - b2) * gi * gi;
		m[mom + i] = mi;
		m[vel + i] = vi;
		m[w + i] = wi - lr * (mi * c1) / (sqrt(vi) * c2 + eps);
	}
}

// ---- sequence layers: activations are rows of d values, one row per
// position, t rows per example ----

// embedding_forward(x, weight, position, out, rows, t, d, vocab); position
// is NONE (0xFFFFFFFF) when the layer has no position table.
@compute @workgroup_size(256)
fn embedding_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
		@builtin(num_workgroups) nwg: vec3<u32>) {
	let x = arg_u(0u);
	let weight = arg_u(1u);
	let position = arg_u(2u);
	let outp = arg_u(3u);
	let rows = u32(arg_i(4u));
	let t = u32(arg_i(5u));
	let d = u32(arg_i(6u));
	let vocab = arg_i(7u);
	let total = rows * d;
	for (var i = wid.x * 256u + lid.x; i < total; i += nwg.x * 256u) {
		let r = i / d;
		let j = i % d;
		let tok = i32(m[x + r]);
		var v = 0.0f;
		if (tok >= 0 && tok < vocab) { v = m[weight + u32(tok) * d + j]; }
		if (position != NONE) { v += m[position + (r % t) * d + j]; }
		m[outp + i] = v;
	}
}

// embedding_backward_gather(x, dout, dweight, rows, d, vocab): dweight[v*d
// + j] += the sum, in row order, of dout[r*d + j] over the rows of token v.
@compute @workgroup_size(256)
fn embedding_backward_gather(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
		@builtin(num_workgroups) nwg: vec3<u32>) {
	let x = arg_u(0u);
	let dout = arg_u(1u);
	let dweight = arg_u(2u);
	let rows = u32(arg_i(3u));
	let d = u32(arg_i(4u));
	let vocab = u32(arg_i(5u));
	let total = vocab * d;
	for (var i = wid.x * 256u + lid.x; i < total; i += nwg.x * 256u) {
		let v = i32(i / d);
		let j = i % d;
		var s = 0.0f;
		for (var r = 0u; r < rows; r++) {
			if (i32(m[x + r]) == v) { s += m[dout + r * d + j]; }
		}
		m[dweight + i] = m[dweight + i] + s;
	}
}

// embedding_backward_scatter(x, dout, dweight, rows, d, vocab): CUDA's
// adds with float atomics, which WGSL lacks. Here one invocation per
// column j walks the rows in order and adds dout[r*d + j] into
// dweight[tok*d + j] for the tokens in 0..vocab-1: deterministic, no
// atomics. It is launched, as in CUDA, over rows*d elements; invocations
// past the d columns have nothing to do.
@compute @workgroup_size(256)
fn embedding_backward_scatter(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
		@builtin(num_workgroups) nwg: vec3<u32>) {
	let x = arg_u(0u);
	let dout = arg_u(1u);
	let dweight = arg_u(2u);
	let rows = u32(arg_i(3u));
	let d = u32(arg_i(4u));
	let vocab = arg_i(5u);
	for (var j = wid.x * 256u + lid.x; j < d; j += nwg.x * 256u) {
		for (var r = 0u; r < rows; r++) {
			let tok = i32(m[x + r]);
			if (tok >= 0 && tok < vocab) {
				let o = dweight + u32(tok) * d + j;
				m[o] = m[o] + m[dout + r * d + j];
			}
		}
	}
}

// embedding_backward_positions(dout, dposition, n, t, positions, d)
@compute @workgroup_size(256)
fn embedding_backward_positions(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
		@builtin(num_workgroups) nwg: vec3<u32>) {
	let dout = arg_u(0u);
	let dposition = arg_u(1u);
	let n = u32(arg_i(2u));
	let t = u32(arg_i(3u));
	let positions = u32(arg_i(4u));
	let d = u32(arg_i(5u));
	let total = positions * d;
	for (var i = wid.x * 256u + lid.x; i < total; i += nwg.x * 256u) {
		let p = i / d;
		let j = i % d;
		var s = 0.0f;
		if (p < t) {
			for (var e = 0u; e < n; e++) { s += m[dout + (e * t + p) * d + j]; }
		}
		m[dposition + i] = s;
	}
}

// layernorm_forward(in, w, b, out, mean, rstd, rows, d, eps)
@compute @workgroup_size(128)
fn layernorm_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
		@builtin(num_workgroups) nwg: vec3<u32>) {
	let inp = arg_u(0u);
	let w = arg_u(1u);
	let b = arg_u(2u);
	let outp = arg_u(3u);
	let mean = arg_u(4u);
	let rstd = arg_u(5u);
	let rows = u32(arg_i(6u));
	let d = u32(arg_i(7u));
	let eps = arg_f(8u);
	let tid = lid.x;
	let df = f32(arg_i(7u));
	for (var r = wid.x; r < rows; r += nwg.x) {
		let x = inp + r * d;
		let y = outp + r * d;
		var s = 0.0f;
		for (var j = tid; j < d; j += 128u) { s += m[x + j]; }
		let mu = block_sum(s, tid) / df;
		var q = 0.0f;
		for (var j = tid; j < d; j += 128u) {
			let c = m[x + j] - mu;
			q += c * c;
		}
		let rs = 1.0f / sqrt(block_sum(q, tid) / df + eps);
		for (var j = tid; j < d; j += 128u) {
			m[y + j] = (m[x + j] - mu) * rs * m[w + j] + m[b + j];
		}
		if (tid == 0u) {
			m[mean + r] = mu;
			m[rstd + r] = rs;
		}
	}
}

// layernorm_backward(in, dout, w, mean, rstd, din, rows, d): din =
// rstd*(g - mean(g) - xh*mean(g*xh)) per row, g = dout*w.
@compute @workgroup_size(128)
fn layernorm_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
		@builtin(num_workgroups) nwg: vec3<u32>) {
	let inp = arg_u(0u);
	let dout = arg_u(1u);
	let w = arg_u(2u);
	let mean = arg_u(3u);
	let rstd = arg_u(4u);
	let din = arg_u(5u);
	let rows = u32(arg_i(6u));
	let d = u32(arg_i(7u));
	let tid = lid.x;
	let df = f32(arg_i(7u));
	for (var r = wid.x; r < rows; r += nwg.x) {
		let x = inp + r * d;
		let dy = dout + r * d;
		let dx = din + r * d;
		let mu = m[mean + r];
		let rs = m[rstd + r];
		var s1 = 0.0f;
		var s2 = 0.0f;
		for (var j = tid; j < d; j += 128u) {
			let g = m[dy + j] * m[w + j];
			s1 += g;
			s2 += g * (m[x + j] - mu) * rs;
		}
		let m1 = block_sum(s1, tid) / df;
		let m2 = block_sum(s2, tid) / df;
		for (var j = tid; j < d; j += 128u) {
			m[dx + j] = rs * (m[dy + j] * m[w + j] - m1 - (m[x + j] - mu) * rs * m2);
		}
	}
}

// layernorm_param_grads(in, dout, mean, rstd, dw, db, rows, d): a workgroup
// per column j.
@compute @workgroup_size(128)
fn layernorm_param_grads(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
		@builtin(num_workgroups) nwg: vec3<u32>) {
	let inp = arg_u(0u);
	let dout = arg_u(1u);
	let mean = arg_u(2u);
	let rstd = arg_u(3u);
	let dw = arg_u(4u);
	let db = arg_u(5u);
	let rows = u32(arg_i(6u));
	let d = u32(arg_i(7u));
	let tid = lid.x;
	for (var j = wid.x; j < d; j += nwg.x) {
		var sw = 0.0f;
		var sb = 0.0f;
		for (var r = tid; r < rows; r += 128u) {
			let o = r * d + j;
			let g = m[dout + o];
			sw += g * (m[inp + o] - m[mean + r]) * m[rstd + r];
			sb += g;
		}
		sw = block_sum(sw, tid);
		sb = block_sum(sb, tid);
		if (tid == 0u) {
			m[dw + j] = sw;
			m[db + j] = sb;
		}
	}
}

// erf in f32: the rational approximations of FreeBSD's s_erf.c (those of
// Go's math.Erf), evaluated in f32; about 1 ulp near 1, well under 1e-7
// absolute everywhere.
fn erf_f32(x0: f32) -> f32 {
	let x = abs(x0);
	var r: f32;
	if (x < 0.84375f) {
		if (x < 3.7252902984e-09f) { // 2^-28
			r = x + 1.28379167095512586316e-01f * x;
		} else {
			let z = x * x;
			let p = 1.28379167095512558561e-01f + z * (-3.25042107247001499370e-01f + z * (-2.84817495755985104766e-02f
				+ z * (-5.77027029648944159157e-03f + z * -2.37630166566501626084e-05f)));
			let q = 1.0f + z * (3.97917223959155352819e-01f + z * (6.50222499887672944485e-02f + z * (5.08130628187576562776e-03f
				+ z * (1.32494738004321644526e-04f + z * -3.96022827877536812320e-06f))));
			r = x + x * (p / q);
		}
	} else if (x < 1.25f) {
		let s = x - 1.0f;
		let p = -2.36211856075265944077e-03f + s * (4.14856118683748331666e-01f + s * (-3.72207876035701323847e-01f
			+ s * (3.18346619901161753674e-01f + s * (-1.10894694282396677476e-01f + s * (3.54783043256182359371e-02f
			+ s * -2.16637559486879084300e-03f)))));
		let q = 1.0f + s * (1.06420880400844228286e-01f + s * (5.40397917702171048937e-01f + s * (7.18286544141962662868e-02f
			+ s * (1.26171219808761642112e-01f + s * (1.36370839120290507362e-02f + s * 1.19844998467991074170e-02f)))));
		r = 8.45062911510467529297e-01f + p / q;
	} else if (x < 6.0f) {
		let s = 1.0f / (x * x);
		var R: f32;
		var S: f32;
		if (x < 2.857142857f) { // 1/0.35
			R = -9.86494403484714822705e-03f + s * (-6.93858572707181764372e-01f + s * (-1.05586262253232909814e+01f
				+ s * (-6.23753324503260060396e+01f + s * (-1.62396669462573470355e+02f + s * (-1.84605092906711035994e+02f
				+ s * (-8.12874355063065934246e+01f + s * -9.81432934416914548592e+00f))))));
			S = 1.0f + s * (1.96512716674392571292e+01f + s * (1.37657754143519042600e+02f + s * (4.34565877475229228821e+02f
				+ s * (6.45387271733267880336e+02f + s * (4.29008140027567833386e+02f + s * (1.08635005541779435134e+02f
				+ s * (6.57024977031928170135e+00f + s * -6.04244152148580987438e-02f)))))));
		} else {
			R = -9.86494292470009928597e-03f + s * (-7.99283237680523006574e-01f + s * (-1.77579549177547519889e+01f
				+ s * (-1.60636384855821916062e+02f + s * (-6.37566443368389627722e+02f + s * (-1.02509513161107724954e+03f
				+ s * -4.83519191608651397019e+02f)))));
			S = 1.0f + s * (3.03380607434824582924e+01f + s * (3.25792512996573918826e+02f + s * (1.53672958608443695994e+03f
				+ s * (3.19985821950859553908e+03f + s * (2.55305040643316442583e+03f + s * (4.74528541206955367215e+02f
				+ s * -2.24409524465858183362e+01f))))));
		}
		// z: x with its low 12 mantissa bits cleared, so z*z is exact.
		let z = bitcast<f32>(bitcast<u32>(x) & 0xfffff000u);
		let e = exp(-z * z - 0.5625f) * exp((z - x) * (z + x) + R / S);
		r = 1.0f - e / x;
	} else {
		r = 1.0f;
	}
	if (x0 != x0) { return x0; } // NaN
	return select(r, -r, x0 < 0.0f);
}

// gelu_forward(in, out, n): x*Phi(x) = 0.5*x*(1 + erf(x/sqrt(2))).
@compute @workgroup_size(256)
fn gelu_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
		@builtin(num_workgroups) nwg: vec3<u32>) {
	let inp = arg_u(0u);
	let outp = arg_u(1u);
	let total = u32(arg_i(2u));
	for (var i = wid.x * 256u + lid.x; i < total; i += nwg.x * 256u) {
		let x = m[inp + i];
		m[outp + i] = 0.5f * x * (1.0f + erf_f32(x * 0.70710678118654752f));
	}
}

// gelu_backward(in, dout, din, n): din = dout*(Phi(x) + x*phi(x)).
@compute @workgroup_size(256)
fn gelu_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
		@builtin(num_workgroups) nwg: vec3<u32>) {
	let inp = arg_u(0u);
	let dout = arg_u(1u);
	let din = arg_u(2u);
	let total = u32(arg_i(3u));
	for (var i = wid.x * 256u + lid.x; i < total; i += nwg.x * 256u) {
		let x = m[inp + i];
		let cdf = 0.5f * (1.0f + erf_f32(x * 0.70710678118654752f));
		let pdf = 0.39894228040143268f * exp(-0.5f * x * x);
		m[din + i] = m[dout + i] * (cdf + x * pdf);
	}
}

// attention_softmax(s, p, rows, t, scale, causal): p = softmax(scale*s) per
// row of t scores; causal rows see the keys 0..r%t only. p may be s.
@compute @workgroup_size(128)
fn attention_softmax(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
		@builtin(num_workgroups) nwg: vec3<u32>) {
	let sp = arg_u(0u);
	let pp = arg_u(1u);
	let rows = u32(arg_i(2u));
	let t = u32(arg_i(3u));
	let scale = arg_f(4u);
	let causal = arg_i(5u) != 0;
	let tid = lid.x;
	for (var r = wid.x; r < rows; r += nwg.x) {
		let z = sp + r * t;
		let y = pp + r * t;
		let len = select(t, r % t + 1u, causal);
		var mx = FLT_LOWEST;
		for (var j = tid; j < len; j += 128u) { mx = max(mx, m[z + j] * scale); }
		mx = block_max(mx, tid);
		var sum = 0.0f;
		for (var j = tid; j < len; j += 128u) {
			let e = exp(m[z + j] * scale - mx);
			m[y + j] = e;
			sum += e;
		}
		let inv = 1.0f / block_sum(sum, tid);
		for (var j = tid; j < t; j += 128u) {
			m[y + j] = select(0.0f, m[y + j] * inv, j < len);
		}
	}
}

// attention_softmax_backward(p, dp, ds, rows, t, scale): ds =
// scale*p*(dp - sum_j p_j*dp_j) per row. ds may be dp.
@compute @workgroup_size(128)
fn attention_softmax_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
		@builtin(num_workgroups) nwg: vec3<u32>) {
	let pp = arg_u(0u);
	let dpp = arg_u(1u);
	let dsp = arg_u(2u);
	let rows = u32(arg_i(3u));
	let t = u32(arg_i(4u));
	let scale = arg_f(5u);
	let tid = lid.x;
	for (var r = wid.x; r < rows; r += nwg.x) {
		let y = pp + r * t;
		let dy = dpp + r * t;
		let dz = dsp + r * t;
		var dot = 0.0f;
		for (var j = tid; j < t; j += 128u) { dot += m[y + j] * m[dy + j]; }
		dot = block_sum(dot, tid);
		for (var j = tid; j < t; j += 128u) {
			m[dz + j] = scale * m[y + j] * (m[dy + j] - dot);
		}
	}
}

// add(a, b, out, n): out = a + b. out may be a.
@compute @workgroup_size(256)
fn add(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
		@builtin(num_workgroups) nwg: vec3<u32>) {
	let ap = arg_u(0u);
	let bp = arg_u(1u);
	let outp = arg_u(2u);
	let total = u32(arg_i(3u));
	for (var i = wid.x * 256u + lid.x; i < total; i += nwg.x * 256u) {
		m[outp + i] = m[ap + i] + m[bp + i];
	}
}

// ---- dropout: splitmix64 in 64-bit arithmetic emulated on vec2<u32>
// (x = low word, y = high word) ----

fn add64(p: vec2<u32>, q: vec2<u32>) -> vec2<u32> {
	let lo = p.x + q.x;
	return vec2<u32>(lo, p.y + q.y + select(0u, 1u, lo < p.x));
}

// The full 64-bit product of two u32, from 16-bit halves.
fn mul32x32(p: u32, q: u32) -> vec2<u32> {
	let pl = p & 0xffffu;
	let ph = p >> 16u;
	let ql = q & 0xffffu;
	let qh = q >> 16u;
	let ll = pl * ql;
	let lh = pl * qh;
	let hl = ph * ql;
	let hh = ph * qh;
	let mid = lh + hl;
	let midCarry = select(0u, 0x10000u, mid < lh);
	let lo = ll + (mid << 16u);
	let loCarry = select(0u, 1u, lo < ll);
	return vec2<u32>(lo, hh + (mid >> 16u) + midCarry + loCarry);
}

// p*q mod 2^64.
fn mul64(p: vec2<u32>, q: vec2<u32>) -> vec2<u32> {
	let ll = mul32x32(p.x, q.x);
	return vec2<u32>(ll.x, ll.y + p.x * q.y + p.y * q.x);
}

// z ^ (z >> s) for 0 < s < 32.
fn xorshr64(z: vec2<u32>, s: u32) -> vec2<u32> {
	return vec2<u32>(z.x ^ ((z.x >> s) | (z.y << (32u - s))), z.y ^ (z.y >> s));
}

const GOLDEN: vec2<u32> = vec2<u32>(0x7f4a7c15u, 0x9e3779b9u);

// splitmix64's finaliser, dropout_mix of kernels.cu.
fn dropout_mix(z0: vec2<u32>) -> vec2<u32> {
	var z = mul64(xorshr64(z0, 30u), vec2<u32>(0x1ce4e5b9u, 0xbf58476du));
	z = mul64(xorshr64(z, 27u), vec2<u32>(0x133111ebu, 0x94d049bbu));
	return xorshr64(z, 31u);
}

// dropout_apply(in, out, n, seed_lo, seed_hi, layer, threshold, scale): out
// = keep ? in*scale : 0, the mask of nn.DropoutKeep bit for bit: key =
// splitmix64(seed + layer*G), bits = splitmix64(key + i*G) >> 40, kept when
// bits >= threshold.
@compute @workgroup_size(256)
fn dropout_apply(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
		@builtin(num_workgroups) nwg: vec3<u32>) {
	let inp = arg_u(0u);
	let outp = arg_u(1u);
	let total = u32(arg_i(2u));
	let seed = vec2<u32>(arg_u(3u), arg_u(4u));
	let layer = arg_i(5u);
	let threshold = arg_u(6u);
	let scale = arg_f(7u);
	// (unsigned long long)layer: sign-extended, as C converts an int.
	let layer64 = vec2<u32>(bitcast<u32>(layer), select(0u, 0xffffffffu, layer < 0));
	let key = dropout_mix(add64(seed, mul64(layer64, GOLDEN)));
	for (var i = wid.x * 256u + lid.x; i < total; i += nwg.x * 256u) {
		let h = dropout_mix(add64(key, mul64(vec2<u32>(i, 0u), GOLDEN)));
		let bits = h.y >> 8u;
		m[outp + i] = select(0.0f, m[inp + i] * scale, bits >= threshold);
	}
}

// ---- helpers ----

// fill(p, n, value): m[p..p+n) = value.
@compute @workgroup_size(256)
fn fill(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
		@builtin(num_workgroups) nwg: vec3<u32>) {
	let p = arg_u(0u);
	let total = u32(arg_i(1u));
	let value = arg_f(2u);
	for (var i = wid.x * 256u + lid.x; i < total; i += nwg.x * 256u) {
		m[p + i] = value;
	}
}

// copy(dst, src, n): n floats; the regions do not overlap.
@compute @workgroup_size(256)
fn copy(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
		@builtin(num_workgroups) nwg: vec3<u32>) {
	let dst = arg_u(0u);
	let src = arg_u(1u);
	let total = u32(arg_i(2u));
	for (var i = wid.x * 256u + lid.x; i < total; i += nwg.x * 256u) {
		m[dst + i] = m[src + i];
	}
}

// ---- gemm ----

// Tiles of gemm, k-major: op(A)'s 64 rows × 16 k as tileA[k*16 + g], the
// four rows 4g..4g+3 at k in one vec4, and op(B)'s 16 k × 64 columns as
// tileB[k*16 + g], columns 4g..4g+3.
var<workgroup> tileA: array<vec4<f32>, 256>;
var<workgroup> tileB: array<vec4<f32>, 256>;

// a_at and b_at read op(A)[i][k] and op(B)[k][j], 0 outside.
fn a_at(A: u32, lda: u32, transA: bool, M: u32, K: u32, i: u32, k: u32) -> f32 {
	if (i >= M || k >= K) { return 0.0f; }
	if (transA) { return m[A + k * lda + i]; }
	return m[A + i * lda + k];
}

fn b_at(B: u32, ldb: u32, transB: bool, K: u32, N: u32, k: u32, j: u32) -> f32 {
	if (k >= K || j >= N) { return 0.0f; }
	if (transB) { return m[B + j * ldb + k]; }
	return m[B + k * ldb + j];
}

// gemm(transA, transB, M, N, K, alpha, A, lda, strideA, B, ldb, strideB,
// beta, C, ldc, strideC): row-major C = alpha*op(A)*op(B) + beta*C,
// strided-batched over workgroup_id.z. op(A) is M×K (A[i*lda + k], or
// A[k*lda + i] transposed), op(B) K×N (B[k*ldb + j], or B[j*ldb + k]).
// A workgroup of 16×16 computes a 64×64 tile of C, each invocation the 4×4
// block at rows 4ty.., columns 4tx.., in four vec4 accumulators (registers:
// no array indexed at run time). Each entry is summed in increasing k in
// f32, a multiply then an add. C is not read when beta is 0. Each
// invocation stages one vec4 of each tile per 16 k, reading along the
// source's contiguous direction: neighbours read neighbouring floats.
@compute @workgroup_size(16, 16)
fn gemm(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
	let transA = arg_u(0u) != 0u;
	let transB = arg_u(1u) != 0u;
	let M = u32(arg_i(2u));
	let N = u32(arg_i(3u));
	let K = u32(arg_i(4u));
	let alpha = arg_f(5u);
	let lda = u32(arg_i(7u));
	let ldb = u32(arg_i(10u));
	let beta = arg_f(12u);
	let ldc = u32(arg_i(14u));
	let b = wid.z;
	let A = arg_u(6u) + b * u32(arg_i(8u));
	let B = arg_u(9u) + b * u32(arg_i(11u));
	let C = arg_u(13u) + b * u32(arg_i(15u));
	let row0 = wid.y * 64u;
	let col0 = wid.x * 64u;
	let tx = lid.x;
	let ty = lid.y;
	let tid = ty * 16u + tx;

	// What this invocation stages: group ga of A at ka, gb of B at kb.
	var ga = tid / 16u;
	var ka = tid % 16u;
	if (transA) {
		ga = tid % 16u;
		ka = tid / 16u;
	}
	var gb = tid % 16u;
	var kb = tid / 16u;
	if (transB) {
		gb = tid / 16u;
		kb = tid % 16u;
	}
	let ia = row0 + 4u * ga;
	let jb = col0 + 4u * gb;

	var acc0 = vec4<f32>(0.0f);
	var acc1 = vec4<f32>(0.0f);
	var acc2 = vec4<f32>(0.0f);
	var acc3 = vec4<f32>(0.0f);
	for (var k0 = 0u; k0 < K; k0 += 16u) {
		let k = k0 + ka;
		tileA[ka * 16u + ga] = vec4<f32>(a_at(A, lda, transA, M, K, ia, k), a_at(A, lda, transA, M, K, ia + 1u, k),
			a_at(A, lda, transA, M, K, ia + 2u, k), a_at(A, lda, transA, M, K, ia + 3u, k));
		let kk = k0 + kb;
		tileB[kb * 16u + gb] = vec4<f32>(b_at(B, ldb, transB, K, N, kk, jb), b_at(B, ldb, transB, K, N, kk, jb + 1u),
			b_at(B, ldb, transB, K, N, kk, jb + 2u), b_at(B, ldb, transB, K, N, kk, jb + 3u));
		workgroupBarrier();
		for (var q = 0u; q < 16u; q++) {
			let av = tileA[q * 16u + ty];
			let bv = tileB[q * 16u + tx];
			acc0 = acc0 + av.x * bv;
			acc1 = acc1 + av.y * bv;
			acc2 = acc2 + av.z * bv;
			acc3 = acc3 + av.w * bv;
		}
		workgroupBarrier();
	}
	gemm_store(C, ldc, M, N, alpha, beta, row0 + 4u * ty, col0 + 4u * tx, acc0);
	gemm_store(C, ldc, M, N, alpha, beta, row0 + 4u * ty + 1u, col0 + 4u * tx, acc1);
	gemm_store(C, ldc, M, N, alpha, beta, row0 + 4u * ty + 2u, col0 + 4u * tx, acc2);
	gemm_store(C, ldc, M, N, alpha, beta, row0 + 4u * ty + 3u, col0 + 4u * tx, acc3);
}

// gemm_store writes row i's four columns j.. of a gemm tile.
fn gemm_store(C: u32, ldc: u32, M: u32, N: u32, alpha: f32, beta: f32, i: u32, j: u32, v: vec4<f32>) {
	if (i >= M) { return; }
	for (var c = 0u; c < 4u; c++) {
		if (j + c >= N) { return; }
		let o = C + i * ldc + j + c;
		var x = alpha * v[c];
		if (beta != 0.0f) { x += beta * m[o]; }
		m[o] = x;
	}
}
