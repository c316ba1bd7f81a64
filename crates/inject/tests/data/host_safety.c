/* Host programs for the library's guarantees at signals, exit and exec. Each
 * loads the injection library the way the CUDA driver does (dlopen +
 * InitializeInjection) and plays CUDA calls through the MOCK libcupti named by
 * GPUPERF_CUPTI_PATH, as host.c does.
 *
 * usage: host_safety INJECT.so|none MODE [ARG]
 *   sigterm-malloc  5 launches on the main thread, then worker threads that
 *                   never call CUDA allocate in a loop and one of them gets
 *                   SIGTERM: the program must die of it
 *   atexit-launches 5 launches, then `exit` runs an atexit handler registered
 *                   after CUDA started that makes 20 launches (7001..7020)
 *   tsd-launches    a thread makes 1 launch, then the destructor of its
 *                   thread-specific data makes 32 (8001..8032) at its exit
 *   exec-self       10 launches (1..10), a wait of 3 flush periods, then the
 *                   program execs itself as `exec-second`: 5 launches (101..105)
 *   exit-race       a thread launches in a loop while the main thread calls
 *                   `exit`; an exit handler that runs after the library's stops
 *                   it and prints how many launches returned ("made N")
 *   dlopen-reuse A B  dlopen A, 6 launches called back from its late_call,
 *                   dlclose A, dlopen B (which the loader puts where A was:
 *                   printed "same address 1"), 6 launches from it
 *   takeover-copies  20 launches, then a second CUPTI client registers its
 *                   buffers and disables the activity kinds (as Kineto does when
 *                   it stops), then 40 copies (9 ms apart)
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
#include <time.h>
#include <unistd.h>

/* What libcuda would answer; 3 is CUDA_ERROR_NOT_INITIALIZED. */
int cuDriverGetVersion(int *v) {
    (void)v;
    return 3;
}

static uint64_t now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

enum { RT = 2 };
static void (*mock_api)(int, int, uint32_t, int);
static void (*mock_kernel)(uint32_t, uint64_t, uint64_t, const char *, uint32_t, uint64_t, uint32_t);
static uint64_t (*mock_now)(void);
static void (*mock_context_create)(uint32_t, uint32_t);

static void launch(uint32_t corr, const char *name) {
    mock_api(RT, 211, corr, 1);
    mock_api(RT, 211, corr, 0);
    uint64_t t = mock_now();
    if (t == 0) t = now(); /* no injection: no timestamp callback registered */
    mock_kernel(corr, t, t + 1000, name, 0, 0, 7);
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
static int takeover_copies(void *mock) {
    int (*reg)(void *, void *) = (int (*)(void *, void *))dlsym(mock, "cuptiActivityRegisterCallbacks");
    int (*disable)(int) = (int (*)(int))dlsym(mock, "cuptiActivityDisable");
    void (*memcpy_rec)(uint32_t, uint32_t, uint64_t, uint64_t, uint64_t) =
        (void (*)(uint32_t, uint32_t, uint64_t, uint64_t, uint64_t))dlsym(mock, "mock_memcpy");
    if (!reg || !disable || !memcpy_rec) return 94;
    for (uint32_t c = 1; c <= 20; c++) launch(c, "_Z6beforev");
    usleep(300000);
    reg((void *)second_request, (void *)second_complete);
    int kinds[] = {10, 1, 2, 38}; /* kernel, memcpy, memset, sync */
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) disable(kinds[i]);
    for (uint32_t c = 101; c <= 140; c++) {
        mock_api(RT, 31, c, 1); /* cudaMemcpy */
        uint64_t t = mock_now();
        memcpy_rec(c, c, t, t + 100, 4096);
        mock_api(RT, 31, c, 0);
        usleep(9000);
    }
    return 3;
}

/* ---- malloc-launches: an allocator that calls CUDA ---- */
extern void *__libc_malloc(size_t);
static atomic_int launch_in_malloc;
static atomic_int malloc_launches;
static __thread int in_malloc;
void *malloc(size_t n) {
    if (launch_in_malloc && !in_malloc && malloc_launches < 50) {
        char name[16] = {0};
        prctl(PR_GET_NAME, name);
        if (strcmp(name, "gpuperf-flush") == 0) {
            in_malloc = 1;
            malloc_launches++;
            launch(30000 + (uint32_t)malloc_launches, "_Z6mallocv");
            in_malloc = 0;
        }
    }
    return __libc_malloc(n);
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
    for (uint32_t c = 1; c <= 5; c++) launch(c, "_Z6beforev");
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        if (pthread_create(&t[i], NULL, allocate, NULL) != 0) return 91;
    usleep(20000);
    pthread_kill(t[1], SIGTERM);
    for (;;) pause();
}

/* ---- atexit-launches ---- */
static void cleanup(void) {
    for (uint32_t c = 7001; c <= 7020; c++) launch(c, "_Z7cleanupv");
}

/* ---- tsd-launches ---- */
static pthread_key_t key;
static void destructor(void *v) {
    (void)v;
    for (uint32_t c = 8001; c <= 8032; c++) launch(c, "_Z10destructorv");
}
static void *tsd_thread(void *arg) {
    (void)arg;
    launch(8000, "_Z6threadv");
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
    for (uint32_t c = 20000; !stop_racer; c++) {
        launch(c, "_Z4racev");
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

/* ---- dlopen-reuse ---- */
static uint32_t reuse_corr = 9000;
static void reuse_launch(void) { launch(reuse_corr++, "_Z5reusev"); }
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

#define LOAD(name)                                                    \
    do {                                                              \
        *(void **)&name = dlsym(mock, #name);                         \
        if (!name) { fprintf(stderr, "no %s\n", #name); return 98; }  \
    } while (0)

int main(int argc, char **argv) {
    if (argc < 3) return 97;
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    const char *mode = argv[2];
    atexit(stop_race);
    if (strcmp(argv[1], "none") != 0) {
        void *inj = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
        if (!inj) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 99; }
        int (*init)(void) = (int (*)(void))dlsym(inj, "InitializeInjection");
        if (!init || init() != 1) return 96;
    }
    const char *path = getenv("GPUPERF_CUPTI_PATH");
    void *mock = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!mock) { fprintf(stderr, "dlopen mock: %s\n", dlerror()); return 95; }
    LOAD(mock_api); LOAD(mock_kernel); LOAD(mock_now); LOAD(mock_context_create);
    mock_context_create(1, 0);
    if (strcmp(mode, "sigterm-malloc") == 0) return sigterm_malloc();
    if (strcmp(mode, "atexit-launches") == 0) {
        for (uint32_t c = 1; c <= 5; c++) launch(c, "_Z6beforev");
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
        for (uint32_t c = 1; c <= 10; c++) launch(c, "_Z5firstv");
        const char *ms = getenv("GPUPERF_FLUSH_MS");
        usleep((useconds_t)(ms ? atoi(ms) : 500) * 3000);
        printf("exec\n");
        fflush(stdout);
        char *args[] = {"/proc/self/exe", argv[1], "exec-second", NULL};
        execv("/proc/self/exe", args);
        return 94;
    }
    if (strcmp(mode, "exec-second") == 0) {
        for (uint32_t c = 101; c <= 105; c++) launch(c, "_Z6secondv");
        return 3;
    }
    if (strcmp(mode, "exit-race") == 0) {
        for (uint32_t c = 1; c <= 5; c++) launch(c, "_Z6beforev");
        racing = 1;
        if (pthread_create(&racer, NULL, race, NULL) != 0) return 91;
        while (made < 200) usleep(100);
        exit(3);
    }
    if (strcmp(mode, "takeover-copies") == 0) return takeover_copies(mock);
    if (strcmp(mode, "malloc-launches") == 0) {
        launch_in_malloc = 1;
        for (uint32_t c = 1; c <= 5; c++) launch(c, "_Z6beforev");
        const char *ms = getenv("GPUPERF_FLUSH_MS");
        usleep((useconds_t)(ms ? atoi(ms) : 500) * 4000);
        printf("flush thread launches %d\n", (int)malloc_launches);
        return 3;
    }
    if (strcmp(mode, "dlopen-reuse") == 0)
        return dlopen_reuse(argc > 3 ? argv[3] : NULL, argc > 4 ? argv[4] : NULL);
    return 97;
}
