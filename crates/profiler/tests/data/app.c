/* A launch loop with a known stack shape:
 *   main|worker -> run_layer -> launch_kernel -> cudaLaunchKernel
 * usage: app LAUNCHES THREADS [INJECT.so]
 * With INJECT.so each call of the fake cudart also makes a real launch on the
 * simulated CUDA runtime (sim/; its libcudart named by APP_SIM_CUDART): its
 * simulated driver loads the injection library at cuInit, as NVIDIA's does, and
 * its CUPTI (GPUPERF_CUPTI_PATH) calls the library's API callbacks, so the
 * library calls its marker with the simulation's correlation id. It prints one
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

/* The simulated runtime's, found with dlsym: dim3 is three unsigned ints. */
typedef struct { unsigned x, y, z; } dim3_t;
static int (*sim_launch)(const void *, dim3_t, dim3_t, void **, size_t, void *);
static uint32_t next_corr = 1;
static int launches;
static pthread_mutex_t print_lock = PTHREAD_MUTEX_INITIALIZER;

/* The device function's host stub, registered with the simulated runtime. */
__attribute__((noinline)) static void sim_kernel(void) { __asm__ volatile(""); }

static void callback(uint32_t corr) {
    (void)corr; /* the simulation numbers its calls itself */
    dim3_t g = {1, 1, 1}, b = {32, 1, 1};
    if (sim_launch((const void *)sim_kernel, g, b, NULL, 0, NULL) != 0) {
        fprintf(stderr, "simulated launch failed\n");
        exit(5);
    }
}

/* Starts CUDA on the simulated runtime, whose driver loads `inject`; 0 on success. */
static int start_sim(const char *inject) {
    const char *cudart = getenv("APP_SIM_CUDART");
    void *h = cudart ? dlopen(cudart, RTLD_NOW | RTLD_LOCAL) : NULL;
    void **(*reg_fatbin)(void *) = h ? (void **(*)(void *))dlsym(h, "__cudaRegisterFatBinary") : NULL;
    void (*reg_fn)(void **, const char *, char *, const char *, int, void *, void *, void *, void *,
                   int *) =
        h ? (void (*)(void **, const char *, char *, const char *, int, void *, void *, void *, void *,
                      int *))dlsym(h, "__cudaRegisterFunction")
          : NULL;
    int (*cuda_free)(void *) = h ? (int (*)(void *))dlsym(h, "cudaFree") : NULL;
    *(void **)&sim_launch = h ? dlsym(h, "cudaLaunchKernel") : NULL;
    if (!reg_fatbin || !reg_fn || !cuda_free || !sim_launch)
        return -1;
    setenv("CUDA_INJECTION64_PATH", inject, 1);
    static int image;
    void **fatbin = reg_fatbin(&image);
    reg_fn(fatbin, (const char *)sim_kernel, "_Z6kernelv", "_Z6kernelv", -1, 0, 0, 0, 0, 0);
    return cuda_free(NULL);
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
        if (start_sim(argv[3]) != 0) {
            fprintf(stderr, "cannot start the simulated runtime (APP_SIM_CUDART): %s\n", dlerror());
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
