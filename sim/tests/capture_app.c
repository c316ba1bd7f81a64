/* Test program for the simulated CUDA runtime (no GPU: the kernels never run there): a
 * training run in miniature, for capture windows. It builds a "model" (kernels named
 * build and a copy), runs a first step (warmup kernels), then four steps inside a
 * window (step kernels and a memset), then more work after it (after kernels).
 *
 * usage: capture_app WINDOW
 *   WINDOW: runtime  (cudaProfilerStart/cudaProfilerStop around the steps)
 *           driver   (cuProfilerStart/cuProfilerStop)
 *           nvtx     (NVTX ranges "steps" pushed/popped and "step" started/ended
 *                     around them; only when built with -DHAVE_NVTX)
 *           sleep    (no window calls: sleeps 2.5 s before the steps, for --delay) */
#define APP_NAME "capture_app"
#include "runtime_app.h"
#include <string.h>
#include <unistd.h>
#include <cuda.h>
#ifdef HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

/* Declared by cuda_profiler_api.h and cudaProfiler.h, which the wheels lack. */
extern cudaError_t CUDARTAPI cudaProfilerStart(void);
extern cudaError_t CUDARTAPI cudaProfilerStop(void);
extern CUresult CUDAAPI cuProfilerStart(void);
extern CUresult CUDAAPI cuProfilerStop(void);

static void build_stub(void) {}
static void warmup_stub(void) {}
static void step_stub(void) {}
static void after_stub(void) {}

NOINLINE void launch(const void *stub, cudaStream_t s) {
    dim3 g = {64, 1, 1}, b = {128, 1, 1};
    CHECK(cudaLaunchKernel(stub, g, b, NULL, 0, s));
    __asm__ volatile("" ::: "memory");
}

static void open_window(const char *how) {
    if (!strcmp(how, "runtime"))
        CHECK(cudaProfilerStart());
    else if (!strcmp(how, "driver"))
        CHECK((cudaError_t)cuProfilerStart());
#ifdef HAVE_NVTX
    else if (!strcmp(how, "nvtx"))
        nvtxRangePushA("steps");
#endif
    else if (!strcmp(how, "sleep"))
        usleep(2500 * 1000);
}

static void close_window(const char *how) {
    if (!strcmp(how, "runtime"))
        CHECK(cudaProfilerStop());
    else if (!strcmp(how, "driver"))
        CHECK((cudaError_t)cuProfilerStop());
#ifdef HAVE_NVTX
    else if (!strcmp(how, "nvtx"))
        nvtxRangePop();
#endif
}

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    const char *how = argv[1];
    static int image;
    void **h = __cudaRegisterFatBinary(&image);
    __cudaRegisterFunction(h, (const char *)build_stub, "build_kernel", "build_kernel", -1, 0, 0, 0, 0, 0);
    __cudaRegisterFunction(h, (const char *)warmup_stub, "warmup_kernel", "warmup_kernel", -1, 0, 0, 0, 0, 0);
    __cudaRegisterFunction(h, (const char *)step_stub, "step_kernel", "step_kernel", -1, 0, 0, 0, 0, 0);
    __cudaRegisterFunction(h, (const char *)after_stub, "after_kernel", "after_kernel", -1, 0, 0, 0, 0, 0);
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    void *d;
    static char host[4096];
    CHECK(cudaMalloc(&d, sizeof host));
    for (int i = 0; i < 5; i++)
        launch((const void *)build_stub, s);
    CHECK(cudaMemcpyAsync(d, host, sizeof host, cudaMemcpyHostToDevice, s));
    for (int i = 0; i < 3; i++)
        launch((const void *)warmup_stub, s);
    CHECK(cudaStreamSynchronize(s));
    open_window(how);
    for (int step = 0; step < 4; step++) {
#ifdef HAVE_NVTX
        nvtxRangeId_t r = 0;
        if (!strcmp(how, "nvtx"))
            r = nvtxRangeStartA("step");
#endif
        for (int i = 0; i < 3; i++)
            launch((const void *)step_stub, s);
#ifdef HAVE_NVTX
        if (!strcmp(how, "nvtx"))
            nvtxRangeEnd(r);
#endif
    }
    CHECK(cudaMemsetAsync(d, 0, sizeof host, s));
    CHECK(cudaStreamSynchronize(s));
    close_window(how);
    for (int i = 0; i < 2; i++)
        launch((const void *)after_stub, s);
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaFree(d));
    printf("capture_app %s: 19 kernels\n", how);
    return 0;
}
