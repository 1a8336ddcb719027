// A CPU emulation of kernels.cu for testing the backend without a GPU:
// kernels.cu is compiled as plain C++ with the CUDA keywords defined away,
// and each launch runs its blocks one after another. By default a block is
// one thread: every kernel is written to be correct for any block size, so
// one thread per block computes what 256 do on a GPU. With emu_threads set
// to a power of two above 1, a block is that many real threads (or the
// launch's block size, if smaller) sharing the block's __shared__ arrays
// and meeting at __syncthreads, so the tests also run the reductions'
// trees and the atomics as a GPU would. Linked with
// ../driver/testdata/fakecuda.c built with -DEMU, whose cuModuleGetFunction
// and cuLaunchKernel call emu_function and emu_launch.
#include <math.h>
#include <pthread.h>
#include <string.h>

struct emu_dim3 { unsigned x, y, z; };
static emu_dim3 blockDim, gridDim;
static thread_local emu_dim3 blockIdx, threadIdx;
static pthread_barrier_t emu_barrier;
static int emu_team = 1; // threads per block in the launch under way
extern "C" { int emu_threads = 1; }

static inline void emu_sync() {
	if (emu_team > 1) pthread_barrier_wait(&emu_barrier);
}
#define __global__
#define __device__ static inline
#define __shared__ static
#define __syncthreads() emu_sync()
static inline float atomicAdd(float *a, float v) {
	unsigned *u = (unsigned *)a;
	unsigned old = __atomic_load_n(u, __ATOMIC_RELAXED), next;
	do {
		float f;
		memcpy(&f, &old, 4);
		f += v;
		memcpy(&next, &f, 4);
	} while (!__atomic_compare_exchange_n(u, &old, next, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
	float r;
	memcpy(&r, &old, 4);
	return r;
}

#include "../kernels.cu"

#define A(i, T) (*(T *)p[i])
typedef void (*wrapper)(void **p);

static void w_add_bias(void **p) { add_bias(A(0, float *), A(1, const float *), A(2, int), A(3, int)); }
static void w_relu_forward(void **p) { relu_forward(A(0, const float *), A(1, float *), A(2, int)); }
static void w_relu_backward(void **p) { relu_backward(A(0, const float *), A(1, const float *), A(2, float *), A(3, int)); }
static void w_im2row(void **p) {
	im2row(A(0, const float *), A(1, float *), A(2, int), A(3, int), A(4, int), A(5, int), A(6, int), A(7, int), A(8, int), A(9, int), A(10, int));
}
static void w_row2im(void **p) {
	row2im(A(0, const float *), A(1, float *), A(2, int), A(3, int), A(4, int), A(5, int), A(6, int), A(7, int), A(8, int), A(9, int), A(10, int));
}
static void w_conv_output(void **p) { conv_output(A(0, const float *), A(1, const float *), A(2, float *), A(3, int), A(4, int), A(5, int)); }
static void w_conv_grad_rows(void **p) { conv_grad_rows(A(0, const float *), A(1, float *), A(2, int), A(3, int), A(4, int)); }
static void w_column_sums(void **p) { column_sums(A(0, const float *), A(1, float *), A(2, int), A(3, int)); }
static void w_maxpool_forward(void **p) {
	maxpool_forward(A(0, const float *), A(1, float *), A(2, int *), A(3, int), A(4, int), A(5, int), A(6, int), A(7, int), A(8, int), A(9, int), A(10, int));
}
static void w_maxpool_backward(void **p) {
	maxpool_backward(A(0, const float *), A(1, const int *), A(2, float *), A(3, int), A(4, int), A(5, int), A(6, int), A(7, int), A(8, int), A(9, int), A(10, int));
}
static void w_softmax_xent(void **p) {
	softmax_xent(A(0, const float *), A(1, const int *), A(2, float *), A(3, int), A(4, int), A(5, float), A(6, float *), A(7, int *));
}
static void w_sum_losses(void **p) { sum_losses(A(0, const float *), A(1, const int *), A(2, int), A(3, double *), A(4, int *)); }
static void w_sgd_step(void **p) { sgd_step(A(0, float *), A(1, const float *), A(2, float), A(3, int)); }
static void w_pseudo_gradient(void **p) { pseudo_gradient(A(0, const float *), A(1, const float *), A(2, float *), A(3, float), A(4, int)); }

static void w_grad_sumsq_partial(void **p) { grad_sumsq_partial(A(0, const float *), A(1, int), A(2, double *)); }
static void w_clip_scale(void **p) { clip_scale(A(0, const double *), A(1, int), A(2, float), A(3, float *)); }
static void w_scale_by(void **p) { scale_by(A(0, float *), A(1, const float *), A(2, int)); }

static void w_adamw_step(void **p) {
	adamw_step(A(0, float *), A(1, const float *), A(2, float *), A(3, float *), A(4, float), A(5, float), A(6, float), A(7, float), A(8, float),
		A(9, float), A(10, float), A(11, int));
}

static void w_embedding_forward(void **p) {
	embedding_forward(A(0, const float *), A(1, const float *), A(2, const float *), A(3, float *), A(4, int), A(5, int), A(6, int), A(7, int));
}
static void w_embedding_backward_gather(void **p) {
	embedding_backward_gather(A(0, const float *), A(1, const float *), A(2, float *), A(3, int), A(4, int), A(5, int));
}
static void w_embedding_backward_scatter(void **p) {
	embedding_backward_scatter(A(0, const float *), A(1, const float *), A(2, float *), A(3, int), A(4, int), A(5, int));
}
static void w_embedding_backward_positions(void **p) {
	embedding_backward_positions(A(0, const float *), A(1, float *), A(2, int), A(3, int), A(4, int), A(5, int));
}
static void w_layernorm_forward(void **p) {
	layernorm_forward(A(0, const float *), A(1, const float *), A(2, const float *), A(3, float *), A(4, float *), A(5, float *), A(6, int),
		A(7, int), A(8, float));
}
static void w_layernorm_backward(void **p) {
	layernorm_backward(A(0, const float *), A(1, const float *), A(2, const float *), A(3, const float *), A(4, const float *), A(5, float *),
		A(6, int), A(7, int));
}
static void w_layernorm_param_grads(void **p) {
	layernorm_param_grads(A(0, const float *), A(1, const float *), A(2, const float *), A(3, const float *), A(4, float *), A(5, float *),
		A(6, int), A(7, int));
}
static void w_gelu_forward(void **p) { gelu_forward(A(0, const float *), A(1, float *), A(2, int)); }
static void w_gelu_backward(void **p) { gelu_backward(A(0, const float *), A(1, const float *), A(2, float *), A(3, int)); }
static void w_attention_softmax(void **p) {
	attention_softmax(A(0, const float *), A(1, float *), A(2, int), A(3, int), A(4, float), A(5, int));
}
static void w_attention_softmax_backward(void **p) {
	attention_softmax_backward(A(0, const float *), A(1, const float *), A(2, float *), A(3, int), A(4, int), A(5, float));
}
static void w_add(void **p) { add(A(0, const float *), A(1, const float *), A(2, float *), A(3, int)); }
static void w_dropout_apply(void **p) {
	dropout_apply(A(0, const float *), A(1, float *), A(2, int), A(3, unsigned long long), A(4, int), A(5, unsigned int), A(6, float));
}

static const struct { const char *name; wrapper w; } table[] = {
	{"add_bias", w_add_bias}, {"relu_forward", w_relu_forward}, {"relu_backward", w_relu_backward},
	{"im2row", w_im2row}, {"row2im", w_row2im}, {"conv_output", w_conv_output}, {"conv_grad_rows", w_conv_grad_rows},
	{"column_sums", w_column_sums}, {"maxpool_forward", w_maxpool_forward}, {"maxpool_backward", w_maxpool_backward},
	{"softmax_xent", w_softmax_xent}, {"sum_losses", w_sum_losses}, {"sgd_step", w_sgd_step}, {"pseudo_gradient", w_pseudo_gradient},
	{"adamw_step", w_adamw_step}, {"grad_sumsq_partial", w_grad_sumsq_partial}, {"clip_scale", w_clip_scale},
	{"scale_by", w_scale_by},
	{"embedding_forward", w_embedding_forward}, {"embedding_backward_gather", w_embedding_backward_gather},
	{"embedding_backward_scatter", w_embedding_backward_scatter},
	{"embedding_backward_positions", w_embedding_backward_positions},
	{"layernorm_forward", w_layernorm_forward}, {"layernorm_backward", w_layernorm_backward},
	{"layernorm_param_grads", w_layernorm_param_grads}, {"gelu_forward", w_gelu_forward}, {"gelu_backward", w_gelu_backward},
	{"attention_softmax", w_attention_softmax}, {"attention_softmax_backward", w_attention_softmax_backward},
	{"add", w_add}, {"dropout_apply", w_dropout_apply},
};

extern "C" void *emu_function(const char *name) {
	for (unsigned i = 0; i < sizeof table / sizeof table[0]; i++)
		if (strcmp(table[i].name, name) == 0) return (void *)table[i].w;
	return 0;
}

struct emu_job {
	void *f;
	void **params;
	unsigned tid;
};

// One thread of a block team: every block in turn, all meeting after each.
static void *emu_member(void *arg) {
	emu_job *j = (emu_job *)arg;
	threadIdx.x = j->tid, threadIdx.y = threadIdx.z = 0;
	for (unsigned b = 0; b < gridDim.x; b++) {
		blockIdx.x = b, blockIdx.y = blockIdx.z = 0;
		((wrapper)j->f)(j->params);
		emu_sync();
	}
	return 0;
}

extern "C" int emu_launch(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, void **params) {
	if (gy != 1 || gz != 1) return 1; // the backend launches 1-D grids only
	unsigned team = 1;
	while (team * 2 <= (unsigned)emu_threads && team * 2 <= bx) team *= 2;
	gridDim.x = gx, gridDim.y = gridDim.z = 1;
	blockDim.x = team, blockDim.y = blockDim.z = 1;
	emu_team = (int)team;
	emu_job jobs[1024];
	pthread_t th[1024];
	if (team > 1) pthread_barrier_init(&emu_barrier, 0, team);
	for (unsigned i = 1; i < team; i++) {
		jobs[i] = emu_job{f, params, i};
		if (pthread_create(&th[i], 0, emu_member, &jobs[i])) return 2; // CUDA_ERROR_OUT_OF_MEMORY
	}
	jobs[0] = emu_job{f, params, 0};
	emu_member(&jobs[0]);
	for (unsigned i = 1; i < team; i++) pthread_join(th[i], 0);
	if (team > 1) pthread_barrier_destroy(&emu_barrier);
	emu_team = 1;
	return 0;
}
