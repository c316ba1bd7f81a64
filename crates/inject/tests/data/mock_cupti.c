/* MOCK libcupti, for plumbing tests only: it implements the CUPTI functions that
 * gpuperf's injection library calls, drives its callbacks on request, and hands it
 * activity records laid out by the real CUPTI 13 headers. It proves nothing about
 * real CUPTI; tests against the real libcupti live beside it. Only the profiler
 * crate's probe tests still use it (its mock_api, through their fake cudart);
 * the inject crate's tests and benchmark play CUPTI on the simulated runtime
 * (sim/), which is to replace it there too.
 *
 * It models the documented behaviour the injection library must cope with:
 * - one subscriber per process; callback and buffer registration, the timestamp
 *   clock and enabled activity kinds are process-wide, so a second client in the
 *   same process replaces or disables what the first one set up;
 * - records are written into the client's buffers as they happen; only enabled
 *   kinds produce records; a kernel may be in flight (end not yet known);
 * - a worker thread delivers full, complete buffers while it holds an internal
 *   "CUPTI lock", which cuptiActivityGetNumDroppedRecords and
 *   cuptiActivityFlushAll also take; resource callbacks and cudaDeviceReset run
 *   under it too;
 * - cuptiActivityFlushAll(0) holds back buffers with in-flight records; a forced
 *   flush returns them with end = 0, and their end is never delivered;
 * - cuptiActivityGetNextRecord fails with CUPTI_ERROR_INVALID_KIND on a record it
 *   cannot parse.
 *
 * Build-time switches: MOCK_VERSION (cuptiGetVersion, default 130001) and
 * MOCK_SUBSCRIBE_STATUS (a CUptiResult cuptiSubscribe always returns).
 * Run-time switches: MOCK_CUPTI_BUSY (another tool holds CUPTI),
 * MOCK_CUPTI_FAIL_CBID (cuptiEnableCallback refuses that runtime callback id),
 * MOCK_TIMESTAMP_REFUSED (cuptiActivityRegisterTimestampCallback refuses, and
 * records keep CUPTI's default clock, CLOCK_REALTIME),
 * MOCK_WORKER_US (the worker's period, default 1000) and MOCK_WORKER_FLUSH (the
 * worker also hands over partly filled buffers, as CUPTI's periodic flush does).
 *
 * Extra exports (mock_*) let the host program play the CUDA application. */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cupti.h>

#ifndef MOCK_VERSION
#define MOCK_VERSION 130001
#endif

static CUpti_CallbackFunc g_cb;
static void *g_userdata;
static int g_subscribed;
static CUpti_BuffersCallbackRequestFunc g_request;
static CUpti_BuffersCallbackCompleteFunc g_complete;
static CUpti_TimestampCallbackFunc g_clock;
static int g_thread_id_type = -1;
static unsigned char g_enabled[8][4096];
static uint64_t g_kinds;
static size_t g_dropped;
static size_t g_lost_ends;
static char g_events[4096];

/* The internal "CUPTI lock". Recursive: a client may call CUPTI from a callback. */
static pthread_mutex_t g_lock;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void init_lock(void) {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&g_lock, &a);
}
static void lock(void) { pthread_once(&g_once, init_lock); pthread_mutex_lock(&g_lock); }
static void unlock(void) { pthread_mutex_unlock(&g_lock); }

/* A client buffer being filled or waiting for delivery. */
typedef struct Buf {
    uint8_t *p;
    size_t size, valid;
    int inflight;
    struct Buf *next;
} Buf;
static Buf *g_cur;                   /* being filled */
static Buf *g_full, **g_full_tail = &g_full; /* retired, in order */

/* Kernels whose end is not known yet: where their record is. */
typedef struct { uint32_t corr; Buf *buf; size_t off; int used; } InFlight;
static InFlight g_inflight[64];

static void event(const char *fmt, unsigned v) {
    size_t n = strlen(g_events);
    if (n + 16 < sizeof g_events) snprintf(g_events + n, sizeof g_events - n, "%s%s%u", n ? " " : "", fmt, v);
}

CUptiResult cuptiGetVersion(uint32_t *v) { *v = MOCK_VERSION; return CUPTI_SUCCESS; }

CUptiResult cuptiGetResultString(CUptiResult r, const char **s) {
    switch (r) {
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED: *s = "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"; break;
    case CUPTI_ERROR_NOT_INITIALIZED: *s = "CUPTI_ERROR_NOT_INITIALIZED"; break;
    case CUPTI_ERROR_UNKNOWN: *s = "CUPTI_ERROR_UNKNOWN"; break;
    case CUPTI_ERROR_INVALID_KIND: *s = "CUPTI_ERROR_INVALID_KIND"; break;
    case CUPTI_ERROR_MAX_LIMIT_REACHED: *s = "CUPTI_ERROR_MAX_LIMIT_REACHED"; break;
    case CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED: *s = "CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED"; break;
    case CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED: *s = "CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED"; break;
    default: *s = "mock CUPTI error";
    }
    return CUPTI_SUCCESS;
}

CUptiResult cuptiSubscribe(CUpti_SubscriberHandle *h, CUpti_CallbackFunc cb, void *ud) {
#ifdef MOCK_SUBSCRIBE_STATUS
    (void)h; (void)cb; (void)ud;
    return MOCK_SUBSCRIBE_STATUS;
#else
    if (getenv("MOCK_CUPTI_BUSY")) return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    lock();
    if (g_subscribed) { unlock(); return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED; }
    g_subscribed = 1;
    g_cb = cb;
    g_userdata = ud;
    *h = (CUpti_SubscriberHandle)&g_cb;
    unlock();
    return CUPTI_SUCCESS;
#endif
}

CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle h) {
    if (h != (CUpti_SubscriberHandle)&g_cb) return CUPTI_ERROR_INVALID_PARAMETER;
    lock();
    g_subscribed = 0;
    g_cb = NULL;
    memset(g_enabled, 0, sizeof g_enabled);
    event("U", 0);
    unlock();
    return CUPTI_SUCCESS;
}

CUptiResult cuptiEnableCallback(uint32_t on, CUpti_SubscriberHandle h, CUpti_CallbackDomain d,
                                CUpti_CallbackId id) {
    if (h != (CUpti_SubscriberHandle)&g_cb || !g_subscribed) return CUPTI_ERROR_INVALID_PARAMETER;
    if (d >= 8 || id >= 4096) return CUPTI_ERROR_INVALID_PARAMETER;
    const char *fail = getenv("MOCK_CUPTI_FAIL_CBID");
    if (on && fail && d == CUPTI_CB_DOMAIN_RUNTIME_API && (uint32_t)atoi(fail) == id)
        return CUPTI_ERROR_INVALID_PARAMETER;
    g_enabled[d][id] = (unsigned char)on;
    return CUPTI_SUCCESS;
}

CUptiResult cuptiGetCallbackName(CUpti_CallbackDomain d, uint32_t id, const char **name) {
    const char *n = NULL;
    if (d == CUPTI_CB_DOMAIN_RUNTIME_API) {
        switch (id) {
        case 3: n = "cudaGetLastError_v3020"; break;
        case 31: n = "cudaMemcpy_v3020"; break;
        case 131: n = "cudaStreamSynchronize_v3020"; break;
        case 160: n = "cudaMemcpyPeer_v4000"; break;
        case 164: n = "cudaDeviceReset_v3020"; break;
        case 165: n = "cudaDeviceSynchronize_v3020"; break;
        case 211: n = "cudaLaunchKernel_v7000"; break;
        case 311: n = "cudaGraphLaunch_v10000"; break;
        case 310: n = "cudaGraphInstantiate_v10000"; break;
        case 313: n = "cudaGraphExecDestroy_v10000"; break;
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
    lock();
    g_kinds |= 1ull << (k & 63);
    unlock();
    return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityDisable(CUpti_ActivityKind k) {
    lock();
    g_kinds &= ~(1ull << (k & 63));
    event("D", (unsigned)k);
    unlock();
    return CUPTI_SUCCESS;
}

static void deliver(Buf *b) {
    g_complete(NULL, 0, b->p, b->size, b->valid);
    free(b);
}

/* Delivers full buffers whose records are all complete, holding the CUPTI lock
 * across the client's callback, as CUPTI's own thread does. */
static void *worker(void *arg) {
    (void)arg;
    const char *us = getenv("MOCK_WORKER_US");
    useconds_t period = us ? (useconds_t)atoi(us) : 1000;
    int flushes = getenv("MOCK_WORKER_FLUSH") != NULL;
    for (;;) {
        usleep(period);
        lock();
        if (flushes && g_cur && g_cur->valid > 0) {
            /* CUPTI's own periodic flush: the partly filled buffer goes too. */
            *g_full_tail = g_cur;
            g_full_tail = &g_cur->next;
            g_cur = NULL;
        }
        Buf **pp = &g_full;
        while (*pp) {
            Buf *b = *pp;
            if (b->inflight == 0 && g_complete) {
                *pp = b->next;
                if (g_full_tail == &b->next) g_full_tail = pp;
                deliver(b);
            } else {
                pp = &b->next;
            }
        }
        unlock();
    }
    return NULL;
}

CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc req,
                                           CUpti_BuffersCallbackCompleteFunc done) {
    static int started;
    lock();
    g_request = req;
    g_complete = done;
    if (!started) {
        started = 1;
        pthread_t t;
        pthread_create(&t, NULL, worker, NULL);
        pthread_detach(t);
    }
    unlock();
    return CUPTI_SUCCESS;
}

/* CUPTI's default clock, used while no timestamp callback is registered. */
static uint64_t default_clock(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

CUptiResult cuptiGetTimestamp(uint64_t *t) {
    *t = g_clock ? g_clock() : default_clock();
    return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc f) {
    if (getenv("MOCK_TIMESTAMP_REFUSED")) return CUPTI_ERROR_NOT_SUPPORTED;
    g_clock = f;
    return CUPTI_SUCCESS;
}

CUptiResult cuptiSetThreadIdType(CUpti_ActivityThreadIdType t) {
    g_thread_id_type = (int)t;
    return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityFlushPeriod(uint32_t ms) { (void)ms; return CUPTI_SUCCESS; }

/* A fake CUcontext: what cuptiGetContextId and cuptiGetDeviceId read. */
typedef struct { uint32_t id, device; } FakeContext;
static FakeContext g_contexts[16];

CUptiResult cuptiGetContextId(CUcontext c, uint32_t *id) {
    if (!c) return CUPTI_ERROR_INVALID_CONTEXT;
    *id = ((FakeContext *)c)->id;
    return CUPTI_SUCCESS;
}

CUptiResult cuptiGetDeviceId(CUcontext c, uint32_t *dev) {
    if (!c) return CUPTI_ERROR_INVALID_CONTEXT;
    *dev = ((FakeContext *)c)->device;
    return CUPTI_SUCCESS;
}

static size_t record_size(uint32_t kind) {
    switch (kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: return sizeof(CUpti_ActivityKernel10);
    case CUPTI_ACTIVITY_KIND_MEMCPY: return sizeof(CUpti_ActivityMemcpy6);
    case CUPTI_ACTIVITY_KIND_MEMCPY2: return sizeof(CUpti_ActivityMemcpyPtoP4);
    case CUPTI_ACTIVITY_KIND_MEMSET: return sizeof(CUpti_ActivityMemset4);
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: return sizeof(CUpti_ActivitySynchronization2);
    default: return 0;
    }
}

CUptiResult cuptiActivityGetNextRecord(uint8_t *buf, size_t valid, CUpti_Activity **rec) {
    uint8_t *next = *rec ? (uint8_t *)*rec + record_size((*rec)->kind) : buf;
    if (next + sizeof(uint32_t) > buf + valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
    size_t n = record_size(((CUpti_Activity *)next)->kind);
    if (n == 0 || next + n > buf + valid) return CUPTI_ERROR_INVALID_KIND;
    *rec = (CUpti_Activity *)next;
    return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext c, uint32_t s, size_t *d) {
    (void)c; (void)s;
    lock();
    *d = g_dropped;
    g_dropped = 0;
    unlock();
    return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityFlushAll(uint32_t flag) {
    int forced = (flag & CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) != 0;
    Buf *out = NULL, **out_tail = &out;
    lock();
    event("F", (unsigned)forced);
    if (g_cur && g_cur->valid > 0) {
        *g_full_tail = g_cur;
        g_full_tail = &g_cur->next;
        g_cur = NULL;
    }
    Buf **pp = &g_full;
    while (*pp) {
        Buf *b = *pp;
        if (b->inflight == 0 || forced) {
            *pp = b->next;
            if (g_full_tail == &b->next) g_full_tail = pp;
            b->next = NULL;
            *out_tail = b;
            out_tail = &b->next;
            /* Delivered with end = 0: the end can no longer reach the client. */
            for (size_t i = 0; i < sizeof g_inflight / sizeof *g_inflight; i++)
                if (g_inflight[i].used && g_inflight[i].buf == b) g_inflight[i].buf = NULL;
        } else {
            pp = &b->next;
        }
    }
    CUpti_BuffersCallbackCompleteFunc complete = g_complete;
    unlock();
    /* Delivered outside the lock, on the caller's thread. */
    while (out) {
        Buf *b = out;
        out = b->next;
        if (complete) complete(NULL, 0, b->p, b->size, b->valid);
        free(b);
    }
    return CUPTI_SUCCESS;
}

/* cuptiFinalize, as documented: everything recorded goes to the registered
 * buffer callback, then every client's subscription, callbacks and kinds are
 * gone (a later CUPTI call starts afresh). */
CUptiResult cuptiFinalize(void) {
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    lock();
    g_subscribed = 0;
    g_cb = NULL;
    memset(g_enabled, 0, sizeof g_enabled);
    g_kinds = 0;
    g_clock = NULL;
    g_request = NULL;
    g_complete = NULL;
    event("Z", 0);
    unlock();
    return CUPTI_SUCCESS;
}

/* ---- recording: records go into the client's buffer as they happen ---- */

static int kind_on(uint32_t kind) { return (int)((g_kinds >> kind) & 1); }

/* Appends a record of an enabled kind to the current buffer, asking the client
 * for a new one when it is full; returns where it went, or NULL. Under the lock. */
static uint8_t *put(const void *rec, size_t len, Buf **where) {
    if (!kind_on(((const CUpti_Activity *)rec)->kind)) return NULL;
    if (!g_request) { g_dropped++; return NULL; }
    if (g_cur && g_cur->valid + len > g_cur->size) {
        *g_full_tail = g_cur;
        g_full_tail = &g_cur->next;
        g_cur = NULL;
    }
    if (!g_cur) {
        uint8_t *p = NULL;
        size_t size = 0, max = 0;
        g_request(&p, &size, &max);
        if (!p) {
            /* Before API 27, CUPTI crashed on a null buffer. */
            if (MOCK_VERSION < 27) abort();
            g_dropped++;
            return NULL;
        }
        if (size < len) { g_dropped++; return NULL; }
        g_cur = calloc(1, sizeof *g_cur);
        g_cur->p = p;
        g_cur->size = size;
    }
    uint8_t *at = g_cur->p + g_cur->valid;
    memcpy(at, rec, len);
    g_cur->valid += len;
    if (where) *where = g_cur;
    return at;
}

uint64_t mock_now(void) {
    if (g_clock) return g_clock();
    return getenv("MOCK_TIMESTAMP_REFUSED") ? default_clock() : 0;
}
int mock_thread_id_type(void) { return g_thread_id_type; }
int mock_enabled(int domain, int cbid) { return g_enabled[domain][cbid]; }
int mock_kind_enabled(int kind) { return kind_on((uint32_t)kind); }
int mock_kinds_enabled(void) { return __builtin_popcountll(g_kinds); }
int mock_subscribed(void) { return g_subscribed; }
const char *mock_events(void) { return g_events; }
size_t mock_lost_ends(void) { return g_lost_ends; }

int mock_callbacks_enabled(void) {
    int n = 0;
    for (int d = 0; d < 8; d++)
        for (int i = 0; i < 4096; i++) n += g_enabled[d][i];
    return n;
}

/* Takes (1) or releases (0) the lock cuptiActivityFlushAll takes, as CUPTI's
 * activity code holds its buffer lock while it appends a record. */
void mock_hold_lock(int on) {
    if (on) lock();
    else unlock();
}

void mock_api(int domain, int cbid, uint32_t corr, int enter) {
    if (!g_cb || !g_enabled[domain][cbid]) return;
    CUpti_CallbackData d;
    memset(&d, 0, sizeof d);
    d.callbackSite = enter ? CUPTI_API_ENTER : CUPTI_API_EXIT;
    d.functionName = "mock";
    d.correlationId = corr;
    /* cudaDeviceReset tears down contexts: CUPTI holds its lock meanwhile. */
    int locked = domain == CUPTI_CB_DOMAIN_RUNTIME_API && cbid == 164;
    if (locked) lock();
    g_cb(g_userdata, (CUpti_CallbackDomain)domain, (CUpti_CallbackId)cbid, &d);
    if (locked) unlock();
}

static void resource(CUpti_CallbackIdResource cbid, FakeContext *ctx) {
    lock();
    if (g_cb && g_enabled[CUPTI_CB_DOMAIN_RESOURCE][cbid]) {
        CUpti_ResourceData r;
        memset(&r, 0, sizeof r);
        r.context = (CUcontext)ctx;
        g_cb(g_userdata, CUPTI_CB_DOMAIN_RESOURCE, cbid, &r);
    }
    unlock();
}

void mock_context_create(uint32_t id, uint32_t device) {
    FakeContext *c = &g_contexts[id % 16];
    c->id = id;
    c->device = device;
    resource(CUPTI_CBID_RESOURCE_CONTEXT_CREATED, c);
}

void mock_context_destroy(void) {
    resource(CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING, NULL);
}

void mock_fatal(const char *message) {
    lock();
    if (g_cb && g_enabled[CUPTI_CB_DOMAIN_STATE][CUPTI_CBID_STATE_FATAL_ERROR]) {
        CUpti_StateData s;
        memset(&s, 0, sizeof s);
        s.notification.result = CUPTI_ERROR_UNKNOWN;
        s.notification.message = message;
        g_cb(g_userdata, CUPTI_CB_DOMAIN_STATE, CUPTI_CBID_STATE_FATAL_ERROR, &s);
    }
    unlock();
}

static void kernel_record(CUpti_ActivityKernel10 *k, uint32_t corr, uint64_t start, uint64_t end,
                          const char *name, uint32_t graph, uint64_t node, uint32_t stream) {
    memset(k, 0, sizeof *k);
    k->kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k->start = start; k->end = end; k->completed = end; k->correlationId = corr;
    k->deviceId = 0; k->contextId = 1; k->streamId = stream;
    k->gridX = 4; k->gridY = 1; k->gridZ = 1; k->blockX = 32; k->blockY = 1; k->blockZ = 1;
    k->name = name; /* callers pass string literals */
    k->graphId = graph; k->graphNodeId = node;
}

void mock_kernel(uint32_t corr, uint64_t start, uint64_t end, const char *name, uint32_t graph,
                 uint64_t node, uint32_t stream) {
    CUpti_ActivityKernel10 k;
    kernel_record(&k, corr, start, end, name, graph, node, stream);
    lock();
    put(&k, sizeof k, NULL);
    unlock();
}

/* A kernel that has started and not finished: its record has end = 0 until
 * mock_kernel_end, and its buffer is incomplete meanwhile. */
void mock_kernel_begin(uint32_t corr, uint64_t start, const char *name, uint32_t stream) {
    CUpti_ActivityKernel10 k;
    kernel_record(&k, corr, start, 0, name, 0, 0, stream);
    lock();
    Buf *b = NULL;
    uint8_t *at = put(&k, sizeof k, &b);
    if (at) {
        for (size_t i = 0; i < sizeof g_inflight / sizeof *g_inflight; i++) {
            if (!g_inflight[i].used) {
                g_inflight[i] = (InFlight){corr, b, (size_t)(at - b->p), 1};
                b->inflight++;
                break;
            }
        }
    }
    unlock();
}

void mock_kernel_end(uint32_t corr, uint64_t end) {
    lock();
    for (size_t i = 0; i < sizeof g_inflight / sizeof *g_inflight; i++) {
        InFlight *f = &g_inflight[i];
        if (!f->used || f->corr != corr) continue;
        if (f->buf) {
            CUpti_ActivityKernel10 *k = (CUpti_ActivityKernel10 *)(f->buf->p + f->off);
            k->end = end;
            k->completed = end;
            f->buf->inflight--;
        } else {
            g_lost_ends++;
        }
        f->used = 0;
    }
    unlock();
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
    lock();
    put(&m, sizeof m, NULL);
    unlock();
}

void mock_peer_copy(uint32_t corr, uint64_t start, uint64_t end, uint64_t bytes, uint32_t src,
                    uint32_t dst) {
    CUpti_ActivityMemcpyPtoP4 m;
    memset(&m, 0, sizeof m);
    m.kind = CUPTI_ACTIVITY_KIND_MEMCPY2;
    m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_PTOP;
    m.srcKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
    m.dstKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
    m.bytes = bytes; m.start = start; m.end = end;
    m.deviceId = src; m.contextId = 1; m.streamId = 7;
    m.srcDeviceId = src; m.srcContextId = 1; m.dstDeviceId = dst; m.dstContextId = 2;
    m.correlationId = corr;
    lock();
    put(&m, sizeof m, NULL);
    unlock();
}

void mock_sync(uint32_t corr, uint32_t context, uint32_t stream, uint64_t start, uint64_t end) {
    CUpti_ActivitySynchronization2 s;
    memset(&s, 0, sizeof s);
    s.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
    s.type = stream == CUPTI_SYNCHRONIZATION_INVALID_VALUE
                 ? CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE
                 : CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE;
    s.start = start; s.end = end; s.correlationId = corr;
    s.contextId = context; s.streamId = stream;
    s.cudaEventId = CUPTI_SYNCHRONIZATION_INVALID_VALUE;
    lock();
    put(&s, sizeof s, NULL);
    unlock();
}

/* A record of a kind this CUPTI cannot parse, which ends its buffer's walk. */
void mock_bad_record(void) {
    CUpti_ActivityKernel10 k;
    memset(&k, 0, sizeof k);
    k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL; /* passes the kind filter */
    lock();
    uint8_t *at = put(&k, sizeof k, NULL);
    if (at) ((CUpti_Activity *)at)->kind = (CUpti_ActivityKind)0x7fff;
    unlock();
}

/* A buffer CUPTI hands back after the client's final flush (its worker racing
 * the client's exit): one kernel record, delivered at once, whatever is enabled. */
void mock_deliver_late(uint32_t corr) {
    lock();
    uint8_t *p = NULL;
    size_t size = 0, max = 0;
    if (g_request) g_request(&p, &size, &max);
    if (p && size >= sizeof(CUpti_ActivityKernel10)) {
        CUpti_ActivityKernel10 k;
        kernel_record(&k, corr, 1000, 2000, "_Z4latev", 0, 0, 7);
        memcpy(p, &k, sizeof k);
        g_complete(NULL, 0, p, size, sizeof k);
    }
    unlock();
}

void mock_drop(size_t n) {
    lock();
    g_dropped += n;
    unlock();
}

/* ---- CUDA graphs: where nodes come from (in-process stacks) ----
 * A node handle is its id cast to a pointer, so cuptiGetGraphNodeId is the cast back. */

CUptiResult cuptiGetGraphNodeId(CUgraphNode node, uint64_t *id) {
    if (!node || !id) return CUPTI_ERROR_INVALID_PARAMETER;
    *id = (uint64_t)(uintptr_t)node;
    return CUPTI_SUCCESS;
}

static void graph_resource(CUpti_CallbackIdResource cbid, uint64_t node, uint64_t original,
                           int into_exec) {
    if (!g_cb || !g_enabled[CUPTI_CB_DOMAIN_RESOURCE][cbid]) return;
    CUpti_GraphData g;
    memset(&g, 0, sizeof g);
    g.node = (CUgraphNode)(uintptr_t)node;
    g.originalNode = (CUgraphNode)(uintptr_t)original;
    /* A copy into an instantiated graph names it; a token will do. */
    if (into_exec) g.graphExec = (CUgraphExec)(uintptr_t)0x1000;
    CUpti_ResourceData r;
    memset(&r, 0, sizeof r);
    r.resourceDescriptor = &g;
    g_cb(g_userdata, CUPTI_CB_DOMAIN_RESOURCE, cbid, &r);
}

/* A node made, on the calling thread (inside a captured launch, or by an explicit
 * cudaGraphAdd*Node call). */
void mock_graph_node_created(uint64_t node) {
    graph_resource(CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, node, 0, 0);
}

/* A node copied from `original` when its graph is instantiated. */
void mock_graph_node_cloned(uint64_t node, uint64_t original) {
    graph_resource(CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED, node, original, 1);
}

/* A node about to be destroyed (its graph or instantiated graph is). */
void mock_graph_node_destroyed(uint64_t node) {
    graph_resource(CUPTI_CBID_RESOURCE_GRAPHNODE_DESTROY_STARTING, node, 0, 0);
}
