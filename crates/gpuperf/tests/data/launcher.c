/* The launching side of the in-process stack tests (no GPU): a shared library
 * that plays the CUDA driver, as cuda_app.c does (it loads the library named by
 * CUDA_INJECTION64_PATH and calls InitializeInjection, as cuInit does), then
 * launches through two levels of its own into cudaLaunchKernel of a fake
 * libcudart.so.13 (profiler/tests/data/fake_cudart.c), whose API callback and
 * kernel record are played through the MOCK libcupti the injection library
 * loaded (GPUPERF_CUPTI_PATH). C programs link it; Python loads it with ctypes.
 * launcher_graph plays a CUDA graph: a launch under stream capture, a node added
 * explicitly, instantiation (node clones) and a graph launch running both.
 * Built with plain -O2, and with -fomit-frame-pointer, by the tests. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int cudaLaunchKernel(uint32_t corr);
extern void (*fake_cupti_callback)(uint32_t corr);

static void (*mock_api)(int, int, uint32_t, int);
static void (*mock_kernel)(uint32_t, uint64_t, uint64_t, const char *, uint32_t, uint64_t,
                           uint32_t);
static uint64_t (*mock_now)(void);
static void (*mock_graph_node_created)(uint64_t);
static void (*mock_graph_node_cloned)(uint64_t, uint64_t);
/* While set, a launch is being captured into a graph: it becomes this node. */
static uint64_t capturing;
static uint32_t next_corr;
static volatile int sink;

static void callback(uint32_t corr) {
    if (capturing) { /* no GPU work now: CUPTI reports the node it makes */
        mock_api(2, 211, corr, 1);
        mock_graph_node_created(capturing);
        mock_api(2, 211, corr, 0);
        return;
    }
    mock_api(2, 211, corr, 1); /* runtime domain, cudaLaunchKernel_v7000 */
    mock_api(2, 211, corr, 0);
    uint64_t t = mock_now();
    mock_kernel(corr, t + 1000, t + 3000, "_Z6layersPf", 0, 0, 7);
}

/* Loads the injection library and the mock; 0 on success. */
int launcher_init(void) {
    const char *inj = getenv("CUDA_INJECTION64_PATH");
    if (!inj)
        return 0; /* not injected: launches still go through cudaLaunchKernel */
    void *h = dlopen(inj, RTLD_NOW | RTLD_LOCAL);
    int (*init)(void) = h ? (int (*)(void))dlsym(h, "InitializeInjection") : NULL;
    if (!init || init() != 1) {
        fprintf(stderr, "launcher: cannot load %s\n", inj);
        return -1;
    }
    void *mock = dlopen(getenv("GPUPERF_CUPTI_PATH"), RTLD_NOW | RTLD_NOLOAD);
    if (!mock)
        return -1;
    *(void **)&mock_api = dlsym(mock, "mock_api");
    *(void **)&mock_kernel = dlsym(mock, "mock_kernel");
    *(void **)&mock_now = dlsym(mock, "mock_now");
    *(void **)&mock_graph_node_created = dlsym(mock, "mock_graph_node_created");
    *(void **)&mock_graph_node_cloned = dlsym(mock, "mock_graph_node_cloned");
    if (!mock_api || !mock_kernel || !mock_now || !mock_graph_node_created ||
        !mock_graph_node_cloned)
        return -1;
    fake_cupti_callback = callback;
    return 0;
}

__attribute__((noinline)) int lib_inner(void) {
    int r = cudaLaunchKernel(__atomic_add_fetch(&next_corr, 1, __ATOMIC_RELAXED));
    sink += r; /* no tail call: the frame stays on the stack */
    return r + 1;
}

__attribute__((noinline)) int lib_enter(void) {
    int r = lib_inner();
    sink += r;
    return r + 1;
}

/* One launch; returns its correlation id's successor count. */
int launcher_launch(void) {
    int r = lib_enter();
    sink += r;
    return r;
}

/* Stream capture of one launch: it becomes graph node 101. */
__attribute__((noinline)) int capture_step(void) {
    capturing = 101;
    int r = lib_enter();
    capturing = 0;
    sink += r;
    return r + 1;
}

/* cudaGraphAddKernelNode (not a recorded call): node 102. */
__attribute__((noinline)) int add_node(void) {
    mock_graph_node_created(102);
    sink += 1;
    return 1;
}

/* cudaGraphLaunch of the instantiated graph: its nodes 201 and 202 run. */
__attribute__((noinline)) int replay(void) {
    uint32_t corr = __atomic_add_fetch(&next_corr, 1, __ATOMIC_RELAXED);
    mock_api(2, 311, corr, 1); /* cudaGraphLaunch_v10000 */
    mock_api(2, 311, corr, 0);
    uint64_t t = mock_now();
    mock_kernel(corr, t + 1000, t + 5000, "_Z8capturedPf", 1, 201, 7);
    mock_kernel(corr, t + 6000, t + 7000, "_Z5addedPf", 1, 202, 7);
    sink += 1;
    return 1;
}

int launcher_graph(void) {
    int r = capture_step() + add_node();
    /* cudaGraphInstantiate copies the nodes. */
    mock_graph_node_cloned(201, 101);
    mock_graph_node_cloned(202, 102);
    r += replay();
    sink += r;
    return r;
}
