/* A stand-in for a CUDA application: it loads the injection library the way the
 * CUDA driver does (dlopen + InitializeInjection), then, in "mock" modes, plays
 * API calls and GPU records through the MOCK libcupti named by GPUPERF_CUPTI_PATH.
 *
 * usage: host INJECT.so|none plain|mock|mock-kill|mock-bench [LAUNCHES] */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void (*mock_api)(int, int, uint32_t, int);
static void (*mock_kernel)(uint32_t, uint64_t, uint64_t, const char *, uint32_t, uint64_t, uint32_t);
static void (*mock_memcpy)(uint32_t, uint32_t, uint64_t, uint64_t, uint64_t);
static void (*mock_drop)(size_t);
static uint64_t (*mock_now)(void);
static int (*mock_enabled)(int, int);
static int (*mock_thread_id_type)(void);
static void (*mock_context_destroy)(void);

enum { DRV = 1, RT = 2 }; /* CUpti_CallbackDomain */

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

#define LOAD(name)                                                    \
    do {                                                              \
        *(void **)&name = dlsym(mock, #name);                         \
        if (!name) { fprintf(stderr, "no %s\n", #name); return 98; }  \
    } while (0)

int main(int argc, char **argv) {
    if (argc < 3) return 97;
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
        void *mock = dlopen(getenv("GPUPERF_CUPTI_PATH"), RTLD_NOW | RTLD_LOCAL);
        if (!mock) { fprintf(stderr, "dlopen mock: %s\n", dlerror()); return 95; }
        LOAD(mock_api); LOAD(mock_kernel); LOAD(mock_memcpy); LOAD(mock_drop);
        LOAD(mock_now); LOAD(mock_enabled); LOAD(mock_thread_id_type);
        LOAD(mock_context_destroy);
        printf("clock before %llu\n", (unsigned long long)now());
        printf("main tid %d\n", gettid());
        printf("thread id type %d\n", mock_thread_id_type());
        printf("enabled launch=%d graph=%d memcpy=%d sync=%d culaunch=%d getlasterror=%d ctxgetcurrent=%d\n",
               mock_enabled(RT, 211), mock_enabled(RT, 311), mock_enabled(RT, 31),
               mock_enabled(RT, 165), mock_enabled(DRV, 307), mock_enabled(RT, 3),
               mock_enabled(DRV, 17));
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
        for (uint32_t c = 1; c <= 100; c++) launch(c % 2 ? 211 : 505, c, "_Z6kernelPfi");
        if (strcmp(argv[2], "mock-kill") == 0) {
            usleep(1500 * 1000);
            printf("host: killing myself\n");
            fflush(stdout);
            raise(SIGKILL);
        }
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
        /* A runtime launch whose driver call CUPTI also reports. */
        mock_api(RT, 211, 3000, 1);
        mock_api(DRV, 307, 3001, 1);
        mock_api(DRV, 307, 3001, 0);
        mock_api(RT, 211, 3000, 0);
        mock_kernel(3001, mock_now(), mock_now() + 100, "_Z6nestedv", 0, 0, 7);
        /* A plain driver-API launch. */
        mock_api(DRV, 307, 3500, 1);
        mock_api(DRV, 307, 3500, 0);
        mock_kernel(3500, mock_now(), mock_now() + 100, "_Z6driverv", 0, 0, 7);
        /* A copy: the runtime call's id differs from the driver's. */
        mock_api(RT, 31, 4000, 1);
        mock_memcpy(4001, 4000, mock_now(), mock_now() + 2000, 1 << 20);
        mock_api(RT, 31, 4000, 0);
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
