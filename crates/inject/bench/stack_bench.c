/* What gpuperf's injection library costs a launch, for `cargo bench -p
 * gpuperf-inject --bench callback`: N cudaLaunchKernel calls on the simulated
 * CUDA runtime (sim/; API enter and exit callbacks plus one kernel record each,
 * from the simulated CUPTI) at the bottom of DEPTH frames of this file, built
 * with -O2 -fomit-frame-pointer. It runs as a program, or as a shared library
 * (-DBENCH_LIB) that Python calls through ctypes under 30 Python frames. The
 * simulated driver loads the injection library at cuInit, as NVIDIA's does.
 *
 * usage: stack_bench INJECT.so|none DEPTH LAUNCHES [THREADS]   (prints ns_per_launch:
 * wall time over all launches of all threads, which launch at once)
 * BENCH_COROUTINES=K: the launches come from K ucontext coroutines, each on a
 * stack of its own (mmap), switched to in turn, one launch per switch.
 * BENCH_GRAPH_NODES=K: instead, a graph of K kernel nodes is instantiated
 * LAUNCHES times, each instantiated graph destroyed after; prints
 * ns_per_instantiation (wall), cpu_ns_per_instantiation (the thread's CPU
 * time) and the peak resident set (maxrss_kb). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <ucontext.h>

#include <cuda_runtime_api.h>

/* nvcc's registration, done by hand: the host stub names the device function. */
void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFunction(void **h, const char *hostFun, char *deviceFun, const char *deviceName,
                            int thread_limit, void *tid, void *bid, void *bDim, void *gDim, int *wSize);
__attribute__((noinline)) static void kernel_stub(void) { __asm__ volatile(""); }

static volatile int sink;

static uint64_t now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Has the simulated driver load the injection library (unless "none") and
 * starts CUDA; 0 on success. */
int bench_init(const char *inject) {
    if (strcmp(inject, "none") != 0)
        setenv("CUDA_INJECTION64_PATH", inject, 1);
    else
        unsetenv("CUDA_INJECTION64_PATH");
    static int image;
    void **h = __cudaRegisterFatBinary(&image);
    __cudaRegisterFunction(h, (const char *)kernel_stub, "_Z6kernelPfi", "_Z6kernelPfi", -1, 0, 0, 0, 0, 0);
    return cudaFree(0) == cudaSuccess ? 0 : -1;
}

static void launch(void) {
    dim3 g = {4, 1, 1}, b = {32, 1, 1};
    if (cudaLaunchKernel((const void *)kernel_stub, g, b, NULL, 0, 0) != cudaSuccess)
        abort();
}

__attribute__((noinline)) static double loop(long n) {
    uint64_t t0 = now();
    for (long i = 0; i < n; i++)
        launch();
    return (double)(now() - t0) / (double)n;
}

__attribute__((noinline)) static double nest(int depth, long n) {
    double r = depth == 0 ? loop(n) : nest(depth - 1, n);
    sink += depth; /* no tail call: every level stays on the stack */
    return r;
}

/* ns per launch of `n` launches, `depth` frames below the caller. */
double bench_run(int depth, long n) {
    nest(depth, n / 10 + 1); /* warm: every cache and table filled */
    return nest(depth, n);
}

#ifndef BENCH_LIB
static int depth_arg;
static long launches_arg;
static pthread_barrier_t start;

static void *thread_run(void *arg) {
    (void)arg;
    nest(depth_arg, launches_arg / 10 + 1);
    pthread_barrier_wait(&start);
    nest(depth_arg, launches_arg);
    return NULL;
}

static ucontext_t main_ctx, co_ctx[16];

static void coroutine(int i) {
    for (;;) {
        nest(depth_arg, 1);
        swapcontext(&co_ctx[i], &main_ctx);
    }
}

/* ns per launch (and per switch to a coroutine) of `n` launches spread over
 * `k` coroutines. */
static double coroutines(int k, long n) {
    if (k > 16) k = 16;
    for (int i = 0; i < k; i++) {
        size_t size = 256 << 10;
        void *stack = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (stack == MAP_FAILED) return -1;
        getcontext(&co_ctx[i]);
        co_ctx[i].uc_stack.ss_sp = stack;
        co_ctx[i].uc_stack.ss_size = size;
        co_ctx[i].uc_link = &main_ctx;
        makecontext(&co_ctx[i], (void (*)(void))coroutine, 1, i);
    }
    for (long j = 0; j < n / 10 + k; j++) swapcontext(&main_ctx, &co_ctx[j % k]);
    uint64_t t0 = now();
    for (long j = 0; j < n; j++) swapcontext(&main_ctx, &co_ctx[j % k]);
    return (double)(now() - t0) / (double)n;
}

/* `n` instantiations of a graph of `nodes` kernel nodes, each destroyed after. */
static int graph_instantiate(long nodes, long n) {
    cudaGraph_t g;
    if (cudaGraphCreate(&g, 0) != cudaSuccess) return 1;
    void *args[] = {NULL};
    struct cudaKernelNodeParams p = {
        .func = (void *)kernel_stub, .gridDim = {1, 1, 1}, .blockDim = {32, 1, 1}, .kernelParams = args};
    for (long i = 0; i < nodes; i++) {
        cudaGraphNode_t node;
        if (cudaGraphAddKernelNode(&node, g, NULL, 0, &p) != cudaSuccess) return 1;
    }
    struct timespec c0, c1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    uint64_t t0 = now();
    for (long k = 0; k < n; k++) {
        cudaGraphExec_t x;
        if (cudaGraphInstantiate(&x, g, 0) != cudaSuccess || cudaGraphExecDestroy(x) != cudaSuccess)
            return 1;
    }
    double ns = (double)(now() - t0) / (double)n;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    double cpu = ((double)(c1.tv_sec - c0.tv_sec) * 1e9 + (double)(c1.tv_nsec - c0.tv_nsec)) / (double)n;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("instantiated %ld ns_per_instantiation %.1f cpu_ns_per_instantiation %.1f maxrss_kb %ld\n", n,
           ns, cpu, ru.ru_maxrss);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 4) return 2;
    int rc = bench_init(argv[1]);
    if (rc != 0) {
        fprintf(stderr, "stack_bench: init failed (%d)\n", rc);
        return 1;
    }
    depth_arg = atoi(argv[2]);
    launches_arg = atol(argv[3]);
    int threads = argc > 4 ? atoi(argv[4]) : 1;
    const char *nodes = getenv("BENCH_GRAPH_NODES");
    if (nodes)
        return graph_instantiate(atol(nodes), launches_arg);
    const char *k = getenv("BENCH_COROUTINES");
    if (k) {
        printf("ns_per_launch %.1f\n", coroutines(atoi(k), launches_arg));
        return 0;
    }
    if (threads <= 1) {
        printf("ns_per_launch %.1f\n", bench_run(depth_arg, launches_arg));
        return 0;
    }
    pthread_t t[64];
    if (threads > 64) threads = 64;
    pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, thread_run, NULL);
    pthread_barrier_wait(&start);
    uint64_t t0 = now();
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    printf("ns_per_launch %.1f\n", (double)(now() - t0) / ((double)launches_arg * threads));
    return 0;
}
#endif
