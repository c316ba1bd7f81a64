// Test program for the simulated CUDA runtime (no GPU: the kernels here never run there); each mode exercises one path that gpuperf's tests check.
// Built by nvcc with -cudart shared. Stacks are fixed by noinline functions.
//
// usage: sim_app MODE [N] [...]
//   chevron N [C]  N x (k_scale, k_bias) through <<<>>> on the default stream; exits C
//   exc N          N x k_scale through cudaLaunchKernelExC (cudaLaunchKernelEx)
//   graph N        a graph of 3 kernels captured on a stream, launched N times
//   graph-add N    a graph of 2 kernels added with cudaGraphAddKernelNode (the second
//                  depending on the first), launched N times
//   copies         H->D, D->H (async, pinned), D->D copies and two memsets; checks the bytes
//   sync N         N x 1 ms kernels; prints the event time and the wall time of the sync
//   sync-loop N    N x (1 ms kernel, cudaStreamSynchronize), then cudaDeviceSynchronize
//   devices N      N x k_scale on device 0, then N on device 1
//   threads T N    T threads, each N x k_scale on its own stream
//   fork N [C]     a child process does the same N x chevron; the parent exits C
//   wait-signal N  N x chevron, then "ready", then waits for SIGINT and exits 130
//   named-threads T N  T threads named "early-I" for their first launch, then
//                  renamed "worker-I" for N more launches; one thread keeps its name
//                  "kept" and runs until the process exits
//   until-signal   k_scale launches until a signal ends it (no handler); prints the
//                  count after each launch returned
//   loop N T       N x k_scale on T threads (1 launch per iteration), for the benchmark
//   exit-early N C N x chevron, a device sync, "synced" printed, then _exit(C): no
//                  exit handler runs (as a process ended by a signal would not)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cuda_runtime.h>

#define CHECK(call)                                                                  \
    do {                                                                             \
        cudaError_t e_ = (call);                                                     \
        if (e_ != cudaSuccess) {                                                     \
            fprintf(stderr, "sim_app: %s: %s\n", #call, cudaGetErrorString(e_));     \
            exit(3);                                                                 \
        }                                                                            \
    } while (0)
#define NOINLINE __attribute__((noinline))

constexpr int N_ELEMS = 1 << 16;

__global__ void k_scale(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= 2.0f;
}
__global__ void k_bias(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}
__global__ void k_square(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= x[i];
}

static float *buf;
static volatile sig_atomic_t interrupted;

NOINLINE void launch_scale(cudaStream_t s) { k_scale<<<256, 256, 0, s>>>(buf, N_ELEMS); }
NOINLINE void launch_bias(cudaStream_t s) { k_bias<<<128, 512, 0, s>>>(buf, N_ELEMS); }
NOINLINE void launch_square(cudaStream_t s) { k_square<<<64, 1024, 0, s>>>(buf, N_ELEMS); }

NOINLINE void run_chevron(int n) {
    for (int i = 0; i < n; i++) {
        launch_scale(0);
        launch_bias(0);
    }
    CHECK(cudaDeviceSynchronize());
}

NOINLINE void launch_exc(cudaStream_t s) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(16);
    cfg.blockDim = dim3(64);
    cfg.stream = s;
    CHECK(cudaLaunchKernelEx(&cfg, k_scale, buf, N_ELEMS));
}

NOINLINE void run_exc(int n) {
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    for (int i = 0; i < n; i++) launch_exc(s);
    CHECK(cudaStreamSynchronize(s));
}

NOINLINE void wait_event(cudaStream_t s, cudaEvent_t e) { CHECK(cudaStreamWaitEvent(s, e, 0)); }

/* Stream b waits on the GPU for each kernel of stream a; the host never waits
   until the end. */
NOINLINE void run_stream_wait(int n) {
    cudaStream_t a, b;
    CHECK(cudaStreamCreate(&a));
    CHECK(cudaStreamCreate(&b));
    cudaEvent_t e;
    CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    for (int i = 0; i < n; i++) {
        launch_scale(a);
        CHECK(cudaEventRecord(e, a));
        wait_event(b, e);
        launch_bias(b);
    }
    CHECK(cudaDeviceSynchronize());
}

NOINLINE void launch_graph(cudaGraphExec_t g, cudaStream_t s) { CHECK(cudaGraphLaunch(g, s)); }

NOINLINE void run_graph(int n) {
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaGraph_t graph;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    launch_scale(s);
    launch_bias(s);
    launch_square(s);
    CHECK(cudaStreamEndCapture(s, &graph));
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < n; i++) launch_graph(exec, s);
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
}

static void *node_args[2];
static int node_n = N_ELEMS;

NOINLINE cudaGraphNode_t add_node(cudaGraph_t g, const void *func, dim3 grid, dim3 block,
                                  const cudaGraphNode_t *dep) {
    cudaKernelNodeParams p = {};
    p.func = const_cast<void *>(func);
    p.gridDim = grid;
    p.blockDim = block;
    node_args[0] = &buf;
    node_args[1] = &node_n;
    p.kernelParams = node_args;
    cudaGraphNode_t node;
    CHECK(cudaGraphAddKernelNode(&node, g, dep, dep ? 1 : 0, &p));
    return node;
}

NOINLINE void run_graph_add(int n) {
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaGraph_t graph;
    CHECK(cudaGraphCreate(&graph, 0));
    cudaGraphNode_t first = add_node(graph, (const void *)k_scale, dim3(256), dim3(256), nullptr);
    add_node(graph, (const void *)k_bias, dim3(128), dim3(512), &first);
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < n; i++) launch_graph(exec, s);
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
}

NOINLINE void copy_in(void *d, const void *h, size_t n) { CHECK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice)); }
NOINLINE void copy_out(void *h, const void *d, size_t n, cudaStream_t s) {
    CHECK(cudaMemcpyAsync(h, d, n, cudaMemcpyDeviceToHost, s));
}
NOINLINE void copy_across(void *d2, const void *d, size_t n) { CHECK(cudaMemcpy(d2, d, n, cudaMemcpyDeviceToDevice)); }
NOINLINE void clear(void *d, size_t n) { CHECK(cudaMemset(d, 0, n)); }
NOINLINE void fill(void *d, size_t n, cudaStream_t s) { CHECK(cudaMemsetAsync(d, 0xab, n, s)); }

NOINLINE void run_copies() {
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    unsigned char *pageable = (unsigned char *)malloc(8192), *pinned, *d, *d2;
    CHECK(cudaMallocHost((void **)&pinned, 4096));
    CHECK(cudaMalloc((void **)&d, 8192));
    CHECK(cudaMalloc((void **)&d2, 8192));
    for (int i = 0; i < 8192; i++) pageable[i] = (unsigned char)i;
    copy_in(d, pageable, 8192);
    copy_across(d2, d, 1024);
    copy_out(pinned, d2, 4096, s);
    CHECK(cudaStreamSynchronize(s));
    int ok = 1;
    for (int i = 0; i < 1024; i++) ok &= pinned[i] == (unsigned char)i;
    for (int i = 1024; i < 4096; i++) ok &= pinned[i] == 0;
    clear(d, 8192);
    fill(d, 4096, s);
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(pageable, d, 8192, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 4096; i++) ok &= pageable[i] == 0xab;
    for (int i = 4096; i < 8192; i++) ok &= pageable[i] == 0;
    printf("bytes %s\n", ok ? "ok" : "WRONG");
}

static double now_ms() {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

NOINLINE void launch_long(cudaStream_t s) {
    // 1000 ns + 256e6 threads / 256 per ns ~= 1 ms in the cost model.
    k_scale<<<250000, 1024, 0, s>>>(buf, N_ELEMS);
}

NOINLINE void run_sync(int n) {
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    CHECK(cudaEventRecord(a, 0));
    for (int i = 0; i < n; i++) launch_long(0);
    CHECK(cudaEventRecord(b, 0));
    double t0 = now_ms();
    CHECK(cudaDeviceSynchronize());
    double wall = now_ms() - t0;
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    printf("event_ms %.3f sync_wall_ms %.3f\n", ms, wall);
}

NOINLINE void wait_stream(cudaStream_t s) { CHECK(cudaStreamSynchronize(s)); }

NOINLINE void wait_device() { CHECK(cudaDeviceSynchronize()); }

NOINLINE void run_sync_loop(int n) {
    for (int i = 0; i < n; i++) {
        launch_long(0);
        wait_stream(0);
    }
    wait_device();
    CHECK(cudaGetLastError());  // keeps wait_device() from being a tail call
}

NOINLINE void launch_on_device(int dev, int n) {
    CHECK(cudaSetDevice(dev));
    float *x;
    CHECK(cudaMalloc((void **)&x, N_ELEMS * sizeof(float)));
    for (int i = 0; i < n; i++) k_scale<<<256, 256>>>(x, N_ELEMS);
    CHECK(cudaDeviceSynchronize());
}

NOINLINE void run_devices(int n) {
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    cudaDeviceProp p;
    for (int d = 0; d < count; d++) {
        CHECK(cudaGetDeviceProperties(&p, d));
        printf("device %d: %s\n", d, p.name);
    }
    launch_on_device(0, n);
    launch_on_device(1, n);
}

struct job {
    int n;
};

NOINLINE void *thread_body(void *arg) {
    job *j = (job *)arg;
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    for (int i = 0; i < j->n; i++) launch_scale(s);
    CHECK(cudaStreamSynchronize(s));
    return nullptr;
}

NOINLINE void run_threads(int t, int n) {
    pthread_t th[64];
    job j = {n};
    for (int i = 0; i < t; i++) pthread_create(&th[i], nullptr, thread_body, &j);
    for (int i = 0; i < t; i++) pthread_join(th[i], nullptr);
}

struct named_job {
    int index, n;
};

NOINLINE void *named_body(void *arg) {
    named_job *j = (named_job *)arg;
    char name[16];
    snprintf(name, sizeof name, "early-%d", j->index);
    pthread_setname_np(pthread_self(), name);
    k_scale<<<1, 32>>>(buf, 32);
    snprintf(name, sizeof name, "worker-%d", j->index);
    pthread_setname_np(pthread_self(), name);
    for (int i = 0; i < j->n; i++) k_scale<<<1, 32>>>(buf, 32);
    CHECK(cudaDeviceSynchronize());
    return nullptr;
}

static volatile int kept_ready;

NOINLINE void *kept_body(void *) {
    pthread_setname_np(pthread_self(), "kept");
    k_scale<<<1, 32>>>(buf, 32);
    CHECK(cudaDeviceSynchronize());
    kept_ready = 1;
    for (;;) pause();  // still running at exit
    return nullptr;
}

NOINLINE void run_named_threads(int t, int n) {
    pthread_t th[64], kept;
    named_job j[64];
    for (int i = 0; i < t; i++) {
        j[i] = {i, n};
        pthread_create(&th[i], nullptr, named_body, &j[i]);
    }
    for (int i = 0; i < t; i++) pthread_join(th[i], nullptr);
    pthread_create(&kept, nullptr, kept_body, nullptr);
    while (!kept_ready) usleep(1000);
}

NOINLINE void run_until_signal() {
    for (long i = 1;; i++) {
        k_scale<<<1, 32>>>(buf, 32);
        printf("%ld\n", i);
        fflush(stdout);
    }
}

// The benchmark's loop: one launch per iteration, nothing else.
NOINLINE void *loop_body(void *arg) {
    job *j = (job *)arg;
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int i = 0; i < j->n; i++) k_scale<<<1, 32, 0, s>>>(buf, 32);
    CHECK(cudaStreamSynchronize(s));
    return nullptr;
}

NOINLINE void run_loop(int n, int t) {
    pthread_t th[64];
    job j = {n / t};
    double t0 = now_ms();
    for (int i = 0; i < t; i++) pthread_create(&th[i], nullptr, loop_body, &j);
    for (int i = 0; i < t; i++) pthread_join(th[i], nullptr);
    double ms = now_ms() - t0;
    printf("loop %d launches on %d threads in %.3f ms: %.1f ns/launch\n", j.n * t, t, ms, ms * 1e6 / (j.n * t));
}

static void on_sigint(int) { interrupted = 1; }

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    const char *mode = argv[1];
    int n = argc > 2 ? atoi(argv[2]) : 10;
    int m = argc > 3 ? atoi(argv[3]) : 0;
    sigset_t block, old;
    if (!strcmp(mode, "wait-signal")) {
        signal(SIGINT, on_sigint);
        sigemptyset(&block);
        sigaddset(&block, SIGINT);
        sigprocmask(SIG_BLOCK, &block, &old);  // no lost wake-up before sigsuspend
    }
    pid_t child = !strcmp(mode, "fork") ? fork() : -1;
    // The first CUDA call: it loads the injection library, as cuInit does.
    CHECK(cudaMalloc((void **)&buf, N_ELEMS * sizeof(float)));
    if (!strcmp(mode, "chevron") || !strcmp(mode, "fork") || !strcmp(mode, "wait-signal")) run_chevron(n);
    else if (!strcmp(mode, "exc")) run_exc(n);
    else if (!strcmp(mode, "graph")) run_graph(n);
    else if (!strcmp(mode, "graph-add")) run_graph_add(n);
    else if (!strcmp(mode, "copies")) run_copies();
    else if (!strcmp(mode, "sync")) run_sync(n);
    else if (!strcmp(mode, "stream-wait")) run_stream_wait(n);
    else if (!strcmp(mode, "sync-loop")) run_sync_loop(n);
    else if (!strcmp(mode, "devices")) run_devices(n);
    else if (!strcmp(mode, "threads")) run_threads(n, m);
    else if (!strcmp(mode, "named-threads")) run_named_threads(n, m);
    else if (!strcmp(mode, "until-signal")) run_until_signal();
    else if (!strcmp(mode, "loop")) run_loop(n, m > 0 ? m : 1);
    else if (!strcmp(mode, "exit-early")) {
        run_chevron(n);
        CHECK(cudaDeviceSynchronize());
        printf("synced %d\n", 2 * n);
        fflush(stdout);
        _exit(m);
    } else return 2;
    if (!strcmp(mode, "fork") || !strcmp(mode, "chevron") || !strcmp(mode, "wait-signal")) {
        printf("pid %d uid %d gid %d launched %d\n", getpid(), getuid(), getgid(), 2 * n);
        fflush(stdout);
    }
    if (child == 0) return 0;
    if (child > 0) waitpid(child, nullptr, 0);
    if (!strcmp(mode, "wait-signal")) {
        printf("ready\n");
        fflush(stdout);
        while (!interrupted) sigsuspend(&old);
        printf("interrupted\n");
        exit(130);
    }
    // chevron and fork: the third argument is the exit code.
    return !strcmp(mode, "chevron") || !strcmp(mode, "fork") ? m : 0;
}
