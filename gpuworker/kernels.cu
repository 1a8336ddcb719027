// Kernels of the GPU worker, compiled at start by NVRTC. Layouts are those
// of package nn: activations row-major per example, spatial tensors CHW.
// GEMMs go to cuBLAS; everything else is here. Reductions run in a fixed
// order, so a result does not depend on scheduling.

#define GRID_STRIDE(i, n) for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (long long)blockDim.x * gridDim.x)

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

// Softmax cross-entropy over n rows, one block: dlogits = (softmax -
// onehot) * scale; the summed loss (in double) and the number of rows whose
// first maximum is the label are added to acc_loss and acc_correct.
extern "C" __global__ void softmax_xent(const float *logits, const int *labels, float *dlogits, int n, int classes, float scale,
		double *acc_loss, int *acc_correct) {
	__shared__ double loss[256];
	__shared__ int hits[256];
	double l = 0;
	int h = 0;
	for (int e = threadIdx.x; e < n; e += blockDim.x) {
		const float *z = logits + (long long)e * classes;
		float *d = dlogits + (long long)e * classes;
		int lab = labels[e];
		float mx = z[0];
		int arg = 0;
		for (int j = 1; j < classes; j++)
			if (z[j] > mx) { mx = z[j]; arg = j; }
		if (arg == lab) h++;
		double s = 0;
		for (int j = 0; j < classes; j++) {
			double ex = exp((double)z[j] - (double)mx);
			d[j] = (float)ex;
			s += ex;
		}
		double inv = (double)scale / s;
		for (int j = 0; j < classes; j++) d[j] = (float)((double)d[j] * inv);
		d[lab] -= scale;
		l += (double)mx + log(s) - (double)z[lab];
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
