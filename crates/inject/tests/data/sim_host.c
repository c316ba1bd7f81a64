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
 * HOST_INIT_TWICE=1 calls InitializeInjection again once CUDA is initialized, as
 * a second injection would, and prints "host: second init returned N".
 * Exit status 3 when the program ran to its end; it prints the same with or
 * without the injection library. */
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
static void kernel_stub(void) {}
static void after_stub(void) {}
static void worker_stub(void) {}

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
    int scene = strcmp(argv[2], "scene") == 0;
    printf("host: start\n");
    if (scene)
        printf("clock before %llu\nmain tid %d\n", now(), gettid());
    CHECK(cudaFree(0));
    if (getenv("HOST_INIT_TWICE") && strcmp(argv[1], "none") != 0) {
        void *inj = dlopen(argv[1], RTLD_NOW | RTLD_NOLOAD);
        int (*init)(void) = inj ? (int (*)(void))dlsym(inj, "InitializeInjection") : NULL;
        printf("host: second init returned %d\n", init ? init() : -1);
    }
    if (strcmp(argv[2], "probe") == 0)
        return probe();
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
