/* Host programs whose threads come and go, on the simulated CUDA runtime
 * (sim/, no GPU): real runtime calls, and the simulated driver loads the
 * injection library at cuInit from CUDA_INJECTION64_PATH (set here from the
 * first argument), as NVIDIA's driver does.
 *
 * usage: host_threads INJECT.so|none MODE ARGS...
 *   churn ROUNDS THREADS LAUNCHES WAIT_MS
 *           ROUNDS rounds of THREADS threads at once; each thread names
 *           itself "churn-R-I" (round, index), makes LAUNCHES launches
 *           (_Z5churnv), renames itself "exit-R-I" and exits; between
 *           rounds, the main thread waits WAIT_MS ms (a few of the library's
 *           flushes). Prints "threads N launches L".
 *   refuse SIZE THREADS LAUNCHES
 *           THREADS threads at once, each named "refused-I": while this
 *           program's malloc (a mock of the allocator) refuses them every
 *           block of SIZE bytes, each makes LAUNCHES launches (_Z7refusedv);
 *           once all have (no thread exits before: no shard is spare), each
 *           makes LAUNCHES more (_Z5afterv) with memory back; then the main
 *           thread makes LAUNCHES (_Z5afterv). Prints "launches L".
 * Exits with 3. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "refusing.h"

__attribute__((noinline)) static void churn_stub(void) { __asm__ volatile("" ::"r"(0)); }
__attribute__((noinline)) static void refused_stub(void) { __asm__ volatile("" ::"r"(1)); }
__attribute__((noinline)) static void after_stub(void) { __asm__ volatile("" ::"r"(2)); }

static void register_kernels(void) {
    static int image;
    void **h = __cudaRegisterFatBinary(&image);
    __cudaRegisterFunction(h, (const char *)churn_stub, "_Z5churnv", "_Z5churnv", -1, 0, 0, 0, 0, 0);
    __cudaRegisterFunction(h, (const char *)refused_stub, "_Z7refusedv", "_Z7refusedv", -1, 0, 0, 0,
                           0, 0);
    __cudaRegisterFunction(h, (const char *)after_stub, "_Z5afterv", "_Z5afterv", -1, 0, 0, 0, 0, 0);
}

static long launches;

struct who {
    int round, index;
};

/* ---- churn ---- */
static void *churn(void *arg) {
    const struct who *w = arg;
    char name[16];
    snprintf(name, sizeof name, "churn-%d-%d", w->round, w->index);
    prctl(PR_SET_NAME, name);
    for (long i = 0; i < launches; i++)
        launch(churn_stub);
    snprintf(name, sizeof name, "exit-%d-%d", w->round, w->index);
    prctl(PR_SET_NAME, name);
    return NULL;
}

static int churn_rounds(int rounds, int threads, int wait_ms) {
    pthread_t t[256];
    struct who w[256];
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < threads; i++) {
            w[i] = (struct who){r, i};
            if (pthread_create(&t[i], NULL, churn, &w[i]) != 0) return 91;
        }
        for (int i = 0; i < threads; i++)
            pthread_join(t[i], NULL);
        usleep((useconds_t)wait_ms * 1000);
    }
    printf("threads %d launches %ld\n", rounds * threads, (long)rounds * threads * launches);
    return 3;
}

/* ---- refuse ---- */
static pthread_barrier_t refused_all;
static void *refused(void *arg) {
    const struct who *w = arg;
    char name[16];
    snprintf(name, sizeof name, "refused-%d", w->index);
    prctl(PR_SET_NAME, name);
    refusing = 1;
    for (long i = 0; i < launches; i++)
        launch(refused_stub);
    refusing = 0;
    pthread_barrier_wait(&refused_all);
    for (long i = 0; i < launches; i++)
        launch(after_stub);
    return NULL;
}

static int refuse(int threads) {
    pthread_t t[256];
    struct who w[256];
    if (pthread_barrier_init(&refused_all, NULL, (unsigned)threads) != 0) return 91;
    for (int i = 0; i < threads; i++) {
        w[i] = (struct who){0, i};
        if (pthread_create(&t[i], NULL, refused, &w[i]) != 0) return 91;
    }
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    for (long i = 0; i < launches; i++)
        launch(after_stub);
    printf("launches %ld\n", (long)(2 * threads + 1) * launches);
    return 3;
}

int main(int argc, char **argv) {
    if (argc < 3) return 97;
    if (strcmp(argv[1], "none") != 0)
        setenv("CUDA_INJECTION64_PATH", argv[1], 1);
    else
        unsetenv("CUDA_INJECTION64_PATH");
    const char *mode = argv[2];
    int n = argc > 3 ? atoi(argv[3]) : 0, threads = argc > 4 ? atoi(argv[4]) : 0;
    launches = argc > 5 ? atol(argv[5]) : 0;
    if (threads <= 0 || threads > 256) return 97;
    register_kernels();
    /* CUDA starts here (the injection library with it). */
    if (cudaFree(0) != cudaSuccess) return 96;
    int rc = 97;
    if (strcmp(mode, "churn") == 0 && argc > 6)
        rc = churn_rounds(n, threads, atoi(argv[6]));
    if (strcmp(mode, "refuse") == 0) {
        refused_size = (size_t)n;
        rc = refuse(threads);
    }
    if (cudaDeviceSynchronize() != cudaSuccess) return 96;
    return rc;
}
