// A CPU emulation of kernels.cu for testing the backend without a GPU:
// kernels.cu is compiled as plain C++ with the CUDA keywords defined away,
// and each launch runs its blocks one after another with one thread per
// block. Every kernel is written to be correct for any block size, so one
// thread per block computes what 256 do on a GPU. Linked with
// ../cuda/testdata/fakecuda.c built with -DEMU, whose cuModuleGetFunction
// and cuLaunchKernel call emu_function and emu_launch.
#include <math.h>
#include <string.h>

struct emu_dim3 { unsigned x, y, z; };
static emu_dim3 blockIdx, blockDim, gridDim, threadIdx;
#define __global__
#define __shared__ static
#define __syncthreads()

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
	softmax_xent(A(0, const float *), A(1, const int *), A(2, float *), A(3, int), A(4, int), A(5, float), A(6, double *), A(7, int *));
}
static void w_sgd_step(void **p) { sgd_step(A(0, float *), A(1, const float *), A(2, float), A(3, int)); }
static void w_pseudo_gradient(void **p) { pseudo_gradient(A(0, const float *), A(1, const float *), A(2, float *), A(3, float), A(4, int)); }

static void w_adamw_step(void **p) {
	adamw_step(A(0, float *), A(1, const float *), A(2, float *), A(3, float *), A(4, float), A(5, float), A(6, float), A(7, float), A(8, float),
		A(9, float), A(10, float), A(11, int));
}

static const struct { const char *name; wrapper w; } table[] = {
	{"add_bias", w_add_bias}, {"relu_forward", w_relu_forward}, {"relu_backward", w_relu_backward},
	{"im2row", w_im2row}, {"row2im", w_row2im}, {"conv_output", w_conv_output}, {"conv_grad_rows", w_conv_grad_rows},
	{"column_sums", w_column_sums}, {"maxpool_forward", w_maxpool_forward}, {"maxpool_backward", w_maxpool_backward},
	{"softmax_xent", w_softmax_xent}, {"sgd_step", w_sgd_step}, {"pseudo_gradient", w_pseudo_gradient},
	{"adamw_step", w_adamw_step},
};

extern "C" void *emu_function(const char *name) {
	for (unsigned i = 0; i < sizeof table / sizeof table[0]; i++)
		if (strcmp(table[i].name, name) == 0) return (void *)table[i].w;
	return 0;
}

extern "C" int emu_launch(void *f, unsigned gx, unsigned gy, unsigned gz, void **params) {
	if (gy != 1 || gz != 1) return 1; // the backend launches 1-D grids only
	gridDim.x = gx, gridDim.y = gridDim.z = 1;
	blockDim.x = blockDim.y = blockDim.z = 1;
	threadIdx.x = threadIdx.y = threadIdx.z = 0;
	for (unsigned b = 0; b < gx; b++) {
		blockIdx.x = b, blockIdx.y = blockIdx.z = 0;
		((wrapper)f)(params);
	}
	return 0;
}
