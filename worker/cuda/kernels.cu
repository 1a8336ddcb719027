// Kernels of the GPU worker, compiled at start by NVRTC. Layouts are those
// of package nn: activations row-major per example, spatial tensors CHW.
// GEMMs go to cuBLAS; everything else is here. Reductions run in a fixed
// order, so a result does not depend on scheduling.

#define GRID_STRIDE(i, n) for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (long long)blockDim.x * gridDim.x)

// One block per row (a block may take several): the row kernels below
// reduce over a row with block_sum, in a fixed order.
#define BLOCK_ROWS(r, rows) for (long long r = blockIdx.x; r < (rows); r += gridDim.x)

// The sum of v over the block's threads, in a fixed tree order, returned
// to every thread. sh holds blockDim.x floats; blockDim.x is a power of two
// of at most 256. Every thread of the block must call it.
__device__ float block_sum(float v, float *sh) {
	sh[threadIdx.x] = v;
	__syncthreads();
	for (int k = blockDim.x / 2; k > 0; k /= 2) {
		if (threadIdx.x < k) sh[threadIdx.x] += sh[threadIdx.x + k];
		__syncthreads();
	}
	float r = sh[0];
	__syncthreads(); // sh is free again when the caller reuses it
	return r;
}

// The maximum of v over the block's threads, as block_sum.
__device__ float block_max(float v, float *sh) {
	sh[threadIdx.x] = v;
	__syncthreads();
	for (int k = blockDim.x / 2; k > 0; k /= 2) {
		if (threadIdx.x < k) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + k]);
		__syncthreads();
	}
	float r = sh[0];
	__syncthreads();
	return r;
}

// out[r*cols + c] += b[c]: the bias of a dense layer.
extern "C" __global__ void add_bias(float *out, const float *b, int rows, int cols) {
	GRID_STRIDE(i, (long long)rows * cols) { out[i] += b[i % cols]; }
}

extern "C" __global__ void relu_forward(const float *in, float *out, int n) {
	GRID_STRIDE(i, n) { out[i] = in[i] > 0.f ? in[i] : 0.f; }
}

// dIn = dOut where the relu's output is > 0.
extern "C" __global__ void relu_backward(const float *out, const float *dout, float *din, int n) {
	GRID_STRIDE(i, n) { din[i] = out[i] > 0.f ? dout[i] : 0.f; }
}

// rows[(e*P + p)*R + r] = in_e[c][oy*S-pad+kh][ox*S-pad+kw], r = (c*K+kh)*K+kw,
// p = oy*OW+ox; zero outside the input. The whole batch's patches form one
// (n*P)×R matrix, so a conv layer is one GEMM.
extern "C" __global__ void im2row(const float *in, float *rows, int n, int C, int H, int W, int K, int S, int pad, int OH, int OW) {
	const int R = C * K * K, P = OH * OW;
	GRID_STRIDE(i, (long long)n * P * R) {
		int r = (int)(i % R);
		long long ep = i / R;
		int p = (int)(ep % P), e = (int)(ep / P);
		int c = r / (K * K), kh = (r / K) % K, kw = r % K;
		int iy = (p / OW) * S - pad + kh, ix = (p % OW) * S - pad + kw;
		float v = 0.f;
		if (iy >= 0 && iy < H && ix >= 0 && ix < W) v = in[((long long)e * C + c) * H * W + iy * W + ix];
		rows[i] = v;
	}
}

// The adjoint of im2row: each input position gathers (no atomics) every
// patch entry that was read from it.
extern "C" __global__ void row2im(const float *drows, float *din, int n, int C, int H, int W, int K, int S, int pad, int OH, int OW) {
	const int R = C * K * K, P = OH * OW;
	GRID_STRIDE(i, (long long)n * C * H * W) {
		int x = (int)(i % W), y = (int)((i / W) % H), c = (int)((i / ((long long)W * H)) % C);
		long long e = i / ((long long)W * H * C);
		float s = 0.f;
		for (int kh = 0; kh < K; kh++) {
			int ty = y + pad - kh;
			if (ty < 0 || ty % S != 0 || ty / S >= OH) continue;
			int oy = ty / S;
			for (int kw = 0; kw < K; kw++) {
				int tx = x + pad - kw;
				if (tx < 0 || tx % S != 0 || tx / S >= OW) continue;
				int ox = tx / S;
				s += drows[(e * P + oy * OW + ox) * R + (c * K + kh) * K + kw];
			}
		}
		din[i] = s;
	}
}

// out[e][f][p] = outT[(e*P + p)*F + f] + b[f]: the conv GEMM's (n*P)×F
// result back to CHW with the bias.
extern "C" __global__ void conv_output(const float *outT, const float *b, float *out, int n, int F, int P) {
	GRID_STRIDE(i, (long long)n * F * P) {
		int p = (int)(i % P), f = (int)((i / P) % F);
		long long e = i / ((long long)P * F);
		out[i] = outT[(e * P + p) * F + f] + b[f];
	}
}

// doutT[(e*P + p)*F + f] = dout[e][f][p].
extern "C" __global__ void conv_grad_rows(const float *dout, float *doutT, int n, int F, int P) {
	GRID_STRIDE(i, (long long)n * F * P) {
		int p = (int)(i % P), f = (int)((i / P) % F);
		long long e = i / ((long long)P * F);
		doutT[(e * P + p) * F + f] = dout[i];
	}
}

// out[c] = sum over r of m[r*cols + c]: one block per column, a fixed
// per-thread stride and a tree, so the order never changes. Bias gradients.
extern "C" __global__ void column_sums(const float *m, float *out, int rows, int cols) {
	__shared__ float part[256];
	int c = blockIdx.x;
	float s = 0.f;
	for (int r = threadIdx.x; r < rows; r += blockDim.x) s += m[(long long)r * cols + c];
	part[threadIdx.x] = s;
	__syncthreads();
	for (int k = blockDim.x / 2; k > 0; k /= 2) {
		if (threadIdx.x < k) part[threadIdx.x] += part[threadIdx.x + k];
		__syncthreads();
	}
	if (threadIdx.x == 0) out[c] = part[0];
}

// Max over each window; argmax is the winner's index within its example,
// the first maximum in row-major window order (as package nn picks it).
extern "C" __global__ void maxpool_forward(const float *in, float *out, int *argmax, int n, int C, int H, int W, int K, int S, int OH, int OW) {
	GRID_STRIDE(i, (long long)n * C * OH * OW) {
		int ox = (int)(i % OW), oy = (int)((i / OW) % OH), c = (int)((i / ((long long)OW * OH)) % C);
		long long e = i / ((long long)OW * OH * C);
		const float *inE = in + e * C * H * W;
		int start = c * H * W + oy * S * W + ox * S;
		float best = inE[start];
		int bi = start;
		for (int ky = 0; ky < K; ky++)
			for (int kx = 0; kx < K; kx++) {
				int j = start + ky * W + kx;
				if (inE[j] > best) { best = inE[j]; bi = j; }
			}
		out[i] = best;
		argmax[i] = bi;
	}
}

// Each input gathers the gradients of the windows it won.
extern "C" __global__ void maxpool_backward(const float *dout, const int *argmax, float *din, int n, int C, int H, int W, int K, int S, int OH, int OW) {
	GRID_STRIDE(i, (long long)n * C * H * W) {
		int x = (int)(i % W), y = (int)((i / W) % H), c = (int)((i / ((long long)W * H)) % C);
		long long e = i / ((long long)W * H * C);
		int idx = c * H * W + y * W + x;
		float s = 0.f;
		int oy0 = y >= K ? (y - K) / S + 1 : 0, ox0 = x >= K ? (x - K) / S + 1 : 0;
		for (int oy = oy0; oy <= y / S && oy < OH; oy++)
			for (int ox = ox0; ox <= x / S && ox < OW; ox++) {
				long long o = ((e * C + c) * OH + oy) * OW + ox;
				if (argmax[o] == idx) s += dout[o];
			}
		din[i] = s;
	}
}

// The first maximum of v over the block's threads: each thread brings its
// own first maximum (v at index i); the larger value wins, a tie goes to
// the smaller index. Every thread gets the winner in *v and *i.
__device__ void block_argmax(float *v, int *i, float *sh, int *shi) {
	sh[threadIdx.x] = *v;
	shi[threadIdx.x] = *i;
	__syncthreads();
	for (int k = blockDim.x / 2; k > 0; k /= 2) {
		if (threadIdx.x < k) {
			float a = sh[threadIdx.x], b = sh[threadIdx.x + k];
			int ia = shi[threadIdx.x], ib = shi[threadIdx.x + k];
			if (b > a || (b == a && ib < ia)) {
				sh[threadIdx.x] = b;
				shi[threadIdx.x] = ib;
			}
		}
		__syncthreads();
	}
	*v = sh[0];
	*i = shi[0];
	__syncthreads();
}

// Softmax cross-entropy, one block per row of classes logits (a row per
// example, or per position of a sequence model): dlogits = (softmax -
// onehot)*scale; the row's loss into row_loss and whether its first
// maximum is the label into row_hit. sum_losses adds those up.
extern "C" __global__ void softmax_xent(const float *logits, const int *labels, float *dlogits, int rows, int classes, float scale,
		float *row_loss, int *row_hit) {
	__shared__ float sh[256];
	__shared__ int shi[256];
	BLOCK_ROWS(r, rows) {
		const float *z = logits + r * classes;
		float *d = dlogits + r * classes;
		int lab = labels[r];
		float mx = -3.402823466e38f;
		int arg = classes;
		for (int j = threadIdx.x; j < classes; j += blockDim.x)
			if (z[j] > mx || arg == classes) {
				mx = z[j];
				arg = j;
			}
		block_argmax(&mx, &arg, sh, shi);
		float s = 0.f;
		for (int j = threadIdx.x; j < classes; j += blockDim.x) {
			float e = expf(z[j] - mx);
			d[j] = e;
			s += e;
		}
		s = block_sum(s, sh);
		float inv = scale / s;
		for (int j = threadIdx.x; j < classes; j += blockDim.x) d[j] = d[j] * inv - (j == lab ? scale : 0.f);
		if (threadIdx.x == 0) {
			row_loss[r] = mx + logf(s) - z[lab];
			row_hit[r] = arg == lab;
		}
	}
}

// acc_loss[0] += the sum of row_loss (in double), acc_correct[0] += the sum
// of row_hit, in a fixed order: one block.
extern "C" __global__ void sum_losses(const float *row_loss, const int *row_hit, int rows, double *acc_loss, int *acc_correct) {
	__shared__ double loss[256];
	__shared__ int hits[256];
	double l = 0;
	int h = 0;
	for (int r = threadIdx.x; r < rows; r += blockDim.x) {
		l += (double)row_loss[r];
		h += row_hit[r];
	}
	loss[threadIdx.x] = l;
	hits[threadIdx.x] = h;
	__syncthreads();
	for (int k = blockDim.x / 2; k > 0; k /= 2) {
		if (threadIdx.x < k) {
			loss[threadIdx.x] += loss[threadIdx.x + k];
			hits[threadIdx.x] += hits[threadIdx.x + k];
		}
		__syncthreads();
	}
	if (threadIdx.x == 0) {
		acc_loss[0] += loss[0];
		acc_correct[0] += hits[0];
	}
}

// w -= lr * g: one inner SGD step.
extern "C" __global__ void sgd_step(float *w, const float *g, float lr, int n) {
	GRID_STRIDE(i, n) { w[i] -= lr * g[i]; }
}

// out = (base - w) * inv_lr: the pseudo-gradient.
extern "C" __global__ void pseudo_gradient(const float *base, const float *w, float *out, float inv_lr, int n) {
	GRID_STRIDE(i, n) { out[i] = (base[i] - w[i]) * inv_lr; }
}

// Gradient clipping, as nn.ClipScale: the sum of squares of g in double,
// grad_sumsq_partial writing one partial sum per block into partial (the
// host launches a fixed grid, so the order of the additions is fixed),
// then clip_scale adding the partials up in one block and writing
// min(1, c/(sqrt(sum)+1e-6)) into scale[0], then scale_by multiplying g by
// it.
extern "C" __global__ void grad_sumsq_partial(const float *g, int n, double *partial) {
	__shared__ double sh[256];
	double s = 0;
	GRID_STRIDE(i, n) { s += (double)g[i] * (double)g[i]; }
	sh[threadIdx.x] = s;
	__syncthreads();
	for (int k = blockDim.x / 2; k > 0; k /= 2) {
		if (threadIdx.x < k) sh[threadIdx.x] += sh[threadIdx.x + k];
		__syncthreads();
	}
	if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}

extern "C" __global__ void clip_scale(const double *partial, int parts, float c, float *scale) {
	__shared__ double sh[256];
	double s = 0;
	for (int i = threadIdx.x; i < parts; i += blockDim.x) s += partial[i];
	sh[threadIdx.x] = s;
	__syncthreads();
	for (int k = blockDim.x / 2; k > 0; k /= 2) {
		if (threadIdx.x < k) sh[threadIdx.x] += sh[threadIdx.x + k];
		__syncthreads();
	}
	if (threadIdx.x == 0) {
		double coef = (double)c / (sqrt(sh[0]) + 1e-6);
		scale[0] = coef >= 1 ? 1.f : (float)coef;
	}
}

extern "C" __global__ void scale_by(float *g, const float *scale, int n) {
	float s = scale[0];
	if (s == 1.f) return;
	GRID_STRIDE(i, n) { g[i] *= s; }
}

// One AdamW step with decoupled weight decay, in the order of nn.AdamWUpdate:
// w -= lr*wd*w; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g²;
// w -= lr * (m*c1) / (sqrt(v)*c2 + eps), where c1 = 1/(1-b1^t) and
// c2 = 1/sqrt(1-b2^t) come from the host (nn.AdamWScales).
extern "C" __global__ void adamw_step(float *w, const float *g, float *m, float *v, float lr, float wd, float b1, float b2, float eps,
		float c1, float c2, int n) {
	GRID_STRIDE(i, n) {
		float wi = w[i] - lr * wd * w[i];
		float gi = g[i];
		float mi = b1 * m[i] + (1.f - b1) * gi;
		float vi = b2 * v[i] + (1.f - b2) * gi * gi;
		m[i] = mi;
		v[i] = vi;
		w[i] = wi - lr * (mi * c1) / (sqrtf(vi) * c2 + eps);
	}
}

// ---- sequence layers: activations are rows of d values, one row per
// position, t rows per example ----

// out[r*d + j] = weight[x_r*d + j] + position[(r % t)*d + j] for the rows
// of n examples of t tokens; x holds the token ids as floats. position is
// 0 when the layer has no position table. A token outside 0..vocab-1 (the
// host rejects those before a batch goes up) reads no table row.
extern "C" __global__ void embedding_forward(const float *x, const float *weight, const float *position, float *out, int rows, int t, int d,
		int vocab) {
	GRID_STRIDE(i, (long long)rows * d) {
		long long r = i / d;
		int j = (int)(i % d), tok = (int)x[r];
		float v = tok >= 0 && tok < vocab ? weight[(long long)tok * d + j] : 0.f;
		if (position) v += position[(r % t) * d + j];
		out[i] = v;
	}
}

// dweight[v*d + j] += the sum, in row order, of dout[r*d + j] over the
// rows r whose token is v: a gather, so the sum's order is fixed. Each
// thread reads every row's token, rows*vocab*d comparisons in all, cheap
// for a byte vocabulary; embedding_backward_scatter serves large ones.
// dweight holds zeros, or what a tied output layer added first.
extern "C" __global__ void embedding_backward_gather(const float *x, const float *dout, float *dweight, int rows, int d, int vocab) {
	GRID_STRIDE(i, (long long)vocab * d) {
		int v = (int)(i / d), j = (int)(i % d);
		float s = 0.f;
		for (int r = 0; r < rows; r++)
			if ((int)x[r] == v) s += dout[(long long)r * d + j];
		dweight[i] += s;
	}
}

// dweight[x_r] += dout[r] for every row, by atomicAdd: rows with the same
// token add into the same table row concurrently, in no fixed order (in row
// order with one thread per block, as in the emulator).
extern "C" __global__ void embedding_backward_scatter(const float *x, const float *dout, float *dweight, int rows, int d, int vocab) {
	GRID_STRIDE(i, (long long)rows * d) {
		long long r = i / d;
		int j = (int)(i % d), tok = (int)x[r];
		if (tok >= 0 && tok < vocab) atomicAdd(&dweight[(long long)tok * d + j], dout[i]);
	}
}

// dposition[p*d + j] = the sum over the n examples, in order, of
// dout[(e*t + p)*d + j]; 0 for the table's positions t..positions-1.
extern "C" __global__ void embedding_backward_positions(const float *dout, float *dposition, int n, int t, int positions, int d) {
	GRID_STRIDE(i, (long long)positions * d) {
		int p = (int)(i / d), j = (int)(i % d);
		float s = 0.f;
		if (p < t)
			for (int e = 0; e < n; e++) s += dout[((long long)e * t + p) * d + j];
		dposition[i] = s;
	}
}

// Layer normalisation of each row of d values: y = (x - mean)*rstd*w + b,
// rstd = 1/sqrt(var + eps) with the biased variance. mean and rstd are
// kept per row for the backward pass.
extern "C" __global__ void layernorm_forward(const float *in, const float *w, const float *b, float *out, float *mean, float *rstd, int rows,
		int d, float eps) {
	__shared__ float sh[256];
	BLOCK_ROWS(r, rows) {
		const float *x = in + r * d;
		float *y = out + r * d;
		float s = 0.f;
		for (int j = threadIdx.x; j < d; j += blockDim.x) s += x[j];
		float mu = block_sum(s, sh) / d;
		float q = 0.f;
		for (int j = threadIdx.x; j < d; j += blockDim.x) {
			float c = x[j] - mu;
			q += c * c;
		}
		float rs = 1.f / sqrtf(block_sum(q, sh) / d + eps);
		for (int j = threadIdx.x; j < d; j += blockDim.x) y[j] = (x[j] - mu) * rs * w[j] + b[j];
		if (threadIdx.x == 0) {
			mean[r] = mu;
			rstd[r] = rs;
		}
	}
}

// The input gradient of layernorm_forward: with g = dout*w and xh the
// normalised input, din = rstd*(g - mean(g) - xh*mean(g*xh)) per row.
extern "C" __global__ void layernorm_backward(const float *in, const float *dout, const float *w, const float *mean, const float *rstd,
		float *din, int rows, int d) {
	__shared__ float sh[256];
	BLOCK_ROWS(r, rows) {
		const float *x = in + r * d, *dy = dout + r * d;
		float *dx = din + r * d;
		float mu = mean[r], rs = rstd[r];
		float s1 = 0.f, s2 = 0.f;
		for (int j = threadIdx.x; j < d; j += blockDim.x) {
			float g = dy[j] * w[j];
			s1 += g;
			s2 += g * (x[j] - mu) * rs;
		}
		float m1 = block_sum(s1, sh) / d;
		float m2 = block_sum(s2, sh) / d;
		for (int j = threadIdx.x; j < d; j += blockDim.x) dx[j] = rs * (dy[j] * w[j] - m1 - (x[j] - mu) * rs * m2);
	}
}

// The gradients of layernorm's weight and bias: dw[j] = sum over rows of
// dout*xh, db[j] = sum of dout. One block per column, in a fixed order.
extern "C" __global__ void layernorm_param_grads(const float *in, const float *dout, const float *mean, const float *rstd, float *dw,
		float *db, int rows, int d) {
	__shared__ float sh[256];
	BLOCK_ROWS(j, d) {
		float sw = 0.f, sb = 0.f;
		for (int r = threadIdx.x; r < rows; r += blockDim.x) {
			long long o = (long long)r * d + j;
			sw += dout[o] * (in[o] - mean[r]) * rstd[r];
			sb += dout[o];
		}
		sw = block_sum(sw, sh);
		sb = block_sum(sb, sh);
		if (threadIdx.x == 0) {
			dw[j] = sw;
			db[j] = sb;
		}
	}
}

// Exact GELU, x*Phi(x) = 0.5*x*(1 + erf(x/sqrt(2))).
extern "C" __global__ void gelu_forward(const float *in, float *out, int n) {
	GRID_STRIDE(i, n) {
		float x = in[i];
		out[i] = 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
	}
}

// din = dout*(Phi(x) + x*phi(x)), phi the standard normal density.
extern "C" __global__ void gelu_backward(const float *in, const float *dout, float *din, int n) {
	GRID_STRIDE(i, n) {
		float x = in[i];
		float cdf = 0.5f * (1.f + erff(x * 0.70710678118654752f));
		float pdf = 0.39894228040143268f * expf(-0.5f * x * x);
		din[i] = dout[i] * (cdf + x * pdf);
	}
}

// Attention weights: p = softmax(scale*s) over each row of t scores of the
// [t×t] score matrices (rows = matrices*t). causal: row r is the query at
// position r % t, which sees the keys 0..r%t only; the rest of its row of p
// is 0.
extern "C" __global__ void attention_softmax(const float *s, float *p, int rows, int t, float scale, int causal) {
	__shared__ float sh[256];
	BLOCK_ROWS(r, rows) {
		const float *z = s + r * t;
		float *y = p + r * t;
		int len = causal ? (int)(r % t) + 1 : t;
		float mx = -3.402823466e38f;
		for (int j = threadIdx.x; j < len; j += blockDim.x) mx = fmaxf(mx, z[j] * scale);
		mx = block_max(mx, sh);
		float sum = 0.f;
		for (int j = threadIdx.x; j < len; j += blockDim.x) {
			float e = expf(z[j] * scale - mx);
			y[j] = e;
			sum += e;
		}
		float inv = 1.f / block_sum(sum, sh);
		for (int j = threadIdx.x; j < t; j += blockDim.x) y[j] = j < len ? y[j] * inv : 0.f;
	}
}

// The gradient of the raw scores: ds = scale*p*(dp - sum_j p_j*dp_j) per
// row (0 where the mask zeroed p). ds may be dp.
extern "C" __global__ void attention_softmax_backward(const float *p, const float *dp, float *ds, int rows, int t, float scale) {
	__shared__ float sh[256];
	BLOCK_ROWS(r, rows) {
		const float *y = p + r * t, *dy = dp + r * t;
		float *dz = ds + r * t;
		float dot = 0.f;
		for (int j = threadIdx.x; j < t; j += blockDim.x) dot += y[j] * dy[j];
		dot = block_sum(dot, sh);
		for (int j = threadIdx.x; j < t; j += blockDim.x) dz[j] = scale * y[j] * (dy[j] - dot);
	}
}

// out = a + b: a residual connection's output, and its input gradient
// (the body's input gradient plus the one that skipped it). out may be a.
extern "C" __global__ void add(const float *a, const float *b, float *out, int n) {
	GRID_STRIDE(i, n) { out[i] = a[i] + b[i]; }
}

// dropout_keep says whether value i of the batch (example e's value j is
// e*size + j) is kept by the dropout layer with depth-first index layer in
// the step with this seed, as nn.DropoutKeep: a counter-based hash, so
// every backend draws the same mask from the same seed without sharing
// state. key = splitmix64(seed + layer*G), bits = splitmix64(key + i*G) >>
// 40 with G = 0x9e3779b97f4a7c15 and splitmix64 SplitMix64's finaliser;
// kept when bits >= threshold = (uint32)(rate * 2^24).
__device__ unsigned long long dropout_mix(unsigned long long z) {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}
__device__ bool dropout_keep(unsigned long long seed, int layer, unsigned long long i, unsigned int threshold) {
	const unsigned long long g = 0x9e3779b97f4a7c15ull;
	unsigned long long key = dropout_mix(seed + (unsigned long long)layer * g);
	return (unsigned int)(dropout_mix(key + i * g) >> 40) >= threshold;
}

// Inverted dropout: out = keep ? in*scale : 0 with scale = 1/(1 - rate).
// The backward pass is the same map applied to the output's gradient, with
// the same seed.
extern "C" __global__ void dropout_apply(const float *in, float *out, int n, unsigned long long seed, int layer, unsigned int threshold,
		float scale) {
	GRID_STRIDE(i, n) { out[i] = dropout_keep(seed, layer, (unsigned long long)i, threshold) ? in[i] * scale : 0.f; }
}
