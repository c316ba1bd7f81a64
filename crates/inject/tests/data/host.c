/* A stand-in for a CUDA application: it loads the injection library the way the
 * CUDA driver does (dlopen + InitializeInjection), then, in "mock" modes, plays
 * API calls and GPU records through the MOCK libcupti named by MOCK_CUPTI_CONTROL
 * or GPUPERF_CUPTI_PATH.
 *
 * usage: host INJECT.so|none MODE [N]
 *   plain        nothing else
 *   mock         launches, a graph, copies, syncs on several contexts
 *   mock-bench   N launches, timed
 *   mock-stress  N ms of launches, context teardowns and device resets on threads
 *                (every HOST_TEARDOWN_US, default 500)
 *   mock-altstack  launches from a signal handler running on an 8 KiB sigaltstack
 *   mock-graph-instantiate  N instantiations of a graph (HOST_GRAPH_NODES, default 50
 *                nodes), each destroyed after; prints ns_per_instantiation (wall),
 *                cpu_ns_per_instantiation (the thread's CPU time) and the peak
 *                resident set (maxrss_kb); address space capped at 2 GiB
 *   mock-sigint-in-call  10 launches, then SIGINT raised inside an 11th, while
 *                the mock holds the lock its flush takes; the 11th's kernel
 *                runs and the call returns 200 ms later; survives only if
 *                SIGINT is ignored
 *   mock-signal-malloc  a signal handler that launches, landing inside malloc,
 *                then also inside launches of the interrupted thread
 * The executable exports cuDriverGetVersion, answering MOCK_DRIVER_VERSION. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static uint64_t now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* What libcuda would answer; 3 is CUDA_ERROR_NOT_INITIALIZED. */
int cuDriverGetVersion(int *v) {
    const char *e = getenv("MOCK_DRIVER_VERSION");
    if (!e) return 3;
    *v = atoi(e);
    return 0;
}

static void (*mock_api)(int, int, uint32_t, int);
static void (*mock_kernel)(uint32_t, uint64_t, uint64_t, const char *, uint32_t, uint64_t, uint32_t);
static void (*mock_kernel_begin)(uint32_t, uint64_t, const char *, uint32_t);
static void (*mock_kernel_end)(uint32_t, uint64_t);
static void (*mock_memcpy)(uint32_t, uint32_t, uint64_t, uint64_t, uint64_t);
static void (*mock_peer_copy)(uint32_t, uint64_t, uint64_t, uint64_t, uint32_t, uint32_t);
static void (*mock_sync)(uint32_t, uint32_t, uint32_t, uint64_t, uint64_t);
static void (*mock_bad_record)(void);
static void (*mock_deliver_late)(uint32_t);
static void (*mock_drop)(size_t);
static uint64_t (*mock_now)(void);
static int (*mock_enabled)(int, int);
static int (*mock_thread_id_type)(void);
static void (*mock_context_create)(uint32_t, uint32_t);
static void (*mock_context_destroy)(void);
static void (*mock_fatal)(const char *);
static int (*mock_subscribed)(void);
static int (*mock_kinds_enabled)(void);
static int (*mock_callbacks_enabled)(void);
static const char *(*mock_events)(void);
static size_t (*mock_lost_ends)(void);

enum { DRV = 1, RT = 2 }; /* CUpti_CallbackDomain */
enum { KERNEL_KIND = 10, MEMCPY_KIND = 1, MEMSET_KIND = 2, SYNC_KIND = 38 };
#define NO_STREAM 0xffffffffu

static void launch(int cbid, uint32_t corr, const char *name) {
    mock_api(RT, cbid, corr, 1);
    mock_api(RT, cbid, corr, 0);
    uint64_t t = mock_now();
    if (t == 0) t = now(); /* no injection: no timestamp callback registered */
    mock_kernel(corr, t, t + 1000, name, 0, 0, 7);
}

static void *worker(void *arg) {
    (void)arg;
    printf("worker tid %d\n", gettid());
    for (uint32_t c = 1001; c <= 1050; c++) launch(211, c, "_Z6workerv");
    return NULL;
}


/* ---- stress: every path that meets CUPTI's lock, at once ---- */

static atomic_uint next_corr = 1;
static atomic_int stop_stress;
static useconds_t teardown_us = 500;

static void *stress_launcher(void *arg) {
    (void)arg;
    while (!stop_stress) {
        launch(211, next_corr++, "_Z6stressv");
        usleep(50);
    }
    return NULL;
}
static void *stress_teardown(void *arg) {
    (void)arg;
    while (!stop_stress) {
        mock_context_destroy();
        /* Launches need a context: CUDA makes one again (CONTEXT_CREATED). */
        mock_context_create(1, 0);
        usleep(teardown_us);
    }
    return NULL;
}
static void *stress_reset(void *arg) {
    (void)arg;
    while (!stop_stress) {
        uint32_t c = next_corr++;
        mock_api(RT, 164, c, 1);
        mock_api(RT, 164, c, 0);
        usleep(teardown_us);
    }
    return NULL;
}

static void stress(long ms) {
    const char *us = getenv("HOST_TEARDOWN_US");
    if (us) teardown_us = (useconds_t)atoi(us);
    pthread_t t[5];
    void *(*fns[5])(void *) = {stress_launcher, stress_launcher, stress_launcher,
                               stress_teardown, stress_reset};
    for (int i = 0; i < 5; i++) pthread_create(&t[i], NULL, fns[i], NULL);
    usleep((useconds_t)ms * 1000);
    stop_stress = 1;
    for (int i = 0; i < 5; i++) pthread_join(t[i], NULL);
    printf("stress launches %u\n", (unsigned)next_corr);
}

/* ---- hostile threads: small stacks, signal stacks, cancellation, signals ---- */

static atomic_uint hostile_corr = 100000;

static void launch_handler(int sig) {
    (void)sig;
    launch(211, hostile_corr++, "_Z7handlerv");
}

/* 8 KiB of alternate signal stack above a PROT_NONE page, so that overflowing it
 * faults instead of writing over whatever lies below. */
static int alt_stack(void) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE), size = 8 << 10;
    char *m = mmap(NULL, page + size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED || mprotect(m, page, PROT_NONE) != 0) return 90;
    stack_t ss = {.ss_sp = m + page, .ss_size = size, .ss_flags = 0};
    if (sigaltstack(&ss, NULL) != 0) return 91;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = launch_handler;
    sa.sa_flags = SA_ONSTACK;
    sigaction(SIGUSR1, &sa, NULL);
    for (int i = 0; i < 5; i++) raise(SIGUSR1);
    printf("altstack launches %u\n", hostile_corr - 100000);
    return 3;
}

/* The handler launches from one of many call depths, so that most of its stacks
 * are new to the recorder. First phase: the interrupted thread blocks the signal
 * around its own launches, so the handler lands in malloc or free (or the loop)
 * and makes whole launches, GPU records included. Second phase: the thread
 * launches unblocked, so the handler also lands inside launches, and makes the
 * API call only (the MOCK's GPU records take a lock of its own that the
 * interrupted launch may hold: CUDA is not async-signal-safe either; what is
 * tested is that gpuperf adds no hang). */
static atomic_uint handled;
static atomic_int reentrant_phase;
static __attribute__((noinline)) void launch_at_depth(int n) {
    if (n > 0) {
        launch_at_depth(n - 1);
        __asm__ volatile("" ::: "memory"); /* not a tail call */
        return;
    }
    uint32_t c = hostile_corr++;
    if (!reentrant_phase) {
        launch(211, c, "_Z7handlerv");
        return;
    }
    mock_api(RT, 211, c, 1);
    mock_api(RT, 211, c, 0);
}
static void depth_handler(int sig) {
    (void)sig;
    launch_at_depth((int)(handled++ % 97));
}

static atomic_int stop_malloc;
static void *malloc_and_launch(void *arg) {
    (void)arg;
    sigset_t usr2;
    sigemptyset(&usr2);
    sigaddset(&usr2, SIGUSR2);
    for (unsigned i = 0; !stop_malloc; i++) {
        /* Past the per-thread caches: these take the arena lock. */
        void *p = malloc(2048 + (i % 64) * 512);
        free(p);
        if (i % 16 == 0) {
            int masked = !reentrant_phase;
            if (masked) pthread_sigmask(SIG_BLOCK, &usr2, NULL);
            launch(211, hostile_corr++, "_Z6loopedv");
            if (masked) pthread_sigmask(SIG_UNBLOCK, &usr2, NULL);
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
    if (pthread_create(&t, NULL, malloc_and_launch, NULL) != 0) return 91;
    for (long i = 0; i < signals; i++) {
        if (i == signals / 2) reentrant_phase = 1;
        pthread_kill(t, SIGUSR2);
        usleep(200);
    }
    stop_malloc = 1;
    pthread_join(t, NULL);
    printf("signals handled %u launches %u\n", (unsigned)handled, hostile_corr - 100000);
    return 3;
}

/* SIGINT lands inside a launch, while CUPTI (the mock) holds its buffer lock. */
static int sigint_in_call(void *mock) {
    void (*hold)(int) = (void (*)(int))dlsym(mock, "mock_hold_lock");
    if (!hold) return 94;
    for (uint32_t c = 1; c <= 10; c++) launch(211, c, "_Z6beforev");
    printf("launched 10\n");
    fflush(stdout);
    mock_api(RT, 211, 11, 1);
    hold(1);
    raise(SIGINT);
    hold(0);
    /* The launch's kernel goes on the GPU, and the call returns a while
     * later: the trace must wait for it. */
    uint64_t t = mock_now();
    mock_kernel(11, t, t + 1000, "_Z6duringv", 0, 0, 7);
    usleep(200000);
    mock_api(RT, 211, 11, 0);
    printf("survived\n");
    return 3;
}

/* A graph of 50 nodes added outside any recorded call, instantiated N times as
 * CUPTI reports it (inside cudaGraphInstantiate: each copy made, then cloned
 * from its original), each instantiated graph destroyed after (inside
 * cudaGraphExecDestroy: each copy's teardown). */
static int graph_instantiate(void *mock, long n) {
    void (*created)(uint64_t) = (void (*)(uint64_t))dlsym(mock, "mock_graph_node_created");
    void (*cloned)(uint64_t, uint64_t) = (void (*)(uint64_t, uint64_t))dlsym(mock, "mock_graph_node_cloned");
    void (*destroyed)(uint64_t) = (void (*)(uint64_t))dlsym(mock, "mock_graph_node_destroyed");
    if (!created || !cloned || !destroyed) return 94;
    /* Memory that grows with instantiations must fail here, not exhaust the machine. */
    struct rlimit as = {2UL << 30, 2UL << 30};
    if (setrlimit(RLIMIT_AS, &as) != 0) return 95;
    const char *nodes = getenv("HOST_GRAPH_NODES");
    const uint64_t NODES = nodes ? (uint64_t)atol(nodes) : 50;
    for (uint64_t i = 1; i <= NODES; i++) created(i);
    uint64_t next = 1000000;
    struct timespec c0, c1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    uint64_t t0 = now();
    for (long k = 0; k < n; k++) {
        uint32_t c = hostile_corr++;
        mock_api(RT, 310, c, 1);
        for (uint64_t i = 1; i <= NODES; i++) {
            created(next + i);
            cloned(next + i, i);
        }
        mock_api(RT, 310, c, 0);
        c = hostile_corr++;
        mock_api(RT, 313, c, 1);
        for (uint64_t i = 1; i <= NODES; i++) destroyed(next + i);
        mock_api(RT, 313, c, 0);
        next += NODES;
    }
    double ns = (double)(now() - t0) / (double)n;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    double cpu = ((double)(c1.tv_sec - c0.tv_sec) * 1e9 + (double)(c1.tv_nsec - c0.tv_nsec)) / (double)n;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("instantiated %ld ns_per_instantiation %.1f cpu_ns_per_instantiation %.1f maxrss_kb %ld\n",
           n, ns, cpu, ru.ru_maxrss);
    return 3;
}

#define LOAD(name)                                                    \
    do {                                                              \
        *(void **)&name = dlsym(mock, #name);                         \
        if (!name) { fprintf(stderr, "no %s\n", #name); return 98; }  \
    } while (0)

int main(int argc, char **argv) {
    if (argc < 3) return 97;
    /* A test run started in the background by a non-interactive shell inherits
     * SIGINT ignored; the signal modes are about its default action. */
    signal(SIGINT, SIG_DFL);
    printf("host: start\n");
    fflush(stdout);
    if (strcmp(argv[1], "none") != 0) {
        void *inj = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
        if (!inj) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 99; }
        int (*init)(void) = (int (*)(void))dlsym(inj, "InitializeInjection");
        if (!init) return 96;
        printf("host: init returned %d\n", init());
    } else {
        printf("host: init returned 1\n");
    }
    if (strncmp(argv[2], "mock", 4) == 0) {
        const char *path = getenv("MOCK_CUPTI_CONTROL");
        if (!path) path = getenv("GPUPERF_CUPTI_PATH");
        void *mock = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
        if (!mock) { fprintf(stderr, "dlopen mock: %s\n", dlerror()); return 95; }
        LOAD(mock_api); LOAD(mock_kernel); LOAD(mock_kernel_begin); LOAD(mock_kernel_end);
        LOAD(mock_memcpy); LOAD(mock_peer_copy); LOAD(mock_sync); LOAD(mock_bad_record);
        LOAD(mock_deliver_late); LOAD(mock_drop); LOAD(mock_now); LOAD(mock_enabled);
        LOAD(mock_thread_id_type); LOAD(mock_context_create); LOAD(mock_context_destroy);
        LOAD(mock_fatal); LOAD(mock_subscribed); LOAD(mock_kinds_enabled);
        LOAD(mock_callbacks_enabled); LOAD(mock_events); LOAD(mock_lost_ends);
        printf("clock before %llu\n", (unsigned long long)now());
        printf("main tid %d\n", gettid());
        printf("thread id type %d\n", mock_thread_id_type());
        printf("enabled launch=%d graph=%d memcpy=%d sync=%d culaunch=%d getlasterror=%d ctxgetcurrent=%d\n",
               mock_enabled(RT, 211), mock_enabled(RT, 311), mock_enabled(RT, 31),
               mock_enabled(RT, 165), mock_enabled(DRV, 307), mock_enabled(RT, 3),
               mock_enabled(DRV, 17));
        /* The primary context of device 0, where the kernels below run. */
        mock_context_create(1, 0);
        if (strcmp(argv[2], "mock-bench") == 0) {
            /* What one launch costs the app thread: API enter and exit callbacks
             * plus one kernel record, which a background flush decodes. */
            long n = argc > 3 ? atol(argv[3]) : 1000000;
            uint64_t t0 = now();
            for (long i = 1; i <= n; i++) launch(211, (uint32_t)i, "_Z6kernelPfi");
            uint64_t dt = now() - t0;
            printf("bench launches %ld ns_per_launch %.1f\n", n, (double)dt / (double)n);
            return 0;
        }
        if (strcmp(argv[2], "mock-stress") == 0) {
            stress(argc > 3 ? atol(argv[3]) : 3000);
            return 3;
        }
        if (strcmp(argv[2], "mock-altstack") == 0) return alt_stack();
        if (strcmp(argv[2], "mock-graph-instantiate") == 0)
            return graph_instantiate(mock, argc > 3 ? atol(argv[3]) : 200);
        if (strcmp(argv[2], "mock-sigint-in-call") == 0) return sigint_in_call(mock);
        if (strcmp(argv[2], "mock-signal-malloc") == 0)
            return signal_in_malloc(argc > 3 ? atol(argv[3]) : 2000);
        for (uint32_t c = 1; c <= 100; c++) launch(c % 2 ? 211 : 505, c, "_Z6kernelPfi");
        pthread_t th;
        pthread_create(&th, NULL, worker, NULL);
        pthread_join(th, NULL);
        /* A graph launch: three kernels, one correlation id. */
        mock_api(RT, 311, 2000, 1);
        mock_api(RT, 311, 2000, 0);
        for (uint64_t node = 1; node <= 3; node++) {
            uint64_t t = mock_now();
            mock_kernel(2000, t, t + 500, "_Z10graph_stepv", 7, node, 9);
        }
        /* Each record's times come from one clock reading: C leaves the order in
         * which a call's arguments are evaluated open. */
        uint64_t t;
        /* A runtime launch whose driver call CUPTI also reports. */
        mock_api(RT, 211, 3000, 1);
        mock_api(DRV, 307, 3001, 1);
        mock_api(DRV, 307, 3001, 0);
        mock_api(RT, 211, 3000, 0);
        t = mock_now();
        mock_kernel(3001, t, t + 100, "_Z6nestedv", 0, 0, 7);
        /* A plain driver-API launch. */
        mock_api(DRV, 307, 3500, 1);
        mock_api(DRV, 307, 3500, 0);
        t = mock_now();
        mock_kernel(3500, t, t + 100, "_Z6driverv", 0, 0, 7);
        /* A copy: the runtime call's id differs from the driver's. */
        mock_api(RT, 31, 4000, 1);
        t = mock_now();
        mock_memcpy(4001, 4000, t, t + 2000, 1 << 20);
        mock_api(RT, 31, 4000, 0);
        /* A peer-to-peer copy from device 0 to device 1. */
        mock_api(RT, 160, 4500, 1);
        t = mock_now();
        mock_peer_copy(4500, t, t + 3000, 4096, 0, 1);
        mock_api(RT, 160, 4500, 0);
        /* Syncs: a stream of device 2, a whole context of device 2 (no stream),
         * and a context CUPTI never announced. */
        mock_context_create(5, 2);
        mock_api(RT, 131, 4600, 1);
        mock_api(RT, 131, 4600, 0);
        t = mock_now();
        mock_sync(4600, 5, 9, t, t + 100);
        mock_api(RT, 165, 4700, 1);
        mock_api(RT, 165, 4700, 0);
        t = mock_now();
        mock_sync(4700, 5, NO_STREAM, t, t + 100);
        mock_api(RT, 165, 4800, 1);
        mock_api(RT, 165, 4800, 0);
        t = mock_now();
        mock_sync(4800, 9, 3, t, t + 100);
        /* Not recorded: never enabled. */
        mock_api(RT, 3, 5000, 1);
        mock_api(RT, 3, 5000, 0);
        mock_drop(5);
        mock_context_destroy();
        printf("clock after %llu\n", (unsigned long long)now());
    }
    printf("host: done\n");
    return 3;
}
