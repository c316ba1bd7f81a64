/* Host programs for the library's guarantees at signals, exit and exec, on the
 * simulated CUDA runtime (sim/, no GPU): real runtime calls, and the simulated
 * driver loads the injection library at cuInit from CUDA_INJECTION64_PATH (set
 * here from the first argument), as NVIDIA's driver does. Kernels are told
 * apart by name (the correlation ids are the simulation's).
 *
 * usage: host_safety INJECT.so|none MODE [ARG]
 *   sigterm-malloc  5 launches on the main thread, then worker threads that
 *                   never call CUDA allocate in a loop and one of them gets
 *                   SIGTERM: the program must die of it
 *   atexit-launches 5 launches, then `exit` runs an atexit handler registered
 *                   after CUDA started that makes 20 launches (_Z7cleanupv)
 *   tsd-launches    a thread makes 1 launch (_Z6threadv), then the destructor of
 *                   its thread-specific data makes 32 (_Z10destructorv) at its exit
 *   exec-self       10 launches (_Z5firstv), a wait of 3 flush periods, then the
 *                   program execs itself as `exec-second`: 5 launches (_Z6secondv)
 *   exit-race       a thread launches (_Z4racev) in a loop while the main thread calls
 *                   `exit`; an exit handler that runs after the library's stops
 *                   it and prints how many launches returned ("made N")
 *   exit-flush-launches  5 launches, then a thread makes 10 (_Z7closingv) and
 *                   waits for them while the main thread's `exit` runs the
 *                   library's exit path: the simulated CUPTI's first forced
 *                   flush calls gpusim_forced_flush_hook (run it with
 *                   GPUSIM_CUPTI_FORCED_FLUSH_HOOK=gpusim_forced_flush_hook),
 *                   which starts that thread and joins it
 *   dlopen-reuse A B  dlopen A, 6 launches called back from its late_call,
 *                   dlclose A, dlopen B (which the loader puts where A was:
 *                   printed "same address 1"), 6 launches from it
 *   takeover-copies  20 launches, then a second CUPTI client (in the simulated
 *                   libcupti named by GPUPERF_CUPTI_PATH) registers its buffers
 *                   and disables the activity kinds (as Kineto does when it
 *                   stops), then 40 copies (9 ms apart)
 *   abort-thread    5 launches on the main thread, then another thread calls
 *                   `abort` while the main thread waits: the program must die
 *                   of SIGABRT (with GPUSIM_CUPTI_FORCED_FLUSH_HOOK=
 *                   gpusim_faulting_hook, the close gpuperf makes first, its
 *                   forced flush, writes through a null pointer)
 *   segv            5 launches, then a write through a null pointer: the
 *                   program must die of SIGSEGV
 *   exit            5 launches, then `exit`
 *   flush-hang      5 launches; with the library, a wait until its periodic
 *                   flush is stuck inside the simulated CUPTI (run it with
 *                   GPUSIM_CUPTI_FLUSH_HANG_S=N), "flush hung", then `exit`
 *   stuck-write     5 launches, a wait of 4 flush periods, then every write to
 *                   the library's trace and log files stays inside for good
 *                   (this file's `write`), 5 launches (_Z5afterv), the same
 *                   wait, "stuck", then `exit`
 *   slow-close-decode  5 launches, then `exit`; the first allocation on the
 *                   thread making the close's forced flush, once the simulated
 *                   CUPTI hands a buffer back (run it with
 *                   GPUSIM_CUPTI_FORCED_FLUSH_HOOK=gpusim_close_flush_hook),
 *                   takes 12 s: the library's own work inside that flush
 *   malloc-launches  the program's malloc (this file's, as a preloaded
 *                   allocator's would be) launches when gpuperf's flush
 *                   thread calls it (at most 50 times); 5 launches, a wait of
 *                   4 flush periods, exit
 * Exits with 3 (or dies of the signal). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

/* nvcc's registration, done by hand: a host stub names a device function. */
void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFunction(void **h, const char *hostFun, char *deviceFun, const char *deviceName,
                            int thread_limit, void *tid, void *bid, void *bDim, void *gDim, int *wSize);

/* One distinct host stub per kernel name. */
#define STUB(n) \
    __attribute__((noinline)) static void stub##n(void) { __asm__ volatile("" ::"r"(n)); }
STUB(0) STUB(1) STUB(2) STUB(3) STUB(4) STUB(5) STUB(6) STUB(7) STUB(8) STUB(9) STUB(10) STUB(11)
static const struct {
    const char *name;
    void (*stub)(void);
} kernels[] = {
    {"_Z6beforev", stub0}, {"_Z7cleanupv", stub1}, {"_Z10destructorv", stub2},
    {"_Z6threadv", stub3}, {"_Z5firstv", stub4},   {"_Z6secondv", stub5},
    {"_Z4racev", stub6},   {"_Z5reusev", stub7},   {"_Z6mallocv", stub8},
    {"_Z6windowv", stub9}, {"_Z5afterv", stub10},  {"_Z7closingv", stub11},
};
#define NKERNELS (sizeof kernels / sizeof kernels[0])

static void register_kernels(void) {
    static int image;
    void **h = __cudaRegisterFatBinary(&image);
    for (size_t i = 0; i < NKERNELS; i++)
        __cudaRegisterFunction(h, (const char *)kernels[i].stub, (char *)kernels[i].name, kernels[i].name,
                               -1, 0, 0, 0, 0, 0);
}

static void launch(const char *name) {
    for (size_t i = 0; i < NKERNELS; i++)
        if (strcmp(kernels[i].name, name) == 0) {
            dim3 g = {1, 1, 1}, b = {32, 1, 1};
            cudaError_t e = cudaLaunchKernel((const void *)kernels[i].stub, g, b, NULL, 0, 0);
            if (e != cudaSuccess) {
                fprintf(stderr, "host_safety: launch %s: %s\n", name, cudaGetErrorString(e));
                _exit(4);
            }
            return;
        }
    _exit(5);
}

/* ---- takeover-copies: a second CUPTI client, then copies and memsets ---- */
static void second_request(uint8_t **b, size_t *size, size_t *max) {
    *b = aligned_alloc(8, 1 << 16);
    *size = 1 << 16;
    *max = 0;
}
static void second_complete(void *ctx, uint32_t s, uint8_t *b, size_t size, size_t valid) {
    (void)ctx; (void)s; (void)size; (void)valid;
    free(b);
}
static int takeover_copies(void) {
    const char *path = getenv("GPUPERF_CUPTI_PATH");
    void *cupti = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!cupti) return 94;
    int (*reg)(void *, void *) = (int (*)(void *, void *))dlsym(cupti, "cuptiActivityRegisterCallbacks");
    int (*disable)(int) = (int (*)(int))dlsym(cupti, "cuptiActivityDisable");
    if (!reg || !disable) return 94;
    for (int i = 0; i < 20; i++) launch("_Z6beforev");
    if (cudaDeviceSynchronize() != cudaSuccess) return 94;
    usleep(300000);
    reg((void *)second_request, (void *)second_complete);
    int kinds[] = {10, 1, 2, 38}; /* kernel, memcpy, memset, sync */
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) disable(kinds[i]);
    static char host[4096];
    void *dev = NULL;
    if (cudaMalloc(&dev, sizeof host) != cudaSuccess) return 94;
    for (int i = 0; i < 40; i++) {
        if (cudaMemcpy(dev, host, sizeof host, cudaMemcpyHostToDevice) != cudaSuccess) return 94;
        usleep(9000);
    }
    return 3;
}

/* ---- malloc-launches: an allocator that calls CUDA ---- */
extern void *__libc_malloc(size_t);
static atomic_int launch_in_malloc;
static atomic_int malloc_launches;
static __thread int in_malloc;
/* slow-close-decode: set on the thread making the close's forced flush (by
 * the simulated CUPTI's hook, before it hands a buffer back), and whether
 * that thread's next allocation, the library's own inside its buffer
 * callback, is to take 12 s. */
static __thread int in_close_flush;
static atomic_int stall_close;
void gpusim_close_flush_hook(void) { in_close_flush = 1; }
void *malloc(size_t n) {
    if (in_close_flush && atomic_exchange(&stall_close, 0)) sleep(12);
    if (launch_in_malloc && !in_malloc && malloc_launches < 50) {
        char name[16] = {0};
        prctl(PR_GET_NAME, name);
        if (strcmp(name, "gpuperf-flush") == 0) {
            in_malloc = 1;
            malloc_launches++;
            launch("_Z6mallocv");
            in_malloc = 0;
        }
    }
    return __libc_malloc(n);
}

/* ---- stuck-write: the library's files on a file system that stopped
 * answering. This program's `write` is the one the library calls (linked
 * -rdynamic, as an interposed libc function is): once armed, a write to a
 * trace or log file never returns, as one to a hung NFS mount does not. */
static atomic_int stuck_writes;
static int library_file(int fd) {
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0) return 0;
    path[n] = 0;
    const char *dot = strrchr(path, '.');
    return dot && (strcmp(dot, ".gputrace") == 0 || strcmp(dot, ".log") == 0);
}
ssize_t write(int fd, const void *buf, size_t n) {
    if (stuck_writes && library_file(fd))
        for (;;) sleep(1000);
    return syscall(SYS_write, fd, buf, n);
}

static int stuck_write(void) {
    for (int i = 0; i < 5; i++) launch("_Z6beforev");
    const char *ms = getenv("GPUPERF_FLUSH_MS");
    useconds_t period = (useconds_t)(ms ? atoi(ms) : 500) * 1000;
    usleep(4 * period);
    stuck_writes = 1;
    for (int i = 0; i < 5; i++) launch("_Z5afterv");
    usleep(4 * period);
    printf("stuck\n");
    fflush(stdout);
    return 3;
}

/* ---- sigterm-malloc ---- */
static void *allocate(void *arg) {
    (void)arg;
    /* Sizes past glibc's thread cache, so that malloc and free take the
     * arena's lock; several live at once. */
    for (;;) {
        void *p[8];
        for (int i = 0; i < 8; i++) p[i] = malloc(2048 + (size_t)i * 4096);
        for (int i = 0; i < 8; i++) free(p[i]);
    }
    return NULL;
}

static int sigterm_malloc(void) {
    for (int i = 0; i < 5; i++) launch("_Z6beforev");
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        if (pthread_create(&t[i], NULL, allocate, NULL) != 0) return 91;
    usleep(20000);
    pthread_kill(t[1], SIGTERM);
    for (;;) pause();
}

/* ---- abort-thread ---- */
static void *aborting(void *arg) {
    (void)arg;
    abort();
}

static int abort_thread(void) {
    for (int i = 0; i < 5; i++) launch("_Z6beforev");
    pthread_t t;
    if (pthread_create(&t, NULL, aborting, NULL) != 0) return 91;
    for (;;) pause();
}

/* ---- segv ---- */
static int segv(void) {
    for (int i = 0; i < 5; i++) launch("_Z6beforev");
    *(volatile int *)(uintptr_t)atoi("0") = 1;
    return 95;
}

/* ---- atexit-launches ---- */
static void cleanup(void) {
    for (int i = 0; i < 20; i++) launch("_Z7cleanupv");
}

/* ---- tsd-launches ---- */
static pthread_key_t key;
static void destructor(void *v) {
    (void)v;
    for (int i = 0; i < 32; i++) launch("_Z10destructorv");
}
static void *tsd_thread(void *arg) {
    (void)arg;
    launch("_Z6threadv");
    pthread_setspecific(key, &key);
    return NULL;
}

/* ---- exit-race ---- */
static atomic_int stop_racer;
static atomic_uint made;
static pthread_t racer;
static int racing;
static void *race(void *arg) {
    (void)arg;
    while (!stop_racer) {
        launch("_Z4racev");
        made++;
    }
    return NULL;
}
/* Registered before the library's exit handler, so it runs after it. */
static void stop_race(void) {
    if (!racing) return;
    stop_racer = 1;
    pthread_join(racer, NULL);
    printf("made %u\n", (unsigned)made);
    fflush(stdout);
}

/* ---- exit-flush-launches ---- */
static pthread_t closer;
static int closer_made;
static void *closing_launches(void *arg) {
    (void)arg;
    for (int i = 0; i < 10; i++) launch("_Z7closingv");
    /* Their kernels end before the forced flush goes on. */
    if (cudaDeviceSynchronize() != cudaSuccess) _exit(4);
    return NULL;
}
/* Called by the simulated libcupti on the exiting thread, inside the library's
 * exit path: the thread's calls all enter and return while it runs. */
void gpusim_faulting_hook(void);
void gpusim_faulting_hook(void) { *(volatile int *)(uintptr_t)atoi("0") = 1; }

void gpusim_forced_flush_hook(void);
void gpusim_forced_flush_hook(void) {
    if (closer_made || pthread_create(&closer, NULL, closing_launches, NULL) != 0) return;
    closer_made = 1;
    pthread_join(closer, NULL);
}

/* ---- dlopen-reuse ---- */
static void reuse_launch(void) { launch("_Z5reusev"); }
static int dlopen_reuse(const char *a, const char *b) {
    if (!a || !b) return 90;
    void *ha = dlopen(a, RTLD_NOW | RTLD_LOCAL);
    if (!ha) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 92; }
    void (*call_a)(void (*)(void)) = (void (*)(void (*)(void)))dlsym(ha, "late_call");
    if (!call_a) return 93;
    for (int i = 0; i < 6; i++) call_a(reuse_launch);
    Dl_info ia;
    if (!dladdr((void *)call_a, &ia)) return 93;
    void *base_a = ia.dli_fbase;
    dlclose(ha);
    void *hb = dlopen(b, RTLD_NOW | RTLD_LOCAL);
    if (!hb) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 92; }
    void (*call_b)(void (*)(void)) = (void (*)(void (*)(void)))dlsym(hb, "late_call");
    if (!call_b) return 93;
    Dl_info ib;
    if (!dladdr((void *)call_b, &ib)) return 93;
    printf("same address %d\n", ib.dli_fbase == base_a);
    for (int i = 0; i < 6; i++) call_b(reuse_launch);
    return 3;
}

/* Waits until the library's periodic flush is stuck inside the simulated
 * CUPTI (GPUSIM_CUPTI_FLUSH_HANG_S), then exits: the exit path must not wait
 * for that flush. */
static int exit_in_hung_flush(void) {
    const char *path = getenv("GPUPERF_CUPTI_PATH");
    void *cupti = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
    int (*hanging)(void) = cupti ? (int (*)(void))dlsym(cupti, "gpusim_cupti_flush_hanging") : NULL;
    if (!hanging) return 95;
    for (int i = 0; i < 30000 && !hanging(); i++) usleep(1000);
    if (!hanging()) return 95;
    printf("flush hung\n");
    fflush(stdout);
    return 3;
}

int main(int argc, char **argv) {
    if (argc < 3) return 97;
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    const char *mode = argv[2];
    atexit(stop_race);
    if (strcmp(argv[1], "none") != 0)
        setenv("CUDA_INJECTION64_PATH", argv[1], 1);
    else
        unsetenv("CUDA_INJECTION64_PATH");
    register_kernels();
    /* CUDA starts here (the injection library with it), as the first call of
     * a program does. */
    if (cudaFree(0) != cudaSuccess) return 96;
    if (strcmp(mode, "sigterm-malloc") == 0) return sigterm_malloc();
    if (strcmp(mode, "abort-thread") == 0) return abort_thread();
    if (strcmp(mode, "segv") == 0) return segv();
    if (strcmp(mode, "exit") == 0) {
        for (int i = 0; i < 5; i++) launch("_Z6beforev");
        return 3;
    }
    if (strcmp(mode, "atexit-launches") == 0) {
        for (int i = 0; i < 5; i++) launch("_Z6beforev");
        atexit(cleanup);
        return 3;
    }
    if (strcmp(mode, "tsd-launches") == 0) {
        if (pthread_key_create(&key, destructor) != 0) return 91;
        pthread_t t;
        if (pthread_create(&t, NULL, tsd_thread, NULL) != 0) return 91;
        pthread_join(t, NULL);
        return 3;
    }
    if (strcmp(mode, "exec-self") == 0) {
        for (int i = 0; i < 10; i++) launch("_Z5firstv");
        const char *ms = getenv("GPUPERF_FLUSH_MS");
        usleep((useconds_t)(ms ? atoi(ms) : 500) * 3000);
        printf("exec\n");
        fflush(stdout);
        char *args[] = {"/proc/self/exe", argv[1], "exec-second", NULL};
        execv("/proc/self/exe", args);
        return 94;
    }
    if (strcmp(mode, "exec-second") == 0) {
        for (int i = 0; i < 5; i++) launch("_Z6secondv");
        return 3;
    }
    if (strcmp(mode, "exit-race") == 0) {
        for (int i = 0; i < 5; i++) launch("_Z6beforev");
        racing = 1;
        if (pthread_create(&racer, NULL, race, NULL) != 0) return 91;
        while (made < 200) usleep(100);
        exit(3);
    }
    if (strcmp(mode, "exit-flush-launches") == 0) {
        for (int i = 0; i < 5; i++) launch("_Z6beforev");
        exit(3);
    }
    if (strcmp(mode, "flush-hang") == 0) {
        for (int i = 0; i < 5; i++) launch("_Z6beforev");
        if (strcmp(argv[1], "none") != 0) return exit_in_hung_flush();
        return 3;
    }
    if (strcmp(mode, "stuck-write") == 0) return stuck_write();
    if (strcmp(mode, "slow-close-decode") == 0) {
        for (int i = 0; i < 5; i++) launch("_Z6beforev");
        stall_close = 1;
        return 3;
    }
    if (strcmp(mode, "takeover-copies") == 0) return takeover_copies();
    if (strcmp(mode, "malloc-launches") == 0) {
        launch_in_malloc = 1;
        for (int i = 0; i < 5; i++) launch("_Z6beforev");
        const char *ms = getenv("GPUPERF_FLUSH_MS");
        usleep((useconds_t)(ms ? atoi(ms) : 500) * 4000);
        printf("flush thread launches %d\n", (int)malloc_launches);
        return 3;
    }
    if (strcmp(mode, "dlopen-reuse") == 0)
        return dlopen_reuse(argc > 3 ? argv[3] : NULL, argc > 4 ? argv[4] : NULL);
    return 97;
}
