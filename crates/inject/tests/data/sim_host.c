/* A CUDA application on the simulated CUDA runtime (sim/, no GPU): it makes real
 * runtime calls, and the simulated driver loads the injection library at cuInit
 * from CUDA_INJECTION64_PATH, as NVIDIA's driver does. The simulated CUPTI's
 * faults are chosen by its GPUSIM_CUPTI_* variables (sim/src/cupti.c).
 *
 * usage: sim_host INJECT.so|none MODE
 *   plain   10 launches, a copy, a synchronize
 *   scene   the same, and 5 launches on a second thread; prints CLOCK_MONOTONIC
 *           before and after ("clock before N", "clock after N") and the
 *           threads' Linux ids ("main tid N", "worker tid N")
 *   probe   CUDA initialized, then what the client left subscribed and enabled:
 *           "subscribed S kinds K callbacks C" (gpusim_cupti_state of the
 *           simulated libcupti named by GPUPERF_CUPTI_PATH)
 *   fatal   10 launches and a synchronize, then 5 more launches (with
 *           GPUSIM_CUPTI_FATAL_AFTER=10 CUPTI stops itself in between)
 *   kill    100 launches and a synchronize, then 1.5 s later SIGKILL
 *   takeover  100 launches (_Z6kernelPfi); 0.5 s later a second CUPTI client in
 *           the program (as torch.profiler's Kineto) subscribes (printed:
 *           "second subscribe N"), registers its buffers and clock and enables
 *           kernel records; 20 launches (_Z6duringv), a forced flush, the kinds
 *           disabled, 30 launches (_Z5afterv); "second client got N bytes".
 *           HOST_TAKEOVER=clock: the client only registers its own clock (raw
 *           ticks, not ns) before the 20 launches.
 *   long    10 launches; a kernel of 400 ms (_Z4longv, 400000000 blocks of 256
 *           threads: 400,001,000 ns in the cost model) on a stream of its own, 5
 *           launches (_Z6behindv) on another; 0.6 s later, with the long one
 *           done, another long kernel (_Z7runningv), still running at exit.
 *           At exit, after the injection library's exit handler, prints the
 *           client's flushes and disabled kinds ("cupti events ...",
 *           gpusim_cupti_events of the simulated libcupti).
 *   oom     100 launches (_Z6kernelPfi); then 200000 (_Z6squeezev) from 8
 *           threads at once while malloc refuses blocks of 128 KiB and more
 *           (HOST_REFUSE_BYTES: another size; HOST_REFUSE_BELOW: and less
 *           than that), as when the address space is full; prints "oom
 *           launches done"
 * Programs that are hard on their threads (each prints what it did):
 *   small-stacks  8 threads with 16 KiB stacks, 10 launches each
 *   altstack      5 launches from a signal handler on an 8 KiB sigaltstack
 *   altstack-warm the same after one launch on the thread's own stack (the
 *                 thread's capture state then exists, so the handler's
 *                 launches capture on the alternate stack)
 *   main-stack-growth  the main thread launches from ever deeper frames, 500 KiB
 *                 down, past the 128 KiB the kernel maps at exec (steps of 712
 *                 bytes: every offset within a page), each deeper than before
 *   signal-stack  a timer signal interrupts a loop in interrupted_spin; its
 *                 handler launches, on the thread's stack, then on a sigaltstack
 *   stacks-off    4 launches (_Z6kernelPfi), then with the injection library's
 *                 gpuperf_bench_stacks_off set (a benchmark's switch) 3 launches
 *                 (_Z5afterv), then with it cleared 2 launches (_Z5earlyv);
 *                 prints "stacks-off switch found"
 *   dlopen LIB    a launch, then LIB loaded (late_launch.c) and 3 launches
 *                 called back from its late_call
 *   cancel N      N threads launching in a loop, each cancelled (default 2000)
 *   graph-instantiate N  a graph of HOST_GRAPH_NODES kernel nodes (default 50,
 *                 added with cudaGraphAddKernelNode), instantiated N times, each
 *                 instantiated graph destroyed after; prints "instantiated N" and
 *                 the peak resident set ("maxrss_kb K"); address space capped at
 *                 2 GiB
 plumbing  "clock before N", "main tid N", the thread id type and enabled
           callbacks of the simulated CUPTI ("thread id type T", "enabled
           launch=L graph=G ..."), the scene's launches, a graph of 3 kernel
           nodes (_Z5afterv) launched, a cuLaunchKernel (_Z6duringv), a copy of
           1 MiB to the host, 4 KiB from device 0 to device 1, a launch on a
           stream of device 1, that stream synchronized and then device 1,
           cudaGetLastError; "clock after N"
 signal-malloc N  N signals to a thread that mallocs, frees and launches; the
           handler launches (_Z7handlerv), landing in malloc; from the N/2th on
           also inside launches, where it makes a launch that fails at once;
           prints "signals handled H launches L" (L: every launch made)
 CUPTI's lock (run with GPUSIM_CUPTI_WORKER_US, GPUSIM_CUPTI_LOCKED_HOOK):
 *   stress MS     MS ms of launches on three threads, while a fourth launches on
 *                 device 1 and resets it (every HOST_TEARDOWN_US, default 500);
 *                 prints "stress launches N"
 *   sigint-in-call  10 launches (_Z6kernelPfi), "launched 10", then an 11th
 *                 (_Z6duringv) inside which SIGINT is raised while CUPTI holds its
 *                 lock (GPUSIM_CUPTI_LOCKED_HOOK=sim_host_locked_hook), the call
 *                 returning 200 ms later; without a CUPTI client, raised right
 *                 after the call; prints "survived" only if SIGINT is ignored
 *   abort-in-call  10 launches, "launched 10", then an 11th (_Z6duringv) inside
 *                 which `abort` is called while CUPTI holds its lock (the same
 *                 hook); without a CUPTI client, called right after the call
 * HOST_LATE_LAUNCHES=1 registers, before CUDA starts, an exit handler that makes 5
 * launches (_Z4latev): it runs after the injection library's.
 * HOST_INIT_TWICE=1 calls InitializeInjection again once CUDA is initialized, as
 * a second injection would, and prints "host: second init returned N".
 * Exit status 3 when the program ran to its end; it prints the same with or
 * without the injection library. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#define CHECK(call)                                                                    \
    do {                                                                               \
        cudaError_t e_ = (call);                                                       \
        if (e_ != cudaSuccess) {                                                       \
            fprintf(stderr, "sim_host: %s: %s\n", #call, cudaGetErrorString(e_));      \
            exit(4);                                                                   \
        }                                                                              \
    } while (0)

/* nvcc's registration, done by hand: a host stub names a device function. */
void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFunction(void **h, const char *hostFun, char *deviceFun, const char *deviceName,
                            int thread_limit, void *tid, void *bid, void *bDim, void *gDim, int *wSize);
/* Host stubs: each a distinct function, one per kernel name. */
#define STUB(name, n) \
    __attribute__((noinline)) static void name(void) { __asm__ volatile("" ::"r"(n)); }
STUB(kernel_stub, 1)
STUB(after_stub, 2)
STUB(worker_stub, 3)
STUB(small_stub, 4)
STUB(growth_stub, 5)
STUB(handler_stub, 6)
STUB(early_stub, 7)
STUB(late_stub, 8)
STUB(cancelled_stub, 9)
STUB(during_stub, 10)
STUB(long_stub, 11)
STUB(behind_stub, 12)
STUB(running_stub, 13)
STUB(squeeze_stub, 14)

static unsigned long long now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

static void launch(const void *stub) {
    dim3 g = {4, 1, 1}, b = {32, 1, 1};
    CHECK(cudaLaunchKernel(stub, g, b, NULL, 0, 0));
}

static void *worker(void *arg) {
    (void)arg;
    printf("worker tid %d\n", gettid());
    for (int i = 0; i < 5; i++)
        launch((const void *)worker_stub);
    return NULL;
}

static void late_launches(void) {
    for (int i = 0; i < 5; i++)
        launch((const void *)late_stub);
}

static int probe(void) {
    const char *path = getenv("GPUPERF_CUPTI_PATH");
    void *cupti = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
    void (*state)(int *, int *, int *) =
        cupti ? (void (*)(int *, int *, int *))dlsym(cupti, "gpusim_cupti_state") : NULL;
    if (!state) {
        fprintf(stderr, "sim_host: no simulated libcupti loaded\n");
        return 5;
    }
    int s = 0, k = 0, c = 0;
    state(&s, &k, &c);
    printf("subscribed %d kinds %d callbacks %d\n", s, k, c);
    return 3;
}

/* ---- hostile threads: small stacks, signal stacks, cancellation ---- */

static atomic_uint launched;

static void *small_stack_launcher(void *arg) {
    (void)arg;
    for (int i = 0; i < 10; i++) {
        launch((const void *)small_stub);
        launched++;
    }
    return NULL;
}

/* glibc carves its thread descriptor and static TLS out of these 16 KiB. */
static int small_stacks(void) {
    pthread_attr_t a;
    pthread_attr_init(&a);
    if (pthread_attr_setstacksize(&a, 16 << 10) != 0)
        return 90;
    for (int i = 0; i < 8; i++) {
        pthread_t t;
        if (pthread_create(&t, &a, small_stack_launcher, NULL) != 0)
            return 91;
        pthread_join(t, NULL);
    }
    printf("small stack launches %u\n", (unsigned)launched);
    return 3;
}

/* The kernel grows the main thread's stack mapping page by page, as it is
 * touched: a launch from a frame deeper than any before finds the mapping's
 * low end just below it, though the stack may grow far beyond. */
static unsigned main_stack_growth(unsigned level) {
    volatile char pad[712];
    pad[0] = (char)level;
    launch((const void *)growth_stub);
    unsigned n = 1;
    if (level < 640)
        n += main_stack_growth(level + 1);
    return n + (unsigned)pad[0] * 0;
}

static void launch_handler(int sig) {
    (void)sig;
    launch((const void *)handler_stub);
    launched++;
}

/* 8 KiB of alternate signal stack above a PROT_NONE page, so that overflowing it
 * faults instead of writing over whatever lies below. */
static int alt_stack(int warm) {
    if (warm)
        launch((const void *)handler_stub);
    size_t page = (size_t)sysconf(_SC_PAGESIZE), size = 8 << 10;
    char *m = mmap(NULL, page + size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED || mprotect(m, page, PROT_NONE) != 0)
        return 90;
    stack_t ss = {.ss_sp = m + page, .ss_size = size, .ss_flags = 0};
    if (sigaltstack(&ss, NULL) != 0)
        return 91;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = launch_handler;
    sa.sa_flags = SA_ONSTACK;
    sigaction(SIGUSR1, &sa, NULL);
    for (int i = 0; i < 5; i++)
        raise(SIGUSR1);
    /* The pages were zero: the lowest byte written is how deep the handlers went. */
    size_t untouched = 0;
    while (untouched < size && m[page + untouched] == 0)
        untouched++;
    printf("altstack launches %u\n", (unsigned)launched + (warm ? 1 : 0));
    printf("altstack deepest use %zu bytes\n", size - untouched);
    return 3;
}

static volatile sig_atomic_t spin_done;
volatile unsigned long spin_count;

static void timer_launch_handler(int sig) {
    (void)sig;
    launch((const void *)handler_stub);
    launched++;
    spin_done = 1;
}

/* The code the signal interrupts: a loop only the handler ends. */
__attribute__((noinline)) void interrupted_spin(void) {
    while (!spin_done)
        spin_count++;
}

__attribute__((noinline)) static int signal_stack(void) {
    static char alt[64 << 10];
    stack_t ss = {.ss_sp = alt, .ss_size = sizeof alt, .ss_flags = 0};
    if (sigaltstack(&ss, NULL) != 0)
        return 91;
    for (int on_alt = 0; on_alt < 2; on_alt++) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = timer_launch_handler;
        sa.sa_flags = on_alt ? SA_ONSTACK : 0;
        sigaction(SIGALRM, &sa, NULL);
        spin_done = 0;
        struct itimerval t = {{0, 0}, {0, 2000}};
        setitimer(ITIMER_REAL, &t, NULL);
        interrupted_spin();
    }
    printf("signal launches %u\n", (unsigned)launched);
    return 3;
}

static void late_launch(void) {
    launch((const void *)late_stub);
    launched++;
}

static int dlopen_launch(const char *lib) {
    launch((const void *)early_stub);
    launched++;
    void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!h) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 92;
    }
    void (*call)(void (*)(void)) = (void (*)(void (*)(void)))dlsym(h, "late_call");
    if (!call)
        return 93;
    for (int i = 0; i < 3; i++)
        call(late_launch);
    printf("dlopen launches %u\n", (unsigned)launched);
    return 3;
}

static int stacks_off(const char *inject) {
    void *lib = dlopen(inject, RTLD_NOW | RTLD_NOLOAD);
    volatile _Bool *off = lib ? (volatile _Bool *)dlsym(lib, "gpuperf_bench_stacks_off") : NULL;
    if (!off)
        return 94;
    printf("stacks-off switch found\n");
    for (int i = 0; i < 4; i++)
        launch((const void *)kernel_stub);
    *off = 1;
    for (int i = 0; i < 3; i++)
        launch((const void *)after_stub);
    *off = 0;
    for (int i = 0; i < 2; i++)
        launch((const void *)early_stub);
    CHECK(cudaDeviceSynchronize());
    return 3;
}

static void *cancelled_launcher(void *arg) {
    (void)arg;
    for (;;) {
        launch((const void *)cancelled_stub);
        pthread_testcancel();
    }
    return NULL;
}

/* Batches of threads, each cancelled at once: the cancellation is pending when the
 * thread makes its first launch, so it acts at the first cancellation point. */
static int cancel_threads(long n) {
    enum { BATCH = 25 };
    pthread_t t[BATCH];
    for (long done = 0; done < n; done += BATCH) {
        for (int i = 0; i < BATCH; i++)
            if (pthread_create(&t[i], NULL, cancelled_launcher, NULL) != 0)
                return 91;
        for (int i = 0; i < BATCH; i++)
            pthread_cancel(t[i]);
        for (int i = 0; i < BATCH; i++) {
            void *r;
            pthread_join(t[i], &r);
            if (r != PTHREAD_CANCELED)
                return 92;
        }
    }
    printf("cancelled %ld threads\n", n);
    return 3;
}

/* ---- a second CUPTI client, as Kineto sets itself up and tears down ---- */

static atomic_size_t second_bytes;
static void second_cb(void *ud, int d, int id, const void *data) {
    (void)ud, (void)d, (void)id, (void)data;
}
static void second_request(uint8_t **b, size_t *size, size_t *max) {
    *b = aligned_alloc(8, 1 << 16);
    *size = 1 << 16;
    *max = 0;
}
static void second_complete(void *ctx, uint32_t s, uint8_t *b, size_t size, size_t valid) {
    (void)ctx, (void)s, (void)size;
    second_bytes += valid;
    free(b);
}
static uint64_t tsc(void) { return now() * 3 + 12345; } /* raw ticks, not ns */

static int takeover(void) {
    const char *path = getenv("GPUPERF_CUPTI_PATH");
    void *cupti = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
    if (!cupti)
        return 5;
    int (*c_subscribe)(void **, void *, void *) = (int (*)(void **, void *, void *))dlsym(cupti, "cuptiSubscribe");
    int (*c_register)(void *, void *) = (int (*)(void *, void *))dlsym(cupti, "cuptiActivityRegisterCallbacks");
    int (*c_clock)(uint64_t (*)(void)) = (int (*)(uint64_t (*)(void)))dlsym(cupti, "cuptiActivityRegisterTimestampCallback");
    int (*c_enable)(int) = (int (*)(int))dlsym(cupti, "cuptiActivityEnable");
    int (*c_disable)(int) = (int (*)(int))dlsym(cupti, "cuptiActivityDisable");
    int (*c_flush)(uint32_t) = (int (*)(uint32_t))dlsym(cupti, "cuptiActivityFlushAll");
    if (!c_subscribe || !c_register || !c_clock || !c_enable || !c_disable || !c_flush)
        return 6;
    for (int i = 0; i < 100; i++)
        launch((const void *)kernel_stub);
    CHECK(cudaDeviceSynchronize());
    usleep(500 * 1000); /* ten flush periods: the first client has them */
    void *h = NULL;
    /* Kineto goes on whatever this returns. */
    printf("second subscribe %d\n", c_subscribe(&h, (void *)second_cb, NULL));
    const char *how = getenv("HOST_TAKEOVER");
    if (how && strcmp(how, "clock") == 0) {
        c_clock(tsc);
        for (int i = 0; i < 20; i++)
            launch((const void *)during_stub);
        usleep(300 * 1000); /* the kernels end meanwhile */
        return 3;
    }
    c_register((void *)second_request, (void *)second_complete);
    c_clock(tsc);
    c_enable(10); /* CONCURRENT_KERNEL */
    for (int i = 0; i < 20; i++)
        launch((const void *)during_stub);
    CHECK(cudaDeviceSynchronize());
    c_flush(1);
    int kinds[] = {10, 1, 2, 38}; /* kernel, memcpy, memset, sync */
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
        c_disable(kinds[i]);
    for (int i = 0; i < 30; i++)
        launch((const void *)after_stub);
    CHECK(cudaDeviceSynchronize());
    printf("second client got %zu bytes\n", (size_t)second_bytes);
    return 3;
}

/* ---- a kernel running across flush periods, and one running at exit ---- */

static void print_events(void) {
    const char *path = getenv("GPUPERF_CUPTI_PATH");
    void *cupti = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
    const char *(*events)(void) = cupti ? (const char *(*)(void))dlsym(cupti, "gpusim_cupti_events") : NULL;
    printf("cupti events %s\n", events ? events() : "?");
    fflush(stdout);
}

static void launch_on(const void *stub, unsigned grid, cudaStream_t s) {
    dim3 g = {grid, 1, 1}, b = {256, 1, 1};
    CHECK(cudaLaunchKernel(stub, g, b, NULL, 0, s));
}

static int long_kernel(void) {
    for (int i = 0; i < 10; i++)
        launch((const void *)kernel_stub);
    CHECK(cudaDeviceSynchronize());
    cudaStream_t a, b;
    CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    launch_on((const void *)long_stub, 400000000u, a);
    for (int i = 0; i < 5; i++)
        launch_on((const void *)behind_stub, 1, b);
    usleep(600 * 1000); /* about twelve flush periods of 50 ms */
    CHECK(cudaStreamSynchronize(a));
    CHECK(cudaStreamSynchronize(b));
    /* Still running when the program ends. */
    launch_on((const void *)running_stub, 400000000u, a);
    return 3;
}

/* ---- out of memory ---- */

/* While set, malloc refuses blocks of 128 KiB and more (HOST_REFUSE_BYTES:
 * another size), as it would when the address space is full; smaller ones
 * still come from memory already mapped. With HOST_REFUSE_BELOW, only blocks
 * smaller than that are refused too: a new thread's thread-local data of the
 * libraries loaded with dlopen (glibc allocates it at the thread's first
 * access, and aborts the process when it cannot; the simulated CUPTI has 4
 * KiB) can be let through while what gpuperf allocates is refused. The
 * executable's malloc interposes on everyone's, the injection library's too. */
static atomic_int refuse_large;
static size_t refuse_bytes = 128 << 10;
static size_t refuse_below = (size_t)-1;
extern void *__libc_malloc(size_t);
void *malloc(size_t n) {
    if (refuse_large && n >= refuse_bytes && n < refuse_below)
        return NULL;
    return __libc_malloc(n);
}

enum { OOM_THREADS = 8 };

static void *squeeze_launcher(void *arg) {
    (void)arg;
    for (int i = 0; i < 200000 / OOM_THREADS; i++)
        launch((const void *)squeeze_stub);
    return NULL;
}

static int out_of_memory(void) {
    const char *refuse = getenv("HOST_REFUSE_BYTES");
    if (refuse)
        refuse_bytes = strtoul(refuse, NULL, 10);
    const char *below = getenv("HOST_REFUSE_BELOW");
    if (below)
        refuse_below = strtoul(below, NULL, 10);
    for (int i = 0; i < 100; i++)
        launch((const void *)kernel_stub);
    CHECK(cudaDeviceSynchronize());
    usleep(100 * 1000);
    refuse_large = 1;
    /* More buffers at once than the library allocates ahead of requests (4
     * MiB each, about 19 000 kernel records): CUPTI fills one per launching
     * thread, and a buffer given back is reused, so one thread would never
     * need a fresh one. */
    pthread_t t[OOM_THREADS];
    for (int i = 0; i < OOM_THREADS; i++)
        if (pthread_create(&t[i], NULL, squeeze_launcher, NULL) != 0)
            return 96;
    for (int i = 0; i < OOM_THREADS; i++)
        pthread_join(t[i], NULL);
    CHECK(cudaDeviceSynchronize());
    usleep(100 * 1000);
    refuse_large = 0;
    printf("oom launches done\n");
    return 3;
}

static int graph_instantiate(long n) {
    /* Memory that grows with instantiations must fail here, not exhaust the machine. */
    struct rlimit as = {2UL << 30, 2UL << 30};
    if (setrlimit(RLIMIT_AS, &as) != 0)
        return 95;
    const char *e = getenv("HOST_GRAPH_NODES");
    long nodes = e ? atol(e) : 50;
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    void *args[] = {NULL};
    struct cudaKernelNodeParams p = {
        .func = (void *)kernel_stub,
        .gridDim = {1, 1, 1},
        .blockDim = {32, 1, 1},
        .kernelParams = args,
    };
    for (long i = 0; i < nodes; i++) {
        cudaGraphNode_t node;
        CHECK(cudaGraphAddKernelNode(&node, g, NULL, 0, &p));
    }
    for (long k = 0; k < n; k++) {
        cudaGraphExec_t x;
        CHECK(cudaGraphInstantiate(&x, g, 0));
        CHECK(cudaGraphExecDestroy(x));
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("instantiated %ld\nmaxrss_kb %ld\n", n, ru.ru_maxrss);
    return 3;
}

/* ---- CUPTI's lock: stress, and a signal landing while CUPTI holds it ---- */

static atomic_int stop_stress;
static atomic_uint stress_launches;
static useconds_t teardown_us = 500;

static void *stress_launcher(void *arg) {
    (void)arg;
    while (!atomic_load(&stop_stress)) {
        launch((const void *)kernel_stub);
        atomic_fetch_add(&stress_launches, 1);
        usleep(50);
    }
    return NULL;
}

/* Launches on device 1, each followed by cudaDeviceReset: its context is
 * destroyed (CONTEXT_DESTROY_STARTING), and made again at the next launch
 * (CONTEXT_CREATED). */
static void *stress_reset(void *arg) {
    (void)arg;
    CHECK(cudaSetDevice(1));
    while (!atomic_load(&stop_stress)) {
        launch((const void *)worker_stub);
        atomic_fetch_add(&stress_launches, 1);
        CHECK(cudaDeviceReset());
        usleep(teardown_us);
    }
    return NULL;
}

static int stress(long ms) {
    const char *us = getenv("HOST_TEARDOWN_US");
    if (us)
        teardown_us = (useconds_t)atoi(us);
    pthread_t t[4];
    void *(*fns[4])(void *) = {stress_launcher, stress_launcher, stress_launcher, stress_reset};
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, fns[i], NULL);
    usleep((useconds_t)ms * 1000);
    atomic_store(&stop_stress, 1);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    CHECK(cudaDeviceSynchronize());
    printf("stress launches %u\n", atomic_load(&stress_launches));
    return 3;
}

static atomic_int sigint_armed;
static atomic_int abort_armed;

/* GPUSIM_CUPTI_LOCKED_HOOK: called by the simulated CUPTI at each API call's
 * enter, holding its lock. Armed, it raises SIGINT there, and the call goes
 * on 200 ms later; or it calls `abort`. */
void sim_host_locked_hook(void);
void sim_host_locked_hook(void) {
    if (atomic_exchange(&abort_armed, 0))
        abort();
    if (!atomic_exchange(&sigint_armed, 0))
        return;
    raise(SIGINT);
    usleep(200 * 1000);
}

/* 10 launches, then an 11th during which the locked hook, armed through
 * `armed`, raises SIGINT or calls `abort`; without a CUPTI client the hook
 * never runs, and the same happens right after the call. */
static int signal_in_call(atomic_int *armed, int sig) {
    for (int i = 0; i < 10; i++)
        launch((const void *)kernel_stub);
    printf("launched 10\n");
    fflush(stdout);
    atomic_store(armed, 1);
    launch((const void *)during_stub);
    if (atomic_exchange(armed, 0)) {
        if (sig == SIGABRT)
            abort();
        raise(sig);
    }
    printf("survived\n");
    return 3;
}

/* ---- plumbing: every kind of call the recorder links to its GPU work ---- */

enum { DRV_DOMAIN = 1, RT_DOMAIN = 2 }; /* CUpti_CallbackDomain */

/* A graph of 3 kernel nodes (_Z5afterv), instantiated and launched. */
static void graph_launch(void) {
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    void *args[] = {NULL};
    struct cudaKernelNodeParams p = {
        .func = (void *)after_stub, .gridDim = {1, 1, 1}, .blockDim = {32, 1, 1}, .kernelParams = args};
    cudaGraphNode_t prev = NULL;
    for (int i = 0; i < 3; i++) {
        cudaGraphNode_t n;
        CHECK(cudaGraphAddKernelNode(&n, g, prev ? &prev : NULL, prev ? 1 : 0, &p));
        prev = n;
    }
    cudaGraphExec_t x;
    CHECK(cudaGraphInstantiate(&x, g, 0));
    CHECK(cudaGraphLaunch(x, 0));
    CHECK(cudaDeviceSynchronize());
}

/* The program's own driver call: cuLaunchKernel of _Z6duringv. */
static void driver_launch(void) {
    typedef int (*cu_launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             void *, void **, void **);
    cu_launch f = (cu_launch)dlsym(RTLD_DEFAULT, "cuLaunchKernel");
    cudaKernel_t k;
    CHECK(cudaGetKernel(&k, (const void *)during_stub));
    if (!f || f((void *)k, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL) != 0) {
        fprintf(stderr, "sim_host: cuLaunchKernel failed\n");
        exit(4);
    }
}

static int plumbing(void) {
    const char *path = getenv("GPUPERF_CUPTI_PATH");
    void *cupti = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
    int (*tid_type)(int *) = cupti ? (int (*)(int *))dlsym(cupti, "cuptiGetThreadIdType") : NULL;
    int (*on)(int, int) = cupti ? (int (*)(int, int))dlsym(cupti, "gpusim_cupti_callback_enabled") : NULL;
    int type = -1;
    if (tid_type)
        tid_type(&type);
    printf("thread id type %d\n", type);
    if (on)
        printf("enabled launch=%d graph=%d memcpy=%d sync=%d culaunch=%d getlasterror=%d ctxgetcurrent=%d\n",
               on(RT_DOMAIN, 211), on(RT_DOMAIN, 311), on(RT_DOMAIN, 31), on(RT_DOMAIN, 165),
               on(DRV_DOMAIN, 307), on(RT_DOMAIN, 3), on(DRV_DOMAIN, 304));
    for (int i = 0; i < 10; i++)
        launch((const void *)kernel_stub);
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    pthread_join(t, NULL);
    graph_launch();
    driver_launch();
    /* A copy to the host, and one from device 0 to device 1. */
    static char host[1 << 20];
    void *d0 = NULL, *d1 = NULL;
    CHECK(cudaMalloc(&d0, sizeof host));
    CHECK(cudaMemcpy(host, d0, sizeof host, cudaMemcpyDeviceToHost));
    CHECK(cudaSetDevice(1));
    CHECK(cudaMalloc(&d1, 4096));
    CHECK(cudaSetDevice(0));
    CHECK(cudaMemcpyPeer(d1, 1, d0, 0, 4096));
    /* Syncs on device 1: a stream, then the whole device. */
    CHECK(cudaSetDevice(1));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    dim3 g = {4, 1, 1}, b = {32, 1, 1};
    CHECK(cudaLaunchKernel((const void *)kernel_stub, g, b, NULL, 0, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaSetDevice(0));
    /* Never recorded: its callback is never enabled. */
    (void)cudaGetLastError();
    CHECK(cudaDeviceSynchronize());
    printf("clock after %llu\n", now());
    return 3;
}

/* ---- a signal handler that launches, inside malloc and inside launches ---- */

/* Never registered: a launch of it fails at once (cudaErrorInvalidDeviceFunction),
 * its API callbacks made, without taking any lock of the simulation. */
__attribute__((noinline)) static void unregistered_stub(void) { __asm__ volatile("" ::"r"(99)); }

static atomic_uint handled, made_launches;
static atomic_int reentrant_phase, stop_malloc;

/* The handler launches from one of many call depths, so that most of its stacks
 * are new to the recorder. First phase: the interrupted thread blocks the signal
 * around its own launches, so the handler lands in malloc or free (or the loop)
 * and makes whole launches, GPU records included. Second phase: the thread
 * launches unblocked, so the handler also lands inside launches, and makes only
 * an API call that fails at once (the simulation's launch takes locks the
 * interrupted launch may hold: CUDA is not async-signal-safe either; what is
 * tested is that gpuperf adds no hang). */
static __attribute__((noinline)) void launch_at_depth(int n) {
    if (n > 0) {
        launch_at_depth(n - 1);
        __asm__ volatile("" ::: "memory"); /* not a tail call */
        return;
    }
    atomic_fetch_add(&made_launches, 1);
    dim3 g = {4, 1, 1}, b = {32, 1, 1};
    if (!atomic_load(&reentrant_phase))
        CHECK(cudaLaunchKernel((const void *)handler_stub, g, b, NULL, 0, 0));
    else
        (void)cudaLaunchKernel((const void *)unregistered_stub, g, b, NULL, 0, 0);
}

static void depth_handler(int sig) {
    (void)sig;
    launch_at_depth((int)(atomic_fetch_add(&handled, 1) % 97));
}

static void *malloc_and_launch(void *arg) {
    (void)arg;
    sigset_t usr2;
    sigemptyset(&usr2);
    sigaddset(&usr2, SIGUSR2);
    for (unsigned i = 0; !atomic_load(&stop_malloc); i++) {
        /* Past the per-thread caches: these take the arena lock. */
        void *p = malloc(2048 + (i % 64) * 512);
        free(p);
        if (i % 16 == 0) {
            int masked = !atomic_load(&reentrant_phase);
            if (masked)
                pthread_sigmask(SIG_BLOCK, &usr2, NULL);
            atomic_fetch_add(&made_launches, 1);
            launch((const void *)kernel_stub);
            if (masked)
                pthread_sigmask(SIG_UNBLOCK, &usr2, NULL);
        }
    }
    return NULL;
}

static int signal_in_malloc(long signals) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = depth_handler;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR2, &sa, NULL);
    pthread_t t;
    if (pthread_create(&t, NULL, malloc_and_launch, NULL) != 0)
        return 91;
    for (long i = 0; i < signals; i++) {
        if (i == signals / 2)
            atomic_store(&reentrant_phase, 1);
        pthread_kill(t, SIGUSR2);
        usleep(200);
    }
    atomic_store(&stop_malloc, 1);
    pthread_join(t, NULL);
    CHECK(cudaDeviceSynchronize());
    printf("signals handled %u launches %u\n", atomic_load(&handled), atomic_load(&made_launches));
    return 3;
}

/* The modes above, or -1 for another mode. */
static int lock_modes(const char *m, int argc, char **argv) {
    if (strcmp(m, "plumbing") == 0)
        return plumbing();
    if (strcmp(m, "signal-malloc") == 0)
        return signal_in_malloc(argc > 3 ? atol(argv[3]) : 2000);
    if (strcmp(m, "stress") == 0)
        return stress(argc > 3 ? atol(argv[3]) : 3000);
    if (strcmp(m, "sigint-in-call") == 0)
        return signal_in_call(&sigint_armed, SIGINT);
    if (strcmp(m, "abort-in-call") == 0)
        return signal_in_call(&abort_armed, SIGABRT);
    return -1;
}

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    if (strcmp(argv[1], "none") != 0)
        setenv("CUDA_INJECTION64_PATH", argv[1], 1);
    else
        unsetenv("CUDA_INJECTION64_PATH");
    static int image;
    void **h = __cudaRegisterFatBinary(&image);
    __cudaRegisterFunction(h, (const char *)kernel_stub, "_Z6kernelPfi", "_Z6kernelPfi", -1, 0, 0, 0, 0, 0);
    __cudaRegisterFunction(h, (const char *)after_stub, "_Z5afterv", "_Z5afterv", -1, 0, 0, 0, 0, 0);
    __cudaRegisterFunction(h, (const char *)worker_stub, "_Z6workerv", "_Z6workerv", -1, 0, 0, 0, 0, 0);
    __cudaRegisterFunction(h, (const char *)small_stub, "_Z5smallv", "_Z5smallv", -1, 0, 0, 0, 0, 0);
    __cudaRegisterFunction(h, (const char *)growth_stub, "_Z6growthv", "_Z6growthv", -1, 0, 0, 0, 0, 0);
    __cudaRegisterFunction(h, (const char *)handler_stub, "_Z7handlerv", "_Z7handlerv", -1, 0, 0, 0, 0, 0);
    __cudaRegisterFunction(h, (const char *)early_stub, "_Z5earlyv", "_Z5earlyv", -1, 0, 0, 0, 0, 0);
    __cudaRegisterFunction(h, (const char *)late_stub, "_Z4latev", "_Z4latev", -1, 0, 0, 0, 0, 0);
    __cudaRegisterFunction(h, (const char *)long_stub, "_Z4longv", "_Z4longv", -1, 0, 0, 0, 0, 0);
    __cudaRegisterFunction(h, (const char *)behind_stub, "_Z6behindv", "_Z6behindv", -1, 0, 0, 0, 0, 0);
    __cudaRegisterFunction(h, (const char *)running_stub, "_Z7runningv", "_Z7runningv", -1, 0, 0, 0, 0, 0);
    __cudaRegisterFunction(h, (const char *)squeeze_stub, "_Z6squeezev", "_Z6squeezev", -1, 0, 0, 0, 0, 0);
    __cudaRegisterFunction(h, (const char *)during_stub, "_Z6duringv", "_Z6duringv", -1, 0, 0, 0, 0, 0);
    __cudaRegisterFunction(h, (const char *)cancelled_stub, "_Z9cancelledv", "_Z9cancelledv", -1, 0, 0, 0, 0,
                           0);
    int scene = strcmp(argv[2], "scene") == 0;
    /* A test run started in the background by a non-interactive shell inherits
     * SIGINT ignored; the signal modes are about default actions. */
    signal(SIGINT, SIG_DFL);
    printf("host: start\n");
    if (getenv("HOST_LATE_LAUNCHES"))
        atexit(late_launches);
    /* Registered before CUDA starts: runs after the injection library's. */
    if (strcmp(argv[2], "long") == 0)
        atexit(print_events);
    if (scene || strcmp(argv[2], "plumbing") == 0)
        printf("clock before %llu\nmain tid %d\n", now(), gettid());
    CHECK(cudaFree(0));
    if (getenv("HOST_INIT_TWICE") && strcmp(argv[1], "none") != 0) {
        void *inj = dlopen(argv[1], RTLD_NOW | RTLD_NOLOAD);
        int (*init)(void) = inj ? (int (*)(void))dlsym(inj, "InitializeInjection") : NULL;
        printf("host: second init returned %d\n", init ? init() : -1);
    }
    if (strcmp(argv[2], "probe") == 0)
        return probe();
    const char *m = argv[2];
    if (strcmp(m, "takeover") == 0)
        return takeover();
    if (strcmp(m, "long") == 0)
        return long_kernel();
    if (strcmp(m, "oom") == 0)
        return out_of_memory();
    if (strcmp(m, "small-stacks") == 0)
        return small_stacks();
    if (strcmp(m, "altstack") == 0)
        return alt_stack(0);
    if (strcmp(m, "altstack-warm") == 0)
        return alt_stack(1);
    if (strcmp(m, "main-stack-growth") == 0) {
        printf("main stack launches %u\n", main_stack_growth(0));
        return 3;
    }
    if (strcmp(m, "signal-stack") == 0)
        return signal_stack();
    if (strcmp(m, "stacks-off") == 0)
        return stacks_off(argv[1]);
    if (strcmp(m, "dlopen") == 0)
        return dlopen_launch(argc > 3 ? argv[3] : NULL);
    if (strcmp(m, "graph-instantiate") == 0)
        return graph_instantiate(argc > 3 ? atol(argv[3]) : 200);
    if (strcmp(m, "cancel") == 0)
        return cancel_threads(argc > 3 ? atol(argv[3]) : 2000);
    int r = lock_modes(m, argc, argv);
    if (r >= 0)
        return r;
    if (strcmp(argv[2], "kill") == 0) {
        for (int i = 0; i < 100; i++)
            launch((const void *)kernel_stub);
        CHECK(cudaDeviceSynchronize());
        usleep(1500 * 1000);
        printf("host: killing myself\n");
        fflush(stdout);
        raise(SIGKILL);
    }
    for (int i = 0; i < 10; i++)
        launch((const void *)kernel_stub);
    CHECK(cudaDeviceSynchronize());
    if (strcmp(argv[2], "fatal") == 0) {
        for (int i = 0; i < 5; i++)
            launch((const void *)after_stub);
        CHECK(cudaDeviceSynchronize());
    } else {
        float *d = NULL, host[256] = {0};
        CHECK(cudaMalloc((void **)&d, sizeof host));
        CHECK(cudaMemcpy(d, host, sizeof host, cudaMemcpyHostToDevice));
        CHECK(cudaFree(d));
    }
    if (scene) {
        pthread_t t;
        pthread_create(&t, NULL, worker, NULL);
        pthread_join(t, NULL);
        CHECK(cudaDeviceSynchronize());
        printf("clock after %llu\n", now());
    }
    printf("host: done\n");
    return 3;
}
