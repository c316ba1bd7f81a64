/* Simulated CUDA benchmark program: a graph of NODES kernel nodes, added with
 * cudaGraphAddKernelNode, instantiated and destroyed N times
 * (cudaGraphInstantiate + cudaGraphExecDestroy). Prints the wall time per
 * instantiation (both calls) and the peak resident set.
 *
 * usage: graph_instantiate NODES N */
#define APP_NAME "graph_instantiate"
#include <sys/resource.h>
#include <time.h>
#include "runtime_app.h"

static void node_stub(void) {}

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    int nodes = atoi(argv[1]), n = atoi(argv[2]);
    static int image;
    void **h = __cudaRegisterFatBinary(&image);
    __cudaRegisterFunction(h, (const char *)node_stub, "_Z4nodev", "node", -1, 0, 0, 0, 0, 0);
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    struct cudaKernelNodeParams p = {0};
    p.func = (void *)node_stub;
    p.gridDim.x = p.gridDim.y = p.gridDim.z = 1;
    p.blockDim.x = p.blockDim.y = p.blockDim.z = 1;
    cudaGraphNode_t prev = NULL;
    for (int i = 0; i < nodes; i++) {
        cudaGraphNode_t node;
        CHECK(cudaGraphAddKernelNode(&node, g, prev ? &prev : NULL, prev ? 1 : 0, &p));
        prev = node;
    }
    for (int warm = 0; warm < 5; warm++) {
        cudaGraphExec_t x;
        CHECK(cudaGraphInstantiate(&x, g, 0));
        CHECK(cudaGraphExecDestroy(x));
    }
    double t0 = now_ns();
    for (int i = 0; i < n; i++) {
        cudaGraphExec_t x;
        CHECK(cudaGraphInstantiate(&x, g, 0));
        CHECK(cudaGraphExecDestroy(x));
    }
    double per = (now_ns() - t0) / n;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("ns_per_instantiation %.1f maxrss_kb %ld\n", per, ru.ru_maxrss);
    CHECK(cudaGraphDestroy(g));
    return 0;
}
