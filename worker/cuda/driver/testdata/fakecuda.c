// A fake of the parts of libcuda, libnvrtc and libcublas that package cuda
// binds, for testing the binding without a GPU. "Device" memory is host
// memory, so copies and GEMMs really move and compute data. Define
// OMIT_MEMALLOC to leave cuMemAlloc_v2 out (a driver too old), EMU to run
// the GPU worker's kernels on the CPU (with worker/cuda/testdata/emu.cpp).
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// What the last calls received, read back by the tests.
unsigned int fake_init_flags = 12345;
uint64_t fake_last_alloc = 0;
char fake_last_name[256];
char fake_last_options[1024];
char fake_last_module[64];
unsigned int fake_launch_dims[7];
uint64_t fake_launch_ptr;
int fake_launch_int;
float fake_launch_float;
int fake_device_count = 1;
uint64_t fake_memory_limit = 1ull << 30;

// ---- driver ----
int cuInit(unsigned int flags) {
	fake_init_flags = flags;
	return flags == 0 ? 0 : 1; // CUDA_ERROR_INVALID_VALUE
}
int cuDriverGetVersion(int *v) { *v = 13000; return 0; }
int cuDeviceGetCount(int *n) {
	if (fake_device_count == 0) return 100; // CUDA_ERROR_NO_DEVICE
	*n = fake_device_count;
	return 0;
}
int cuDeviceGet(int *dev, int ordinal) {
	if (ordinal < 0 || ordinal >= fake_device_count) return 101; // CUDA_ERROR_INVALID_DEVICE
	*dev = ordinal + 10;
	return 0;
}
int cuDeviceGetName(char *name, int len, int dev) {
	strncpy(name, "Fake GPU 9000", len);
	return dev == 10 ? 0 : 101;
}
int cuDeviceGetAttribute(int *v, int attr, int dev) {
	switch (attr) {
	case 75: *v = 9; return 0;
	case 76: *v = 0; return 0;
	case 16: *v = 132; return 0;
	}
	return 1;
}
int cuDeviceTotalMem_v2(size_t *bytes, int dev) { *bytes = (size_t)80 << 30; return 0; }
int cuDevicePrimaryCtxRetain(void **ctx, int dev) { *ctx = (void *)0xc0ffee; return 0; }
int cuDevicePrimaryCtxRelease_v2(int dev) { return 0; }
int cuCtxSetCurrent(void *ctx) { return ctx == (void *)0xc0ffee ? 0 : 201; } // CUDA_ERROR_INVALID_CONTEXT
int cuCtxSynchronize(void) { return 0; }
int cuMemGetInfo_v2(size_t *free, size_t *total) { *free = 1 << 20; *total = 2 << 20; return 0; }
#ifndef OMIT_MEMALLOC
int cuMemAlloc_v2(uint64_t *p, size_t bytes) {
	fake_last_alloc = bytes;
	if (bytes > fake_memory_limit) return 2; // CUDA_ERROR_OUT_OF_MEMORY
	*p = (uint64_t)(uintptr_t)calloc(1, bytes);
	return 0;
}
#endif
int cuMemFree_v2(uint64_t p) { free((void *)(uintptr_t)p); return 0; }
int cuMemAllocHost_v2(void **p, size_t bytes) {
	if (bytes > fake_memory_limit) return 2;
	*p = calloc(1, bytes);
	return 0;
}
int cuMemFreeHost(void *p) { free(p); return 0; }
int cuMemcpyHtoD_v2(uint64_t dst, const void *src, size_t n) { memcpy((void *)(uintptr_t)dst, src, n); return 0; }
int cuMemcpyDtoH_v2(void *dst, uint64_t src, size_t n) { memcpy(dst, (void *)(uintptr_t)src, n); return 0; }
int cuMemcpyDtoD_v2(uint64_t dst, uint64_t src, size_t n) { memcpy((void *)(uintptr_t)dst, (void *)(uintptr_t)src, n); return 0; }
int cuMemsetD32_v2(uint64_t dst, unsigned int v, size_t n) {
	unsigned int *d = (unsigned int *)(uintptr_t)dst;
	for (size_t i = 0; i < n; i++) d[i] = v;
	return 0;
}
int cuModuleLoadData(void **m, const void *image) {
	strncpy(fake_last_module, (const char *)image, sizeof fake_last_module - 1);
	*m = (void *)0x1234;
	return 0;
}
int cuModuleUnload(void *m) { return 0; }
#ifdef EMU
// Kernels run on the CPU (worker/cuda/testdata/emu.cpp).
void *emu_function(const char *name);
int emu_launch(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, void **params);
#endif
int cuModuleGetFunction(void **f, void *m, const char *name) {
	strncpy(fake_last_name, name, sizeof fake_last_name - 1);
#ifdef EMU
	*f = emu_function(name);
	return *f ? 0 : 500;
#endif
	if (strcmp(name, "missing") == 0) return 500; // CUDA_ERROR_NOT_FOUND
	*f = (void *)0x5678;
	return 0;
}
// The test kernel takes (pointer, int, float).
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
		unsigned shared, void *stream, void **params, void **extra) {
#ifdef EMU
	if (bx < 1 || by != 1 || bz != 1 || bx > 1024) return 1; // CUDA_ERROR_INVALID_VALUE
	return emu_launch(f, gx, gy, gz, bx, params);
#endif
	unsigned int d[7] = {gx, gy, gz, bx, by, bz, shared};
	memcpy(fake_launch_dims, d, sizeof d);
	fake_launch_ptr = *(uint64_t *)params[0];
	fake_launch_int = *(int *)params[1];
	fake_launch_float = *(float *)params[2];
	return 0;
}
int cuGetErrorName(int code, const char **s) {
	switch (code) {
	case 1: *s = "CUDA_ERROR_INVALID_VALUE"; return 0;
	case 2: *s = "CUDA_ERROR_OUT_OF_MEMORY"; return 0;
	case 100: *s = "CUDA_ERROR_NO_DEVICE"; return 0;
	case 101: *s = "CUDA_ERROR_INVALID_DEVICE"; return 0;
	case 500: *s = "CUDA_ERROR_NOT_FOUND"; return 0;
	}
	return 1;
}

// ---- NVRTC ----
typedef struct { char *src; char *log; } prog;
int nvrtcVersion(int *major, int *minor) { *major = 13; *minor = 0; return 0; }
const char *nvrtcGetErrorString(int code) {
	return code == 6 ? "NVRTC_ERROR_COMPILATION" : "NVRTC_ERROR_OTHER";
}
int nvrtcCreateProgram(prog **p, const char *src, const char *name, int nh, const char **h, const char **in) {
	*p = calloc(1, sizeof(prog));
	(*p)->src = strdup(src);
	strncpy(fake_last_name, name, sizeof fake_last_name - 1);
	return 0;
}
int nvrtcDestroyProgram(prog **p) { free((*p)->src); free((*p)->log); free(*p); *p = 0; return 0; }
int nvrtcCompileProgram(prog *p, int n, const char **opts) {
	fake_last_options[0] = 0;
	for (int i = 0; i < n; i++) {
		if (i) strcat(fake_last_options, "|");
		strcat(fake_last_options, opts[i]);
	}
	if (strstr(p->src, "syntax error")) {
		p->log = strdup("fake.cu(1): error: expected a \";\"\n");
		return 6;
	}
	return 0;
}
int nvrtcGetProgramLogSize(prog *p, size_t *n) { *n = p->log ? strlen(p->log) + 1 : 1; return 0; }
int nvrtcGetProgramLog(prog *p, char *out) { strcpy(out, p->log ? p->log : ""); return 0; }
int nvrtcGetPTXSize(prog *p, size_t *n) { *n = strlen("PTX:") + strlen(p->src) + 1; return 0; }
int nvrtcGetPTX(prog *p, char *out) { strcpy(out, "PTX:"); strcat(out, p->src); return 0; }
int nvrtcGetCUBINSize(prog *p, size_t *n) { *n = 6; return 0; }
int nvrtcGetCUBIN(prog *p, char *out) { memcpy(out, "CUBIN", 6); return 0; }
int nvrtcGetNumSupportedArchs(int *n) { *n = 3; return 0; }
int nvrtcGetSupportedArchs(int *a) { a[0] = 75; a[1] = 80; a[2] = 90; return 0; }

// ---- cuBLAS: a real column-major SGEMM ----
int cublasCreate_v2(void **h) { *h = (void *)0xb1a5; return 0; }
int cublasDestroy_v2(void *h) { return 0; }
int cublasGetVersion_v2(void *h, int *v) { *v = 130000; return 0; }
int cublasSgemm_v2(void *h, int ta, int tb, int m, int n, int k, const float *alpha, const float *A, int lda,
		const float *B, int ldb, const float *beta, float *C, int ldc) {
	if (m < 0 || n < 0 || k < 0) return 7; // CUBLAS_STATUS_INVALID_VALUE
	for (int j = 0; j < n; j++)
		for (int i = 0; i < m; i++) {
			float s = 0;
			for (int p = 0; p < k; p++) {
				float a = ta ? A[p + i * lda] : A[i + p * lda];
				float b = tb ? B[j + p * ldb] : B[p + j * ldb];
				s += a * b;
			}
			C[i + j * ldc] = *alpha * s + (*beta == 0 ? 0 : *beta * C[i + j * ldc]);
		}
	return 0;
}
int cublasSgemmStridedBatched(void *h, int ta, int tb, int m, int n, int k, const float *alpha, const float *A, int lda, long long sa,
		const float *B, int ldb, long long sb, const float *beta, float *C, int ldc, long long sc, int batch) {
	if (batch < 0) return 7;
	for (int i = 0; i < batch; i++) {
		int st = cublasSgemm_v2(h, ta, tb, m, n, k, alpha, A + i * sa, lda, B + i * sb, ldb, beta, C + i * sc, ldc);
		if (st) return st;
	}
	return 0;
}
