// The GPU check's test program (gpu/checklib/native.py): each mode does a
// known amount of GPU work and prints what it did, so that the check can
// compare gpuperf's recording with the program's own account. Built by nvcc
// with -cudart shared, -O2 and without frame pointers: in-process stacks must
// reach main through .eh_frame alone. Stacks are fixed by noinline functions.
//
// usage: check_app MODE [N]
//   timed N       N x (k_long, k_short) on one stream, each kernel between two
//                 CUDA events; prints the events' total time per kernel
//   copies N      N x (H->D, D->H pinned async, D->D, two memsets)
//   graph N       a graph of 3 kernels captured on a stream, launched N times
//   nosync N      N x k_short launched, then main returns without synchronizing
//   exit-thread N N x k_scale, synchronized; then another thread calls exit(7)
//                 while the main thread keeps launching; the program's own
//                 atexit handler, registered after CUDA started (so it runs
//                 before CUDA's teardown), stops the launches first, as a
//                 correct program must
//   exit-racing N the same without that handler: launches race with CUDA's
//                 teardown, which on a real driver often crashes the program
//                 (SIGSEGV inside cudaLaunchKernel) with or without gpuperf
//
// Every mode ends with one line the check reads:
//   check_app: kernels K copies C memsets M graph_launches G
// (for exit-thread and exit-racing, K counts the launches before the exit
// thread starts).
// GPUPERF_CHECK_FAULT=extra-kernel launches one kernel more than it reports:
// the check's own test uses it to show that a count that is off falls short.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <pthread.h>
#include <unistd.h>
#include <cuda_runtime.h>

#define CHECK(call)                                                                  \
    do {                                                                             \
        cudaError_t e_ = (call);                                                     \
        if (e_ != cudaSuccess) {                                                     \
            fprintf(stderr, "check_app: %s: %s\n", #call, cudaGetErrorString(e_));   \
            exit(3);                                                                 \
        }                                                                            \
    } while (0)
#define NOINLINE __attribute__((noinline))

constexpr int N_ELEMS = 1 << 16;
constexpr size_t COPY_BYTES = 1 << 20;

// Spins for about `ns` on the GPU's global timer, so that a kernel's duration
// is known without depending on the device's clock rate.
__device__ void spin_ns(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}
__global__ void k_long(float *x, int n) {
    spin_ns(200000);
    if (threadIdx.x == 0 && blockIdx.x == 0 && n > 0) x[0] += 1.0f;
}
__global__ void k_short(float *x, int n) {
    spin_ns(50000);
    if (threadIdx.x == 0 && blockIdx.x == 0 && n > 0) x[0] += 2.0f;
}
__global__ void k_scale(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= 2.0f;
}

static float *buf;
static int kernels, copies, memsets, graph_launches;

static void report() {
    printf("check_app: kernels %d copies %d memsets %d graph_launches %d\n", kernels, copies,
           memsets, graph_launches);
    fflush(stdout);
}

NOINLINE void launch_long(cudaStream_t s) {
    k_long<<<1, 32, 0, s>>>(buf, N_ELEMS);
    kernels++;
}
NOINLINE void launch_short(cudaStream_t s) {
    k_short<<<1, 32, 0, s>>>(buf, N_ELEMS);
    kernels++;
}
NOINLINE void launch_scale(cudaStream_t s) {
    k_scale<<<256, 256, 0, s>>>(buf, N_ELEMS);
    kernels++;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

NOINLINE void run_timed(int n) {
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    cudaEvent_t *ev = (cudaEvent_t *)calloc(4 * (size_t)n, sizeof(cudaEvent_t));
    for (int i = 0; i < 4 * n; i++) CHECK(cudaEventCreate(&ev[i]));
    for (int i = 0; i < n; i++) {
        CHECK(cudaEventRecord(ev[4 * i], s));
        launch_long(s);
        CHECK(cudaEventRecord(ev[4 * i + 1], s));
        CHECK(cudaEventRecord(ev[4 * i + 2], s));
        launch_short(s);
        CHECK(cudaEventRecord(ev[4 * i + 3], s));
    }
    CHECK(cudaStreamSynchronize(s));
    // Totals and medians: the first pair also times the lazy loading of each
    // kernel's module (between its first event and its launch), which the
    // median leaves out.
    double total[2] = {0, 0};
    double *us = (double *)calloc(2 * (size_t)n, sizeof(double));
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < 2; k++) {
            float ms = 0;
            CHECK(cudaEventElapsedTime(&ms, ev[4 * i + 2 * k], ev[4 * i + 2 * k + 1]));
            total[k] += ms * 1000.0;
            us[k * n + i] = ms * 1000.0;
        }
    }
    for (int k = 0; k < 2; k++) qsort(us + k * n, n, sizeof(double), cmp_double);
    printf("check_app: event k_long count %d total_us %.3f median_us %.3f\n", n, total[0], us[n / 2]);
    printf("check_app: event k_short count %d total_us %.3f median_us %.3f\n", n, total[1], us[n + n / 2]);
    // The events' own cost: a pair with nothing between them, n times after
    // the kernels (the stream is idle), median. The check takes it from the
    // pairs above.
    for (int i = 0; i < n; i++) {
        CHECK(cudaEventRecord(ev[2 * i], s));
        CHECK(cudaEventRecord(ev[2 * i + 1], s));
    }
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < n; i++) {
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
        us[i] = ms * 1000.0;
    }
    qsort(us, n, sizeof(double), cmp_double);
    printf("check_app: event empty_pair count %d median_us %.3f\n", n, us[n / 2]);
    free(us);
    for (int i = 0; i < 4 * n; i++) CHECK(cudaEventDestroy(ev[i]));
    free(ev);
    CHECK(cudaStreamDestroy(s));
}

NOINLINE void run_copies(int n) {
    float *host = (float *)malloc(COPY_BYTES), *pinned = nullptr, *dev = nullptr, *dev2 = nullptr;
    memset(host, 1, COPY_BYTES);
    CHECK(cudaMallocHost((void **)&pinned, COPY_BYTES));
    CHECK(cudaMalloc((void **)&dev, COPY_BYTES));
    CHECK(cudaMalloc((void **)&dev2, COPY_BYTES));
    for (int i = 0; i < n; i++) {
        CHECK(cudaMemcpy(dev, host, COPY_BYTES, cudaMemcpyHostToDevice));
        copies++;
        CHECK(cudaMemcpyAsync(pinned, dev, COPY_BYTES, cudaMemcpyDeviceToHost, 0));
        copies++;
        CHECK(cudaMemcpy(dev2, dev, COPY_BYTES, cudaMemcpyDeviceToDevice));
        copies++;
        CHECK(cudaMemset(dev2, 0, COPY_BYTES));
        memsets++;
        CHECK(cudaMemsetAsync(dev, 0, COPY_BYTES, 0));
        memsets++;
    }
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(dev2));
    CHECK(cudaFree(dev));
    CHECK(cudaFreeHost(pinned));
    free(host);
}

NOINLINE void capture_graph(cudaStream_t s, cudaGraph_t *g) {
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    k_scale<<<256, 256, 0, s>>>(buf, N_ELEMS);
    k_short<<<1, 32, 0, s>>>(buf, N_ELEMS);
    k_scale<<<128, 512, 0, s>>>(buf, N_ELEMS);
    CHECK(cudaStreamEndCapture(s, g));
}
NOINLINE void replay_graph(cudaGraphExec_t e, cudaStream_t s) {
    CHECK(cudaGraphLaunch(e, s));
    graph_launches++;
    kernels += 3;
}
NOINLINE void run_graph(int n) {
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    cudaGraph_t g;
    capture_graph(s, &g);
    cudaGraphExec_t e;
    CHECK(cudaGraphInstantiate(&e, g, 0));
    for (int i = 0; i < n; i++) replay_graph(e, s);
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaGraphExecDestroy(e));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaStreamDestroy(s));
}

NOINLINE void run_nosync(int n) {
    for (int i = 0; i < n; i++) launch_short(0);
}

static void *exit_thread(void *) {
    usleep(20000);
    exit(7);
}
static std::atomic<bool> stop_launching{false}, parked{false};
// Runs first among exit's handlers: no CUDA call may be in flight while the
// CUDA runtime tears itself down.
static void park_launcher() {
    stop_launching = true;
    while (!parked) usleep(100);
}
NOINLINE void run_exit_thread(int n, bool park) {
    for (int i = 0; i < n; i++) launch_scale(0);
    CHECK(cudaDeviceSynchronize());
    report();
    if (park) atexit(park_launcher);
    pthread_t t;
    pthread_create(&t, nullptr, exit_thread, nullptr);
    for (;;) {
        if (stop_launching) {
            parked = true;
            for (;;) pause();
        }
        k_scale<<<256, 256>>>(buf, N_ELEMS);
        usleep(100);
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: check_app MODE [N]\n");
        return 2;
    }
    const char *mode = argv[1];
    int n = argc > 2 ? atoi(argv[2]) : 10;
    CHECK(cudaMalloc((void **)&buf, N_ELEMS * sizeof(float)));
    const char *fault = getenv("GPUPERF_CHECK_FAULT");
    if (fault && !strcmp(fault, "extra-kernel")) {
        launch_scale(0);
        kernels--;
    }
    if (!strcmp(mode, "timed")) run_timed(n);
    else if (!strcmp(mode, "copies")) run_copies(n);
    else if (!strcmp(mode, "graph")) run_graph(n);
    else if (!strcmp(mode, "nosync")) {
        run_nosync(n);
        report();
        return 0;
    } else if (!strcmp(mode, "exit-thread")) run_exit_thread(n, true);
    else if (!strcmp(mode, "exit-racing")) run_exit_thread(n, false);
    else {
        fprintf(stderr, "check_app: unknown mode %s\n", mode);
        return 2;
    }
    CHECK(cudaDeviceSynchronize());
    report();
    return 0;
}
