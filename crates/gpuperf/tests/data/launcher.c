/* The launching side of the in-process stack tests, on the simulated CUDA
 * runtime (sim/, no GPU): a shared library linked against the simulation's
 * libcudart.so.13, whose driver loads the injection library at cuInit from
 * CUDA_INJECTION64_PATH, as NVIDIA's does. It launches through two levels of
 * its own into cudaLaunchKernel (_Z6layersPf, 2 µs in the simulation's cost
 * model). C programs link it; Python loads it with ctypes.
 * launcher_graph makes a CUDA graph: a launch under stream capture
 * (_Z8capturedPf, 4 µs), a node added explicitly (_Z5addedPf, 1 µs),
 * instantiation (the simulated CUPTI reports the nodes' clones) and a graph
 * launch running both.
 * Built with plain -O2, and with -fomit-frame-pointer, by the tests. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

/* nvcc's registration, done by hand: a host stub names a device function. */
void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFunction(void **h, const char *hostFun, char *deviceFun, const char *deviceName,
                            int thread_limit, void *tid, void *bid, void *bDim, void *gDim, int *wSize);
#define STUB(name, n) \
    __attribute__((noinline)) static void name(void) { __asm__ volatile("" ::"r"(n)); }
STUB(layers_stub, 1)
STUB(captured_stub, 2)
STUB(added_stub, 3)

#define CHECK(call)                                                                    \
    do {                                                                               \
        cudaError_t e_ = (call);                                                       \
        if (e_ != cudaSuccess) {                                                       \
            fprintf(stderr, "launcher: %s: %s\n", #call, cudaGetErrorString(e_));      \
            exit(4);                                                                   \
        }                                                                              \
    } while (0)

/* What lib_inner launches, and where: the layers kernel on the legacy stream,
 * or, under capture, the captured one on the capturing stream. The cost model
 * charges 1000 ns + threads / 256 ns: 1000 threads (2 µs), 768000 (4 µs). */
static const void *stub_now = (const void *)layers_stub;
static unsigned grid_now = 4, block_now = 250;
static cudaStream_t stream_now;
static volatile int sink;

/* Registers the kernels and starts CUDA (which loads the injection library
 * when CUDA_INJECTION64_PATH names one); 0 on success. */
int launcher_init(void) {
    static int image;
    void **h = __cudaRegisterFatBinary(&image);
    __cudaRegisterFunction(h, (const char *)layers_stub, "_Z6layersPf", "_Z6layersPf", -1, 0, 0, 0, 0, 0);
    __cudaRegisterFunction(h, (const char *)captured_stub, "_Z8capturedPf", "_Z8capturedPf", -1, 0, 0, 0,
                           0, 0);
    __cudaRegisterFunction(h, (const char *)added_stub, "_Z5addedPf", "_Z5addedPf", -1, 0, 0, 0, 0, 0);
    return cudaFree(NULL) == cudaSuccess ? 0 : -1;
}

__attribute__((noinline)) int lib_inner(void) {
    dim3 g = {grid_now, 1, 1}, b = {block_now, 1, 1};
    float *arg = NULL;
    void *args[] = {&arg};
    int r = cudaLaunchKernel(stub_now, g, b, args, 0, stream_now) == cudaSuccess;
    sink += r; /* no tail call: the frame stays on the stack */
    return r + 1;
}

__attribute__((noinline)) int lib_enter(void) {
    int r = lib_inner();
    sink += r;
    return r + 1;
}

/* One launch (its record is flushed at exit, as the program makes no
 * synchronizing call that the tests would count). */
int launcher_launch(void) {
    int r = lib_enter();
    sink += r;
    return r;
}

/* Stream capture of one launch: it becomes a node of the captured graph. */
__attribute__((noinline)) int capture_step(cudaStream_t s, cudaGraph_t *graph) {
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    stub_now = (const void *)captured_stub;
    grid_now = 3000, block_now = 256;
    stream_now = s;
    int r = lib_enter();
    stub_now = (const void *)layers_stub;
    grid_now = 4, block_now = 250;
    stream_now = 0;
    CHECK(cudaStreamEndCapture(s, graph));
    sink += r;
    return r + 1;
}

/* cudaGraphAddKernelNode: a node made without a launch. */
__attribute__((noinline)) int add_node(cudaGraph_t graph) {
    cudaGraphNode_t node;
    float *arg = NULL;
    void *args[] = {&arg};
    struct cudaKernelNodeParams p = {
        .func = (void *)added_stub,
        .gridDim = {1, 1, 1},
        .blockDim = {1, 1, 1},
        .kernelParams = args,
    };
    CHECK(cudaGraphAddKernelNode(&node, graph, NULL, 0, &p));
    sink += 1;
    return 1;
}

/* cudaGraphLaunch of the instantiated graph: both nodes run. */
__attribute__((noinline)) int replay(cudaGraphExec_t exec, cudaStream_t s) {
    CHECK(cudaGraphLaunch(exec, s));
    sink += 1;
    return 1;
}

int launcher_graph(void) {
    cudaStream_t s;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK(cudaStreamCreate(&s));
    int r = capture_step(s, &graph) + add_node(graph);
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    r += replay(exec, s);
    sink += r;
    return r;
}
