/* A launch loop with a known stack shape:
 *   main|worker -> run_layer -> launch_kernel -> cudaLaunchKernel
 * usage: app LAUNCHES THREADS [INJECT.so]
 * With INJECT.so it loads the injection library as the CUDA driver does and
 * plays each launch's API callback through the MOCK libcupti named by
 * GPUPERF_CUPTI_PATH, so the library calls its marker. It prints one
 * "tid N" line per launching thread, then "done". */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int cudaLaunchKernel(uint32_t corr);
int fakeUnprobedCopy(uint32_t corr);
extern void (*fake_cupti_callback)(uint32_t corr);

static void (*mock_api)(int, int, uint32_t, int);
static uint32_t next_corr = 1;
static int launches;
static pthread_mutex_t print_lock = PTHREAD_MUTEX_INITIALIZER;

static void callback(uint32_t corr) {
    mock_api(2, 211, corr, 1); /* runtime domain, cudaLaunchKernel_v7000 */
    mock_api(2, 211, corr, 0);
}

__attribute__((noinline)) static void launch_kernel(void) {
    cudaLaunchKernel(__atomic_fetch_add(&next_corr, 1, __ATOMIC_SEQ_CST));
}

__attribute__((noinline)) static void run_layer(int n) {
    for (int i = 0; i < n; i++)
        launch_kernel();
}

static void *worker(void *arg) {
    (void)arg;
    pthread_mutex_lock(&print_lock);
    printf("tid %d\n", gettid());
    pthread_mutex_unlock(&print_lock);
    run_layer(launches);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    launches = atoi(argv[1]);
    int threads = atoi(argv[2]);
    if (argc > 3) {
        void *inj = dlopen(argv[3], RTLD_NOW | RTLD_LOCAL);
        int (*init)(void) = inj ? (int (*)(void))dlsym(inj, "InitializeInjection") : NULL;
        if (!init || init() != 1) {
            fprintf(stderr, "cannot load %s: %s\n", argv[3], dlerror());
            return 3;
        }
        void *mock = dlopen(getenv("GPUPERF_CUPTI_PATH"), RTLD_NOW | RTLD_NOLOAD);
        *(void **)&mock_api = mock ? dlsym(mock, "mock_api") : NULL;
        if (!mock_api) {
            fprintf(stderr, "no mock libcupti\n");
            return 4;
        }
        fake_cupti_callback = callback;
    }
    if (threads == 0) {
        printf("tid %d\n", gettid());
        /* APP_GATE: after the first launch, wait for a line on stdin, as a
         * real program's first kernel is followed by more set-up. The test
         * writes it once the profiler has handled that launch (and probed
         * what the process maps), however slow the machine. */
        if (getenv("APP_GATE") && launches > 1) {
            char line[8];
            run_layer(1);
            char *got = fgets(line, sizeof line, stdin);
            (void)got; /* the end of stdin opens the gate too */
            run_layer(launches - 1);
        } else {
            run_layer(launches);
        }
        /* A marked call without an entry probe: its stack is the marker's. */
        if (argc > 3)
            fakeUnprobedCopy(__atomic_fetch_add(&next_corr, 1, __ATOMIC_SEQ_CST));
    } else {
        pthread_t t[64];
        for (int i = 0; i < threads && i < 64; i++)
            pthread_create(&t[i], NULL, worker, NULL);
        for (int i = 0; i < threads && i < 64; i++)
            pthread_join(t[i], NULL);
    }
    printf("done\n");
    return 0;
}
