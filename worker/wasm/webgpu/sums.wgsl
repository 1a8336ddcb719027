// The loss and hit count of a lease's inner steps, kept per row on the
// device so that no step waits for the GPU: the host reads them once, at
// the end, and sums them in float64 in row order (the CUDA backend's
// sum_losses does this on the device, in double, which WGSL lacks).
// Appended to kernels.wgsl, whose m, arg_u and arg_i it uses.

// acc_loss[r] += row_loss[r]; acc_hit[r] += row_hit[r] (i32 bits).
// Arguments: row_loss, row_hit, acc_loss, acc_hit, rows.
@compute @workgroup_size(256)
fn accumulate_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
		@builtin(num_workgroups) nwg: vec3<u32>) {
	let row_loss = arg_u(0u);
	let row_hit = arg_u(1u);
	let acc_loss = arg_u(2u);
	let acc_hit = arg_u(3u);
	let rows = u32(arg_i(4u));
	for (var r = wid.x * 256u + lid.x; r < rows; r += nwg.x * 256u) {
		m[acc_loss + r] = m[acc_loss + r] + m[row_loss + r];
		m[acc_hit + r] = bitcast<f32>(bitcast<i32>(m[acc_hit + r]) + bitcast<i32>(m[row_hit + r]));
	}
}
