/* MOCK libcupti, for plumbing tests only: it implements the CUPTI functions that
 * gpuperf's injection library calls, drives its callbacks on request, and hands it
 * activity records laid out by the real CUPTI 13 headers. It proves nothing about
 * real CUPTI; tests against the real libcupti live beside it.
 *
 * Extra exports (mock_*) let the host program play the CUDA application. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cupti.h>

static CUpti_CallbackFunc g_cb;
static void *g_userdata;
static CUpti_BuffersCallbackRequestFunc g_request;
static CUpti_BuffersCallbackCompleteFunc g_complete;
static CUpti_TimestampCallbackFunc g_clock;
static int g_thread_id_type = -1;
static unsigned char g_enabled[8][4096];
static uint64_t g_kinds;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static uint8_t *g_queue;
static size_t g_queue_len, g_queue_cap;
static size_t g_dropped;

CUptiResult cuptiGetVersion(uint32_t *v) { *v = 130001; return CUPTI_SUCCESS; }

CUptiResult cuptiGetResultString(CUptiResult r, const char **s) {
    *s = r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
             ? "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"
             : "mock CUPTI error";
    return CUPTI_SUCCESS;
}

CUptiResult cuptiSubscribe(CUpti_SubscriberHandle *h, CUpti_CallbackFunc cb, void *ud) {
    if (getenv("MOCK_CUPTI_BUSY")) return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    g_cb = cb;
    g_userdata = ud;
    *h = (CUpti_SubscriberHandle)&g_cb;
    return CUPTI_SUCCESS;
}

CUptiResult cuptiEnableCallback(uint32_t on, CUpti_SubscriberHandle h, CUpti_CallbackDomain d,
                                CUpti_CallbackId id) {
    (void)h;
    if (d >= 8 || id >= 4096) return CUPTI_ERROR_INVALID_PARAMETER;
    g_enabled[d][id] = (unsigned char)on;
    return CUPTI_SUCCESS;
}

CUptiResult cuptiGetCallbackName(CUpti_CallbackDomain d, uint32_t id, const char **name) {
    const char *n = NULL;
    if (d == CUPTI_CB_DOMAIN_RUNTIME_API) {
        switch (id) {
        case 3: n = "cudaGetLastError_v3020"; break;
        case 31: n = "cudaMemcpy_v3020"; break;
        case 165: n = "cudaDeviceSynchronize_v3020"; break;
        case 211: n = "cudaLaunchKernel_v7000"; break;
        case 311: n = "cudaGraphLaunch_v10000"; break;
        case 505: n = "__cudaLaunchKernel_v13000"; break;
        }
    } else if (d == CUPTI_CB_DOMAIN_DRIVER_API) {
        switch (id) {
        case 307: n = "cuLaunchKernel"; break;
        case 17: n = "cuCtxGetCurrent"; break;
        }
    }
    if (!n) return CUPTI_ERROR_INVALID_PARAMETER;
    *name = n;
    return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityEnable(CUpti_ActivityKind k) {
    g_kinds |= 1ull << (k & 63);
    return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc req,
                                           CUpti_BuffersCallbackCompleteFunc done) {
    g_request = req;
    g_complete = done;
    return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc f) {
    g_clock = f;
    return CUPTI_SUCCESS;
}

CUptiResult cuptiSetThreadIdType(CUpti_ActivityThreadIdType t) {
    g_thread_id_type = (int)t;
    return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityFlushPeriod(uint32_t ms) { (void)ms; return CUPTI_SUCCESS; }

static size_t record_size(uint32_t kind) {
    switch (kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: return sizeof(CUpti_ActivityKernel10);
    case CUPTI_ACTIVITY_KIND_MEMCPY: return sizeof(CUpti_ActivityMemcpy6);
    default: return 0;
    }
}

CUptiResult cuptiActivityGetNextRecord(uint8_t *buf, size_t valid, CUpti_Activity **rec) {
    uint8_t *next = *rec ? (uint8_t *)*rec + record_size((*rec)->kind) : buf;
    if (next >= buf + valid || next + record_size(((CUpti_Activity *)next)->kind) > buf + valid)
        return CUPTI_ERROR_MAX_LIMIT_REACHED;
    *rec = (CUpti_Activity *)next;
    return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext c, uint32_t s, size_t *d) {
    (void)c; (void)s;
    pthread_mutex_lock(&g_mu);
    *d = g_dropped;
    g_dropped = 0;
    pthread_mutex_unlock(&g_mu);
    return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityFlushAll(uint32_t flag) {
    (void)flag;
    pthread_mutex_lock(&g_mu);
    if (g_queue_len == 0 && g_dropped == 0) {
        pthread_mutex_unlock(&g_mu);
        return CUPTI_SUCCESS;
    }
    uint8_t *buf; size_t size, max;
    g_request(&buf, &size, &max);
    size_t n = g_queue_len < size ? g_queue_len : size;
    memcpy(buf, g_queue, n);
    memmove(g_queue, g_queue + n, g_queue_len - n);
    g_queue_len -= n;
    pthread_mutex_unlock(&g_mu);
    g_complete(NULL, 0, buf, size, n);
    return CUPTI_SUCCESS;
}

/* ---- mock controls ---- */

static void enqueue(const void *rec, size_t len) {
    pthread_mutex_lock(&g_mu);
    if (g_queue_len + len > g_queue_cap) {
        g_queue_cap = (g_queue_len + len) * 2;
        g_queue = realloc(g_queue, g_queue_cap);
    }
    memcpy(g_queue + g_queue_len, rec, len);
    g_queue_len += len;
    pthread_mutex_unlock(&g_mu);
}

uint64_t mock_now(void) { return g_clock ? g_clock() : 0; }
int mock_thread_id_type(void) { return g_thread_id_type; }
int mock_enabled(int domain, int cbid) { return g_enabled[domain][cbid]; }
int mock_kind_enabled(int kind) { return (int)((g_kinds >> kind) & 1); }

void mock_api(int domain, int cbid, uint32_t corr, int enter) {
    if (!g_cb || !g_enabled[domain][cbid]) return;
    CUpti_CallbackData d;
    memset(&d, 0, sizeof d);
    d.callbackSite = enter ? CUPTI_API_ENTER : CUPTI_API_EXIT;
    d.functionName = "mock";
    d.correlationId = corr;
    g_cb(g_userdata, (CUpti_CallbackDomain)domain, (CUpti_CallbackId)cbid, &d);
}

void mock_context_destroy(void) {
    if (!g_cb || !g_enabled[CUPTI_CB_DOMAIN_RESOURCE][CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING]) return;
    CUpti_ResourceData r;
    memset(&r, 0, sizeof r);
    g_cb(g_userdata, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING, &r);
}

void mock_kernel(uint32_t corr, uint64_t start, uint64_t end, const char *name, uint32_t graph,
                 uint64_t node, uint32_t stream) {
    CUpti_ActivityKernel10 k;
    memset(&k, 0, sizeof k);
    k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k.start = start; k.end = end; k.correlationId = corr;
    k.deviceId = 0; k.contextId = 1; k.streamId = stream;
    k.gridX = 4; k.gridY = 1; k.gridZ = 1; k.blockX = 32; k.blockY = 1; k.blockZ = 1;
    k.name = name; /* callers pass string literals */
    k.graphId = graph; k.graphNodeId = node;
    enqueue(&k, sizeof k);
}

void mock_memcpy(uint32_t driver_corr, uint32_t runtime_corr, uint64_t start, uint64_t end,
                 uint64_t bytes) {
    CUpti_ActivityMemcpy6 m;
    memset(&m, 0, sizeof m);
    m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
    m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
    m.bytes = bytes; m.start = start; m.end = end;
    m.correlationId = driver_corr; m.runtimeCorrelationId = runtime_corr;
    m.contextId = 1; m.streamId = 7;
    enqueue(&m, sizeof m);
}

void mock_drop(size_t n) {
    pthread_mutex_lock(&g_mu);
    g_dropped += n;
    pthread_mutex_unlock(&g_mu);
}

/* ---- CUDA graphs: where nodes come from (in-process stacks) ----
 * A node handle is its id cast to a pointer, so cuptiGetGraphNodeId is the cast back. */

CUptiResult cuptiGetGraphNodeId(CUgraphNode node, uint64_t *id) {
    if (!node || !id) return CUPTI_ERROR_INVALID_PARAMETER;
    *id = (uint64_t)(uintptr_t)node;
    return CUPTI_SUCCESS;
}

static void graph_resource(CUpti_CallbackIdResource cbid, uint64_t node, uint64_t original) {
    if (!g_cb || !g_enabled[CUPTI_CB_DOMAIN_RESOURCE][cbid]) return;
    CUpti_GraphData g;
    memset(&g, 0, sizeof g);
    g.node = (CUgraphNode)(uintptr_t)node;
    g.originalNode = (CUgraphNode)(uintptr_t)original;
    CUpti_ResourceData r;
    memset(&r, 0, sizeof r);
    r.resourceDescriptor = &g;
    g_cb(g_userdata, CUPTI_CB_DOMAIN_RESOURCE, cbid, &r);
}

/* A node made, on the calling thread (inside a captured launch, or by an explicit
 * cudaGraphAdd*Node call). */
void mock_graph_node_created(uint64_t node) {
    graph_resource(CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, node, 0);
}

/* A node copied from `original` when its graph is instantiated. */
void mock_graph_node_cloned(uint64_t node, uint64_t original) {
    graph_resource(CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED, node, original);
}
