/* Simulated CUDA (no GPU): a C program, linked against the simulated libcudart
 * alone, that calls the runtime functions PyTorch and NVIDIA's samples need and
 * prints what each gives, one line each, for sim.rs to compare exactly: host
 * functions and stream callbacks in stream order, pointer attributes,
 * capture info and capture joined through an event, user-built
 * graph nodes (host, copy, memset, memory) and a cloned graph, the device's
 * memory bound, IPC refused. No kernels run; the program launches none. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#define CHECK(x)                                                                       \
    do {                                                                               \
        cudaError_t e_ = (x);                                                          \
        if (e_ != cudaSuccess) {                                                       \
            printf("%s failed: %s\n", #x, cudaGetErrorName(e_));                       \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

static char g_order[64];
static int g_n;

static void host_fn(void *tag) { g_order[g_n++] = *(const char *)tag; }

static void callback(cudaStream_t s, cudaError_t status, void *tag) {
    g_order[g_n++] = status == cudaSuccess ? *(const char *)tag : '!';
}

static void destroy_object(void *tag) { g_order[g_n++] = *(const char *)tag; }

int main(void) {
    static const char a = 'a', b = 'b', c = 'c', d = 'd', u = 'u';
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));

    /* Host functions and callbacks run in stream order; a sync waits for them. */
    CHECK(cudaLaunchHostFunc(s, host_fn, (void *)&a));
    CHECK(cudaStreamAddCallback(s, callback, (void *)&b, 0));
    CHECK(cudaLaunchHostFunc(s, host_fn, (void *)&c));
    CHECK(cudaStreamSynchronize(s));
    printf("host functions: %.*s\n", g_n, g_order);

    /* Pointer attributes: device memory, pinned memory, memory CUDA does not know. */
    void *dev, *pinned;
    CHECK(cudaMalloc(&dev, 1 << 20));
    CHECK(cudaMallocHost(&pinned, 4096));
    int stack_var = 0;
    struct cudaPointerAttributes pa;
    CHECK(cudaPointerGetAttributes(&pa, (char *)dev + 100));
    printf("pointer: device type %d device %d same pointer %d\n", pa.type, pa.device,
           pa.devicePointer == (char *)dev + 100);
    CHECK(cudaPointerGetAttributes(&pa, pinned));
    printf("pointer: pinned type %d\n", pa.type);
    CHECK(cudaPointerGetAttributes(&pa, &stack_var));
    printf("pointer: unknown type %d\n", pa.type);

    /* The device's memory is bounded: more than it has fails as on a GPU. */
    size_t free_, total;
    CHECK(cudaMemGetInfo(&free_, &total));
    void *huge = NULL;
    cudaError_t e = cudaMalloc(&huge, total + 1);
    printf("memory: total %zu GiB, beyond it: %s\n", total >> 30, cudaGetErrorName(e));
    (void)cudaGetLastError();

    /* IPC cannot be simulated: CUDA's documented error. */
    cudaIpcMemHandle_t ipc;
    printf("ipc: %s\n", cudaGetErrorName(cudaIpcGetMemHandle(&ipc, dev)));
    (void)cudaGetLastError();

    /* Capture: status and id, a second stream joined by an event, then ended. */
    cudaStream_t s2;
    cudaEvent_t fork;
    CHECK(cudaStreamCreate(&s2));
    CHECK(cudaEventCreate(&fork));
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    enum cudaStreamCaptureStatus st;
    unsigned long long id = 0;
    CHECK(cudaStreamGetCaptureInfo(s, &st, &id, NULL, NULL, NULL, NULL));
    CHECK(cudaMemsetAsync(dev, 1, 4096, s));
    CHECK(cudaEventRecord(fork, s));
    CHECK(cudaStreamWaitEvent(s2, fork, 0));
    enum cudaStreamCaptureStatus st2;
    CHECK(cudaStreamIsCapturing(s2, &st2));
    CHECK(cudaMemsetAsync(dev, 2, 4096, s2));
    cudaGraph_t captured;
    CHECK(cudaStreamEndCapture(s, &captured));
    enum cudaStreamCaptureStatus after;
    CHECK(cudaStreamIsCapturing(s2, &after));
    size_t nodes = 0;
    CHECK(cudaGraphGetNodes(captured, NULL, &nodes));
    printf("capture: active %d id set %d joined %d ended %d nodes %zu\n",
           st == cudaStreamCaptureStatusActive, id != 0, st2 == cudaStreamCaptureStatusActive,
           after == cudaStreamCaptureStatusNone, nodes);

    /* A graph built by hand: memset, copy to the host, host function, memory
     * nodes; cloned, and the clone launched. */
    cudaGraph_t g, clone;
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphNode_t n_set, n_copy, n_host, n_alloc, n_free;
    struct cudaMemsetParams ms = {.dst = dev, .value = 7, .elementSize = 1, .width = 64, .height = 1};
    CHECK(cudaGraphAddMemsetNode(&n_set, g, NULL, 0, &ms));
    CHECK(cudaGraphAddMemcpyNode1D(&n_copy, g, &n_set, 1, pinned, dev, 64, cudaMemcpyDeviceToHost));
    struct cudaHostNodeParams hp = {.fn = host_fn, .userData = (void *)&d};
    CHECK(cudaGraphAddHostNode(&n_host, g, &n_copy, 1, &hp));
    struct cudaMemAllocNodeParams ap;
    memset(&ap, 0, sizeof ap);
    ap.poolProps.allocType = cudaMemAllocationTypePinned;
    ap.poolProps.location.type = cudaMemLocationTypeDevice;
    ap.poolProps.location.id = 0;
    ap.bytesize = 1 << 20;
    CHECK(cudaGraphAddMemAllocNode(&n_alloc, g, &n_host, 1, &ap));
    CHECK(cudaGraphAddMemFreeNode(&n_free, g, &n_alloc, 1, ap.dptr));
    CHECK(cudaGraphClone(&clone, g));
    size_t in_clone = 0;
    CHECK(cudaGraphGetNodes(clone, NULL, &in_clone));
    cudaGraphExec_t x;
    CHECK(cudaGraphInstantiate(&x, clone, 0));
    memset(pinned, 0, 64);
    g_n = 0;
    CHECK(cudaGraphLaunch(x, s));
    CHECK(cudaStreamSynchronize(s));
    printf("graph: %zu nodes cloned, copy gave %d, host function %.*s\n", in_clone,
           ((unsigned char *)pinned)[63], g_n, g_order);

    /* The hand-built graph as Graphviz DOT: its five nodes and four edges. */
    char dot[] = "/tmp/runtime_apis_XXXXXX";
    int fd = mkstemp(dot);
    if (fd < 0)
        return 1;
    close(fd);
    CHECK(cudaGraphDebugDotPrint(g, dot, 0));
    FILE *df = fopen(dot, "r");
    int dot_nodes = 0, dot_edges = 0;
    char line[256];
    while (df && fgets(line, sizeof line, df)) {
        dot_nodes += strstr(line, "[label=") != NULL;
        dot_edges += strstr(line, "->") != NULL;
    }
    if (df)
        fclose(df);
    unlink(dot);
    printf("dot: %d nodes %d edges\n", dot_nodes, dot_edges);

    /* A user object's destructor runs when its graph lets it go. */
    cudaUserObject_t obj;
    CHECK(cudaUserObjectCreate(&obj, (void *)&u, destroy_object, 1, cudaUserObjectNoDestructorSync));
    CHECK(cudaGraphRetainUserObject(g, obj, 1, cudaGraphUserObjectMove));
    g_n = 0;
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaDeviceSynchronize());
    printf("user object: destroyed %.*s\n", g_n, g_order);

    CHECK(cudaGraphExecDestroy(x));
    CHECK(cudaGraphDestroy(clone));
    CHECK(cudaGraphDestroy(captured));
    CHECK(cudaFree(dev));
    CHECK(cudaFreeHost(pinned));
    return 0;
}
