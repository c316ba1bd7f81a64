/* What in-process stacks add to a launch, for `cargo bench -p gpuperf-inject
 * --bench callback`: N launches (API enter and exit callbacks plus one kernel
 * record each) played through the MOCK libcupti at the bottom of DEPTH frames of
 * this file, built with -O2 -fomit-frame-pointer. It runs as a program, or as a
 * shared library (-DBENCH_LIB) that Python calls through ctypes under 30 Python
 * frames.
 *
 * usage: stack_bench INJECT.so|none DEPTH LAUNCHES [THREADS]   (prints ns_per_launch:
 * wall time over all launches of all threads, which launch at once)
 * BENCH_COROUTINES=K: the launches come from K ucontext coroutines, each on a
 * stack of its own (mmap), switched to in turn, one launch per switch. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>

static void (*mock_api)(int, int, uint32_t, int);
static void (*mock_kernel)(uint32_t, uint64_t, uint64_t, const char *, uint32_t, uint64_t,
                           uint32_t);
static uint64_t (*mock_now)(void);
static volatile int sink;
static uint32_t corr;

static uint64_t now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Loads the injection library (unless "none") and the mock; 0 on success. */
int bench_init(const char *inject) {
    if (strcmp(inject, "none") != 0) {
        void *h = dlopen(inject, RTLD_NOW | RTLD_LOCAL);
        int (*init)(void) = h ? (int (*)(void))dlsym(h, "InitializeInjection") : NULL;
        if (!init || init() != 1) return -1;
    }
    void *mock = dlopen(getenv("GPUPERF_CUPTI_PATH"), RTLD_NOW | RTLD_LOCAL);
    if (!mock) return -2;
    *(void **)&mock_api = dlsym(mock, "mock_api");
    *(void **)&mock_kernel = dlsym(mock, "mock_kernel");
    *(void **)&mock_now = dlsym(mock, "mock_now");
    return mock_api && mock_kernel && mock_now ? 0 : -3;
}

__attribute__((noinline)) static double loop(long n) {
    uint64_t t0 = now();
    for (long i = 0; i < n; i++) {
        uint32_t c = __atomic_add_fetch(&corr, 1, __ATOMIC_RELAXED);
        mock_api(2, 211, c, 1); /* cudaLaunchKernel_v7000 */
        mock_api(2, 211, c, 0);
        uint64_t t = mock_now();
        mock_kernel(c, t, t + 1000, "_Z6kernelPfi", 0, 0, 7);
    }
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
