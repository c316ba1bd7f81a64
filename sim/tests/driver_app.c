/* Test program for the simulated CUDA driver (no GPU: the kernels never run there): launches through the driver API, as cudarc and Triton do.
 *
 * usage: driver_app PTX_FILE N
 *   loads the PTX module (the cudarc sample's kernels.ptx), then N x cuLaunchKernel
 *   of `scale` and N x cuLaunchKernelEx of `square` on a created stream. */
#include <stdio.h>
#include <stdlib.h>
#include <cuda.h>

#define CHECK(call)                                                                    \
    do {                                                                               \
        CUresult r_ = (call);                                                          \
        if (r_ != CUDA_SUCCESS) {                                                      \
            const char *s_ = "?";                                                      \
            cuGetErrorName(r_, &s_);                                                   \
            fprintf(stderr, "driver_app: %s: %s\n", #call, s_);                        \
            exit(3);                                                                   \
        }                                                                              \
    } while (0)
#define NOINLINE __attribute__((noinline))

static CUdeviceptr x;
static int n_elems = 1 << 16;

NOINLINE static void launch_scale(CUfunction f, CUstream s) {
    float a = 2.0f;
    void *args[] = {&x, &a, &n_elems};
    CHECK(cuLaunchKernel(f, 256, 1, 1, 256, 1, 1, 0, s, args, NULL));
}

NOINLINE static void launch_square_ex(CUfunction f, CUstream s) {
    void *args[] = {&x, &n_elems};
    CUlaunchConfig cfg = {.gridDimX = 128, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 512,
                          .blockDimY = 1, .blockDimZ = 1, .hStream = s};
    CHECK(cuLaunchKernelEx(&cfg, f, args, NULL));
}

NOINLINE static void run_driver(CUmodule m, int n) {
    CUfunction scale, square;
    CHECK(cuModuleGetFunction(&scale, m, "scale"));
    CHECK(cuModuleGetFunction(&square, m, "square"));
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    for (int i = 0; i < n; i++) {
        launch_scale(scale, s);
        launch_square_ex(square, s);
    }
    CHECK(cuStreamSynchronize(s));
}

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    CUdevice dev;
    CUcontext ctx;
    CUmodule m;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuModuleLoad(&m, argv[1]));
    CHECK(cuMemAlloc(&x, (size_t)n_elems * sizeof(float)));
    run_driver(m, atoi(argv[2]));
    CUfunction missing;
    if (cuModuleGetFunction(&missing, m, "no_such_kernel") != CUDA_ERROR_NOT_FOUND)
        return 4;
    printf("driver_app: done\n");
    return 0;
}
