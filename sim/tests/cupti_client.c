/* Tests of the simulated CUPTI (no GPU; it checks the simulation, not real CUPTI): a CUPTI client in the program itself, checked against NVIDIA's real libcupti where one can be.
 *
 * usage: cupti_client SCENARIO [REAL_LIBCUPTI]
 *   names REAL     every runtime and driver callback name, compared with the real library's
 *   records REAL   a workload's activity buffers, walked by the real library's parser
 *   nesting        the callback order and correlation ids of runtime and driver calls,
 *                  and which call's id each kernel, copy and memset record carries
 *   flush          cuptiActivityFlushAll's flag semantics and the worker thread
 *   subscribers    one subscriber at a time
 *   dropped        records without buffer space are counted
 *   graph          graph node callbacks of stream capture and instantiation, and the
 *                  graph and node ids of the launched graph's records
 * Prints one result per line; the Rust test compares them. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti.h>

#define CHECK(x)                                                                       \
    do {                                                                               \
        int r_ = (int)(x);                                                             \
        if (r_ != 0) {                                                                 \
            fprintf(stderr, "cupti_client: %s = %d (line %d)\n", #x, r_, __LINE__);     \
            exit(3);                                                                   \
        }                                                                              \
    } while (0)

/* nvcc's registration, done by hand: a host stub names a device function. */
void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFunction(void **h, const char *hostFun, char *deviceFun, const char *deviceName,
                            int thread_limit, void *tid, void *bid, void *bDim, void *gDim, int *wSize);
static void host_stub(void) {}
static void long_stub(void) {}

static void register_kernels(void) {
    static int image;
    void **h = __cudaRegisterFatBinary(&image);
    __cudaRegisterFunction(h, (const char *)host_stub, "_Z6kernelv", "kernel", -1, 0, 0, 0, 0, 0);
    __cudaRegisterFunction(h, (const char *)long_stub, "_Z4longv", "long", -1, 0, 0, 0, 0, 0);
}

static void launch(const void *stub, unsigned grid, unsigned block, cudaStream_t s) {
    dim3 g = {grid, 1, 1}, b = {block, 1, 1};
    CHECK(cudaLaunchKernel(stub, g, b, NULL, 0, s));
}

/* ---------------------------------------------------------------- buffers */

#define MAX_BUFS 64
static struct {
    uint8_t *buf;
    size_t valid;
    int worker; /* delivered on another thread than main */
} g_bufs[MAX_BUFS];
static int g_nbufs;
static size_t g_buf_size = 1 << 20;
static int g_refuse;
static pthread_t g_main;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

static void CUPTIAPI requested(uint8_t **buf, size_t *size, size_t *max) {
    *buf = g_refuse ? NULL : aligned_alloc(8, g_buf_size);
    *size = g_refuse ? 0 : g_buf_size;
    *max = 0;
}

static void CUPTIAPI completed(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid) {
    pthread_mutex_lock(&g_mu);
    if (g_nbufs < MAX_BUFS) {
        g_bufs[g_nbufs].buf = buf;
        g_bufs[g_nbufs].valid = valid;
        g_bufs[g_nbufs].worker = !pthread_equal(pthread_self(), g_main);
        g_nbufs++;
    }
    pthread_mutex_unlock(&g_mu);
}

typedef CUptiResult (*next_fn)(uint8_t *, size_t, CUpti_Activity **);

/* Counts records per kind in every buffer delivered since `from`. */
static int walk(next_fn next, int from, int counts[64]) {
    int total = 0;
    memset(counts, 0, 64 * sizeof(int));
    for (int i = from; i < g_nbufs; i++) {
        CUpti_Activity *r = NULL;
        while (next(g_bufs[i].buf, g_bufs[i].valid, &r) == CUPTI_SUCCESS) {
            counts[r->kind & 63]++;
            total++;
        }
    }
    return total;
}

static void *real_cupti(const char *path) {
    /* A namespace of its own: it shares its soname with the simulated one. */
    void *h = dlmopen(LM_ID_NEWLM, path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "cupti_client: %s\n", dlerror());
        exit(3);
    }
    return h;
}

/* ---------------------------------------------------------------- scenarios */

static int names(const char *real) {
    void *h = real_cupti(real);
    CUptiResult (*get)(CUpti_CallbackDomain, uint32_t, const char **) = dlsym(h, "cuptiGetCallbackName");
    int compared = 0, differ = 0;
    for (int d = CUPTI_CB_DOMAIN_DRIVER_API; d <= CUPTI_CB_DOMAIN_RUNTIME_API; d++)
        for (uint32_t id = 0; id < 2048; id++) {
            const char *a = NULL, *b = NULL;
            CUptiResult ra = cuptiGetCallbackName(d, id, &a), rb = get(d, id, &b);
            compared++;
            if ((ra == CUPTI_SUCCESS) != (rb == CUPTI_SUCCESS) ||
                (ra == CUPTI_SUCCESS && strcmp(a, b) != 0)) {
                if (differ++ < 5)
                    printf("differ %d %u sim=%s real=%s\n", d, id, ra ? "-" : a, rb ? "-" : b);
            }
        }
    printf("names compared %d differ %d\n", compared, differ);
    return 0;
}

static int records(const char *real) {
    void *h = real_cupti(real);
    next_fn real_next = (next_fn)dlsym(h, "cuptiActivityGetNextRecord");
    CUpti_ActivityKind kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                  CUPTI_ACTIVITY_KIND_MEMCPY2, CUPTI_ACTIVITY_KIND_MEMSET,
                                  CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, CUPTI_ACTIVITY_KIND_DEVICE,
                                  CUPTI_ACTIVITY_KIND_CONTEXT, CUPTI_ACTIVITY_KIND_RUNTIME,
                                  CUPTI_ACTIVITY_KIND_DRIVER};
    CHECK(cuptiActivityRegisterCallbacks(requested, completed));
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        CHECK(cuptiActivityEnable(kinds[i]));
    register_kernels();
    void *d0, *d1, *h0 = calloc(1, 4096);
    CHECK(cudaSetDevice(1));
    CHECK(cudaMalloc(&d1, 4096));
    CHECK(cudaSetDevice(0));
    CHECK(cudaMalloc(&d0, 4096));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    for (int i = 0; i < 3; i++)
        launch((const void *)host_stub, 4, 32, s);
    CHECK(cudaMemcpy(d0, h0, 4096, cudaMemcpyHostToDevice));
    CHECK(cudaMemsetAsync(d0, 1, 4096, s));
    CHECK(cudaMemcpyPeer(d1, 1, d0, 0, 4096));
    CHECK(cudaStreamSynchronize(s));
    CUdevice dev; /* a driver call of the program's own */
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
    int sim_counts[64], real_counts[64];
    int a = walk(cuptiActivityGetNextRecord, 0, sim_counts), b = walk(real_next, 0, real_counts);
    printf("records sim %d real %d\n", a, b);
    for (int k = 0; k < 64; k++)
        if (sim_counts[k] || real_counts[k])
            printf("kind %d sim %d real %d\n", k, sim_counts[k], real_counts[k]);
    return 0;
}

#define MAX_EVENTS 128
static struct {
    int site, domain;
    uint32_t cbid, corr;
} g_events[MAX_EVENTS];
static int g_nevents;

static void CUPTIAPI on_callback(void *ud, CUpti_CallbackDomain d, CUpti_CallbackId id, const void *data) {
    const CUpti_CallbackData *c = data;
    if (g_nevents < MAX_EVENTS && (d == CUPTI_CB_DOMAIN_RUNTIME_API || d == CUPTI_CB_DOMAIN_DRIVER_API)) {
        g_events[g_nevents].site = c->callbackSite;
        g_events[g_nevents].domain = d;
        g_events[g_nevents].cbid = id;
        g_events[g_nevents].corr = c->correlationId;
        g_nevents++;
    }
}

/* The API call (by callback name) whose enter carried `corr`, or "none". */
static const char *call_of(uint32_t corr) {
    for (int i = 0; i < g_nevents; i++)
        if (g_events[i].site == CUPTI_API_ENTER && g_events[i].corr == corr) {
            const char *name = "?";
            cuptiGetCallbackName(g_events[i].domain, g_events[i].cbid, &name);
            return name;
        }
    return corr ? "unknown" : "none";
}

static int nesting(void) {
    CUpti_SubscriberHandle sub;
    register_kernels();
    void *d0, *d1, *h0 = calloc(1, 4096);
    CHECK(cudaSetDevice(1));
    CHECK(cudaMalloc(&d1, 4096));
    CHECK(cudaSetDevice(0));
    CHECK(cudaMalloc(&d0, 4096)); /* initializes, before the callbacks are on */
    CHECK(cuptiSubscribe(&sub, on_callback, NULL));
    CHECK(cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API));
    CHECK(cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_DRIVER_API));
    CHECK(cuptiActivityRegisterCallbacks(requested, completed));
    CUpti_ActivityKind kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                  CUPTI_ACTIVITY_KIND_MEMCPY2, CUPTI_ACTIVITY_KIND_MEMSET};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        CHECK(cuptiActivityEnable(kinds[i]));
    launch((const void *)host_stub, 1, 1, 0);
    CUdevice dev;
    CHECK(cuDeviceGet(&dev, 0));
    int first_record_call = g_nevents;
    CHECK(cudaMemcpy(d0, h0, 4096, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(d0, 1, 4096));
    CHECK(cudaMemcpyPeer(d1, 1, d0, 0, 4096));
    CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
    CHECK(cuptiUnsubscribe(sub));
    for (int i = 0; i < first_record_call; i++) {
        const char *name = "?";
        cuptiGetCallbackName(g_events[i].domain, g_events[i].cbid, &name);
        printf("%s %s %s corr %u\n", g_events[i].site == CUPTI_API_ENTER ? "enter" : "exit",
               g_events[i].domain == CUPTI_CB_DOMAIN_RUNTIME_API ? "runtime" : "driver", name,
               g_events[i].corr - g_events[0].corr);
    }
    /* Which call each GPU record names. */
    for (int i = 0; i < g_nbufs; i++) {
        CUpti_Activity *r = NULL;
        while (cuptiActivityGetNextRecord(g_bufs[i].buf, g_bufs[i].valid, &r) == CUPTI_SUCCESS) {
            switch (r->kind) {
            case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
                printf("kernel corr %s\n", call_of(((CUpti_ActivityKernel10 *)r)->correlationId));
                break;
            case CUPTI_ACTIVITY_KIND_MEMCPY: {
                CUpti_ActivityMemcpy6 *m = (CUpti_ActivityMemcpy6 *)r;
                printf("memcpy corr %s runtime corr %s\n", call_of(m->correlationId),
                       call_of(m->runtimeCorrelationId));
                break;
            }
            case CUPTI_ACTIVITY_KIND_MEMCPY2:
                printf("peer copy corr %s\n", call_of(((CUpti_ActivityMemcpyPtoP4 *)r)->correlationId));
                break;
            case CUPTI_ACTIVITY_KIND_MEMSET:
                printf("memset corr %s\n", call_of(((CUpti_ActivityMemset4 *)r)->correlationId));
                break;
            default: break;
            }
        }
    }
    return 0;
}

static uint64_t g_clock_offset = 1000000000000ull;
static uint64_t CUPTIAPI fake_clock(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec + g_clock_offset;
}

static void kernel_times(int from, const char *what) {
    for (int i = from; i < g_nbufs; i++) {
        CUpti_Activity *r = NULL;
        while (cuptiActivityGetNextRecord(g_bufs[i].buf, g_bufs[i].valid, &r) == CUPTI_SUCCESS)
            if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
                CUpti_ActivityKernel10 *k = (CUpti_ActivityKernel10 *)r;
                printf("%s kernel %s start %s end %s\n", what, k->name, k->start ? "set" : "0",
                       k->end == 0 ? "0" : k->end > k->start ? "after-start" : "BAD");
            }
    }
}

static int flush(void) {
    CHECK(cuptiActivityRegisterTimestampCallback(fake_clock));
    CHECK(cuptiActivityRegisterCallbacks(requested, completed));
    CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    register_kernels();
    CHECK(cudaFree(0));
    uint64_t t0 = fake_clock();
    /* 1000 ns + 256e9 threads / 256 per ns: 1 s of simulated GPU time, far
     * longer than the host needs to reach the flushes below even when busy. */
    launch((const void *)long_stub, 250000000, 1024, 0);
    CHECK(cuptiActivityFlushAll(0));
    printf("flag0 in flight: %d buffers\n", g_nbufs);
    CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
    printf("forced in flight: %d buffers\n", g_nbufs);
    kernel_times(0, "forced");
    CHECK(cudaDeviceSynchronize());
    int before = g_nbufs;
    CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
    printf("after sync: %d new buffers\n", g_nbufs - before);
    launch((const void *)host_stub, 1, 1, 0);
    CHECK(cudaDeviceSynchronize());
    before = g_nbufs;
    CHECK(cuptiActivityFlushAll(0));
    printf("flag0 complete: %d new buffers\n", g_nbufs - before);
    kernel_times(before, "complete");
    CUpti_ActivityKernel10 *k = NULL;
    cuptiActivityGetNextRecord(g_bufs[g_nbufs - 1].buf, g_bufs[g_nbufs - 1].valid, (CUpti_Activity **)&k);
    printf("clock: start %s the launch on the callback's clock\n", k && k->start >= t0 ? "after" : "BEFORE");
    /* Full buffers go out from CUPTI's worker once complete, partial ones never. */
    g_buf_size = 2 * sizeof(CUpti_ActivityKernel10);
    CHECK(cuptiActivityFlushPeriod(20));
    before = g_nbufs;
    for (int i = 0; i < 5; i++)
        launch((const void *)host_stub, 1, 1, 0);
    CHECK(cudaDeviceSynchronize());
    /* Wait for the worker's deliveries, however long a busy host makes it (a
     * minute at most: then the count printed shows what was missing). */
    for (int i = 0; i < 6000 && __atomic_load_n(&g_nbufs, __ATOMIC_ACQUIRE) - before < 2; i++)
        usleep(10000);
    int by_worker = 0;
    for (int i = before; i < g_nbufs; i++)
        by_worker += g_bufs[i].worker;
    printf("worker: %d buffers, %d by the worker\n", g_nbufs - before, by_worker);
    CHECK(cuptiActivityFlushAll(0));
    printf("flag0 after worker: %d buffers\n", g_nbufs - before);
    return 0;
}

static int subscribers(void) {
    CUpti_SubscriberHandle a, b;
    CHECK(cuptiSubscribe(&a, on_callback, NULL));
    CUptiResult r = cuptiSubscribe(&b, on_callback, NULL);
    const char *s = "?";
    cuptiGetResultString(r, &s);
    printf("second subscriber: %s\n", s);
    printf("last error: %d\n", cuptiGetLastError());
    CHECK(cuptiUnsubscribe(a));
    printf("after unsubscribe: %d\n", cuptiSubscribe(&b, on_callback, NULL));
    return 0;
}

static int dropped(void) {
    g_refuse = 1;
    CHECK(cuptiActivityRegisterCallbacks(requested, completed));
    CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    register_kernels();
    for (int i = 0; i < 7; i++)
        launch((const void *)host_stub, 1, 1, 0);
    CHECK(cudaDeviceSynchronize());
    size_t n = 0, again = 0;
    CHECK(cuptiActivityGetNumDroppedRecords(NULL, 0, &n));
    CHECK(cuptiActivityGetNumDroppedRecords(NULL, 0, &again));
    printf("dropped %zu then %zu\n", n, again);
    return 0;
}

/* Node ids as letters, in order of first sight, so that the output does not
 * depend on the ids' absolute values. */
static uint64_t g_node_ids[32];
static int g_nnodes;

static char node_letter(uint64_t id) {
    for (int i = 0; i < g_nnodes; i++)
        if (g_node_ids[i] == id)
            return (char)('A' + i);
    if (g_nnodes == 32)
        return '?';
    g_node_ids[g_nnodes] = id;
    return (char)('A' + g_nnodes++);
}

static __thread const char *tls_runtime_call;
static struct {
    int cloned, type, has_context;
    uint64_t node, original;
    uint32_t graph, original_graph, exec;
    const char *call;
} g_graph_events[32];
static int g_ngraph_events;

static void CUPTIAPI on_graph_callback(void *ud, CUpti_CallbackDomain d, CUpti_CallbackId id,
                                       const void *data) {
    if (d == CUPTI_CB_DOMAIN_RUNTIME_API) {
        const CUpti_CallbackData *c = data;
        tls_runtime_call = c->callbackSite == CUPTI_API_ENTER ? c->functionName : NULL;
        return;
    }
    if (d != CUPTI_CB_DOMAIN_RESOURCE || g_ngraph_events == 32)
        return;
    const CUpti_ResourceData *r = data;
    const CUpti_GraphData *g = r->resourceDescriptor;
    __typeof__(g_graph_events[0]) *e = &g_graph_events[g_ngraph_events++];
    e->cloned = id == CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED;
    e->type = (int)g->nodeType;
    e->has_context = r->context != NULL;
    e->call = tls_runtime_call ? tls_runtime_call : "-";
    CHECK(cuptiGetGraphNodeId(g->node, &e->node));
    CHECK(cuptiGetGraphId(g->graph, &e->graph));
    if (e->cloned) {
        CHECK(cuptiGetGraphNodeId(g->originalNode, &e->original));
        CHECK(cuptiGetGraphId(g->originalGraph, &e->original_graph));
        CHECK(cuptiGetGraphExecId(g->graphExec, &e->exec));
    }
}

static int graph(void) {
    CUpti_SubscriberHandle sub;
    CHECK(cuptiActivityRegisterCallbacks(requested, completed));
    CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET));
    register_kernels();
    void *d;
    CHECK(cudaMalloc(&d, 4096));
    CHECK(cuptiSubscribe(&sub, on_graph_callback, NULL));
    CHECK(cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API));
    CHECK(cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED));
    CHECK(cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    launch((const void *)host_stub, 1, 32, s);
    CHECK(cudaMemsetAsync(d, 0, 4096, s));
    launch((const void *)host_stub, 2, 32, s);
    cudaGraph_t g;
    CHECK(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t x;
    CHECK(cudaGraphInstantiate(&x, g, 0));
    uint32_t gid = 0, xid = 0;
    CHECK(cuptiGetGraphId(g, &gid));
    CHECK(cuptiGetGraphExecId(x, &xid));
    for (int i = 0; i < 2; i++)
        CHECK(cudaGraphLaunch(x, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
    /* Graphs by what they are: the captured one, or the instantiated one. */
#define GRAPH_NAME(id) ((id) == gid ? "captured" : (id) == xid ? "exec" : "?")
    for (int i = 0; i < g_ngraph_events; i++) {
        __typeof__(g_graph_events[0]) *e = &g_graph_events[i];
        if (e->cloned)
            printf("cloned %c from %c type %d graph %s from %s exec %s in %s\n", node_letter(e->node),
                   node_letter(e->original), e->type, GRAPH_NAME(e->graph), GRAPH_NAME(e->original_graph),
                   GRAPH_NAME(e->exec), e->call);
        else
            printf("created %c type %d graph %s context %s in %s\n", node_letter(e->node), e->type,
                   GRAPH_NAME(e->graph), e->has_context ? "set" : "NULL", e->call);
    }
    for (int i = 0; i < g_nbufs; i++) {
        CUpti_Activity *r = NULL;
        while (cuptiActivityGetNextRecord(g_bufs[i].buf, g_bufs[i].valid, &r) == CUPTI_SUCCESS) {
            if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
                CUpti_ActivityKernel10 *k = (CUpti_ActivityKernel10 *)r;
                printf("kernel grid %d node %c graph %s\n", k->gridX, node_letter(k->graphNodeId),
                       GRAPH_NAME(k->graphId));
            } else if (r->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
                CUpti_ActivityMemset4 *m = (CUpti_ActivityMemset4 *)r;
                printf("memset node %c graph %s\n", node_letter(m->graphNodeId), GRAPH_NAME(m->graphId));
            }
        }
    }
    uint64_t none = 0;
    printf("node id of NULL: %d\n", (int)cuptiGetGraphNodeId(NULL, &none));
    CHECK(cudaGraphExecDestroy(x));
    CHECK(cudaGraphDestroy(g));
    CHECK(cuptiUnsubscribe(sub));
    return 0;
}

int main(int argc, char **argv) {
    g_main = pthread_self();
    if (argc < 2)
        return 2;
    const char *s = argv[1];
    if (!strcmp(s, "names") && argc > 2)
        return names(argv[2]);
    if (!strcmp(s, "records") && argc > 2)
        return records(argv[2]);
    if (!strcmp(s, "nesting"))
        return nesting();
    if (!strcmp(s, "flush"))
        return flush();
    if (!strcmp(s, "subscribers"))
        return subscribers();
    if (!strcmp(s, "dropped"))
        return dropped();
    if (!strcmp(s, "graph"))
        return graph();
    return 2;
}
