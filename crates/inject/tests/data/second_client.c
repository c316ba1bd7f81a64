/* A program with a second CUPTI client of its own, linked against libcupti as
 * Kineto (torch.profiler) is inside libtorch: its calls of
 * cuptiActivityRegisterCallbacks and cuptiFinalize go through its GOT. It runs
 * on the simulated CUDA runtime (sim/, no GPU), linked with its libcudart and
 * libcupti; the simulated driver loads the injection library at cuInit from
 * CUDA_INJECTION64_PATH (set here from the first argument).
 *
 * usage: second_client INJECT.so|none
 *   20 launches (_Z6beforev), waited for; then, as a profiler window in the program: the
 *   second client subscribes (refused while gpuperf holds CUPTI), registers its
 *   buffers and enables kernel records, 30 launches (_Z6windowv), a forced
 *   flush ("second client: N kernels" counts what it got), cuptiFinalize; then
 *   10 launches (_Z5afterv). Exits with 3. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cupti.h>

#include <cuda_runtime_api.h>

/* nvcc's registration, done by hand: a host stub names a device function. */
void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFunction(void **h, const char *hostFun, char *deviceFun, const char *deviceName,
                            int thread_limit, void *tid, void *bid, void *bDim, void *gDim, int *wSize);
__attribute__((noinline)) static void before_stub(void) { __asm__ volatile("" ::"r"(1)); }
__attribute__((noinline)) static void window_stub(void) { __asm__ volatile("" ::"r"(2)); }
__attribute__((noinline)) static void after_stub(void) { __asm__ volatile("" ::"r"(3)); }

static void launch(void (*stub)(void)) {
    dim3 g = {1, 1, 1}, b = {32, 1, 1};
    if (cudaLaunchKernel((const void *)stub, g, b, NULL, 0, 0) != cudaSuccess) exit(4);
}

static int kernels;

static void CUPTIAPI requested(uint8_t **b, size_t *size, size_t *max) {
    *b = aligned_alloc(8, 1 << 16);
    *size = 1 << 16;
    *max = 0;
}

static void CUPTIAPI completed(CUcontext ctx, uint32_t stream, uint8_t *b, size_t size,
                               size_t valid) {
    (void)ctx; (void)stream; (void)size;
    CUpti_Activity *r = NULL;
    while (cuptiActivityGetNextRecord(b, valid, &r) == CUPTI_SUCCESS)
        kernels += r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    free(b);
}

int main(int argc, char **argv) {
    if (argc < 2) return 97;
    if (strcmp(argv[1], "none") != 0)
        setenv("CUDA_INJECTION64_PATH", argv[1], 1);
    else
        unsetenv("CUDA_INJECTION64_PATH");
    static int image;
    void **h = __cudaRegisterFatBinary(&image);
    __cudaRegisterFunction(h, (const char *)before_stub, "_Z6beforev", "_Z6beforev", -1, 0, 0, 0, 0, 0);
    __cudaRegisterFunction(h, (const char *)window_stub, "_Z6windowv", "_Z6windowv", -1, 0, 0, 0, 0, 0);
    __cudaRegisterFunction(h, (const char *)after_stub, "_Z5afterv", "_Z5afterv", -1, 0, 0, 0, 0, 0);
    for (int i = 0; i < 20; i++) launch(before_stub);
    /* Done before the window opens, so that gpuperf's flush ahead of it finds
     * every one of those kernels complete, however fast this runs: a kernel
     * still running then comes back incomplete, and is counted, not written. */
    if (cudaDeviceSynchronize() != cudaSuccess) return 94;
    /* The profiler window: the program's own client. Its subscription is
     * refused while another holds CUPTI; like Kineto's activity tracing of
     * old, it goes on with the activity API. */
    CUpti_SubscriberHandle sub;
    (void)cuptiSubscribe(&sub, (CUpti_CallbackFunc)NULL, NULL);
    if (cuptiActivityRegisterCallbacks(requested, completed) != CUPTI_SUCCESS) return 95;
    if (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) return 95;
    for (int i = 0; i < 30; i++) launch(window_stub);
    if (cudaDeviceSynchronize() != cudaSuccess) return 94;
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    printf("second client: %d kernels\n", kernels);
    if (cuptiFinalize() != CUPTI_SUCCESS) return 95;
    for (int i = 0; i < 10; i++) launch(after_stub);
    return 3;
}
