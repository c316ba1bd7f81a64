/* A program with a second CUPTI client of its own, linked against libcupti as
 * Kineto (torch.profiler) is inside libtorch: its calls of
 * cuptiActivityRegisterCallbacks and cuptiFinalize go through its GOT. It
 * loads the injection library the way the CUDA driver does and plays CUDA
 * calls through the MOCK libcupti it is linked with.
 *
 * usage: second_client INJECT.so|none
 *   20 launches (1..20); then, as a profiler window in the program: the second
 *   client subscribes (refused while gpuperf holds CUPTI), registers its buffers and enables kernel records, 30 launches
 *   (21..50), a forced flush ("second client: N kernels" counts what it got),
 *   cuptiFinalize; then 10 launches (51..60). Exits with 3. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cupti.h>

/* What libcuda would answer; 3 is CUDA_ERROR_NOT_INITIALIZED. */
CUresult cuDriverGetVersion(int *v) {
    (void)v;
    return CUDA_ERROR_NOT_INITIALIZED;
}

/* The MOCK's own exports, by which the program plays the application. */
void mock_api(int domain, int cbid, uint32_t corr, int enter);
void mock_kernel(uint32_t corr, uint64_t start, uint64_t end, const char *name, uint32_t graph,
                 uint64_t node, uint32_t stream);
uint64_t mock_now(void);
void mock_context_create(uint32_t id, uint32_t device);

static uint64_t now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void launch(uint32_t corr, const char *name) {
    mock_api(2, 211, corr, 1);
    mock_api(2, 211, corr, 0);
    uint64_t t = mock_now();
    if (t == 0) t = now(); /* no injection: no timestamp callback registered */
    mock_kernel(corr, t, t + 1000, name, 0, 0, 7);
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
    if (strcmp(argv[1], "none") != 0) {
        void *inj = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
        if (!inj) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 99; }
        int (*init)(void) = (int (*)(void))dlsym(inj, "InitializeInjection");
        if (!init || init() != 1) return 96;
    }
    mock_context_create(1, 0);
    for (uint32_t c = 1; c <= 20; c++) launch(c, "_Z6beforev");
    /* The profiler window: the program's own client. Its subscription is
     * refused while another holds CUPTI; like Kineto's activity tracing of
     * old, it goes on with the activity API. */
    CUpti_SubscriberHandle sub;
    (void)cuptiSubscribe(&sub, (CUpti_CallbackFunc)NULL, NULL);
    if (cuptiActivityRegisterCallbacks(requested, completed) != CUPTI_SUCCESS) return 95;
    if (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) return 95;
    for (uint32_t c = 21; c <= 50; c++) launch(c, "_Z6windowv");
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    printf("second client: %d kernels\n", kernels);
    if (cuptiFinalize() != CUPTI_SUCCESS) return 95;
    for (uint32_t c = 51; c <= 60; c++) launch(c, "_Z5afterv");
    return 3;
}
