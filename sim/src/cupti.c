/* Simulated CUPTI, libcupti.so.13 (no GPU): callbacks and activity records for the simulated driver only; it cannot profile real CUDA.
 *
 * What it does, by CUPTI 13's headers: one subscriber (a second gets
 * CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED); runtime, driver and resource
 * callbacks, on the calling thread from inside the call, with the real CUDA 13
 * callback ids and names; activity records with the CUDA 13 layouts
 * (CUpti_ActivityKernel10, Memcpy6, MemcpyPtoP4, Memset4, Synchronization2,
 * Device5, Context3, API) in client buffers; graph node callbacks
 * (GRAPHNODE_CREATED, GRAPHNODE_CLONED, GRAPHNODE_DESTROY_STARTING with a
 * CUpti_GraphData) and the graph,
 * exec and node ids; correlation ids as CUPTI documents them: every API call
 * its own, the driver calls a runtime call makes included; a kernel carries the
 * launching runtime call's id, a copy the driver call's with the runtime call's
 * as runtimeCorrelationId, a memset, a peer copy and a synchronization only the
 * driver call's; the timestamp callback (mapped linearly when its clock is
 * not in ns) and thread id types; external correlation records; per-API
 * activity switches; cuptiActivityFlushAll with the documented flag semantics: flag 0 returns
 * the buffers whose records are all complete, FLUSH_FORCED returns every buffer,
 * its records still in flight with end (and start, if not started) = 0, never
 * delivered again; a worker thread that delivers full, complete buffers, as the
 * periodic flush does; dropped-record counts. Simulated hazard: a flush after the
 * runtime's exit teardown (GPUSIM_TEARDOWN_AT_EXIT=1) hangs for a minute, as
 * CUPTI tools have hung there on real drivers (see cuptiActivityFlushAll).
 *
 * Simulated faults (environment variables read when the call is made, or once
 * for the two checked at every call or record, FATAL_AFTER and INVALID_RECORD; each
 * one a failure CUPTI documents, forced here so that a client's handling of it
 * can be tested; nothing real fails):
 *   GPUSIM_CUPTI_VERSION=N           cuptiGetVersion answers N (an older or
 *                                    newer CUPTI than this one's headers); below
 *                                    27 a null buffer from the client aborts, a
 *                                    simulated hazard (cupti_buffers.c)
 *   GPUSIM_CUPTI_SUBSCRIBE_ERROR=E   cuptiSubscribe fails with the CUptiResult
 *                                    named E (CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
 *                                    another tool holds CUPTI; ..._NOT_INITIALIZED,
 *                                    ..._VIRTUALIZED_DEVICE_NOT_SUPPORTED,
 *                                    ..._CONFIDENTIAL_COMPUTING_NOT_SUPPORTED)
 *   GPUSIM_CUPTI_REFUSE_CALLBACK=D:ID  cuptiEnableCallback(1, ..., D, ID) fails
 *                                    with CUPTI_ERROR_INVALID_PARAMETER, as for
 *                                    a callback id this CUPTI does not know
 *   GPUSIM_CUPTI_TIMESTAMP_ERROR=E   cuptiActivityRegisterTimestampCallback
 *                                    fails with E; records keep CUPTI's default
 *                                    clock (CLOCK_REALTIME)
 *   GPUSIM_CUPTI_FORCED_FLUSH_ERROR=E  cuptiActivityFlushAll with
 *                                    CUPTI_ACTIVITY_FLAG_FLUSH_FORCED fails with
 *                                    E and hands nothing back (unforced flushes
 *                                    and the worker go on)
 *   GPUSIM_CUPTI_FATAL_AFTER=N       once N kernels have ended, the next API
 *                                    call raises CUPTI_CBID_STATE_FATAL_ERROR
 *                                    (CUPTI_ERROR_UNKNOWN, "simulated fatal
 *                                    error") and, as documented, CUPTI then
 *                                    invokes cuptiFinalize itself
 *   GPUSIM_CUPTI_INVALID_RECORD=N    the Nth kernel record is corrupt: the
 *                                    client's cuptiActivityGetNextRecord fails on
 *                                    it with CUPTI_ERROR_INVALID_KIND ("activity
 *                                    record is either incomplete or invalid")
 *   GPUSIM_CUPTI_DROPPED=N           the first cuptiActivityGetNumDroppedRecords
 *                                    counts N more records dropped, as when
 *                                    the client's buffers were full
 *   GPUSIM_CUPTI_FLUSH_HANG_S=N      each unforced cuptiActivityFlushAll
 *                                    stays inside CUPTI for N seconds,
 *                                    holding its lock, as in a driver that
 *                                    stopped answering (forced ones go on);
 *                                    gpusim_cupti_flush_hanging() says one
 *                                    has begun
 *   GPUSIM_CUPTI_FORCED_FLUSH_HANG_S=N  the same for each forced one
 *   GPUSIM_CUPTI_LATE_BUFFER=1       at process exit, after every atexit
 *                                    handler (the client's final flush), the
 *                                    worker hands back one more buffer, as a
 *                                    worker racing the exit can
 * One behaviour of real CUPTI is switched on only on request, for the tests of
 * a client's locking:
 *   GPUSIM_CUPTI_WORKER_US=N         CUPTI's lock, which its worker holds
 *                                    across the client's buffer callback, is
 *                                    also held while resource callbacks run
 *                                    (contexts, streams, graph nodes) and
 *                                    throughout cudaDeviceReset, and taken by
 *                                    cuptiActivityGetNumDroppedRecords and
 *                                    cuptiActivityFlushAll, as CUPTI's is (the
 *                                    flush hands its buffers over once it has
 *                                    let go of it); the worker wakes every N
 *                                    µs and hands back partly filled buffers
 *                                    too, as CUPTI's periodic flush does
 * and two test hooks: GPUSIM_CUPTI_FORCED_FLUSH_HOOK=SYMBOL, the first forced
 * flush calls the program's function SYMBOL first, and
 * GPUSIM_CUPTI_LOCKED_HOOK=SYMBOL, each API call's enter calls it, after the
 * subscriber's callback, holding the lock cuptiActivityFlushAll takes
 * (cupti_buffers.c).
 * A value "VALUE@FILE" applies only to the copy of libcupti whose file is named
 * FILE, so that one CUDA install can hold a failing and a working CUPTI.
 * gpusim_cupti_state() tells a test program what a client left subscribed and
 * enabled, gpusim_cupti_callback_enabled() whether one callback is on,
 * gpusim_cupti_events() the order of its flushes and disabled kinds.
 *
 * The PC Sampling API is in cupti_pcsampling.c.
 *
 * What it does not do: metrics, events, profiling ranges, NVTX,
 * unified memory counters, per-stream buffers (buffers are per thread, CUDA 13's
 * default, whatever the attribute says), OVERHEAD
 * records; peer copies are reported only as MEMCPY2 (as CUPTI's header says),
 * and activity kinds without a record here are accepted and stay empty. It prints
 * nothing.
 *
 * The activity buffers and their delivery are in cupti_buffers.c; what the two
 * files share is in cupti_internal.h. */
#include "cupti_internal.h"

/* ------------------------------------------------------------------ errors */

static __thread CUptiResult tls_last_error;

CUptiResult fail(CUptiResult r) {
    tls_last_error = r;
    return r;
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiGetLastError(void) {
    CUptiResult r = tls_last_error;
    tls_last_error = CUPTI_SUCCESS;
    return r;
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiGetResultString(CUptiResult result, const char **str) {
    if (!str)
        return fail(CUPTI_ERROR_INVALID_PARAMETER);
    for (size_t i = 0; i < sizeof gpusim_result_names / sizeof gpusim_result_names[0]; i++)
        if (gpusim_result_names[i].code == (int)result) {
            *str = gpusim_result_names[i].name;
            return CUPTI_SUCCESS;
        }
    return fail(CUPTI_ERROR_INVALID_PARAMETER);
}

/* ------------------------------------------------------------------ simulated faults */

/* The value of the simulated fault `var` for this copy of libcupti: "VALUE"
 * applies to every copy, "VALUE@FILE" only to the copy whose file is named FILE
 * (a CUDA install holding two, say libcupti.so.13 and libcupti.so.12). NULL when
 * unset or meant for another copy. Copied into `buf`. */
static const char *sim_fault_value(const char *var, char *buf, size_t size) {
    const char *v = getenv(var);
    if (!v || !*v || strlen(v) >= size)
        return NULL;
    strcpy(buf, v);
    char *at = strchr(buf, '@');
    if (!at)
        return buf;
    *at = 0;
    Dl_info self;
    if (!dladdr((void *)sim_fault_value, &self) || !self.dli_fname)
        return NULL;
    const char *slash = strrchr(self.dli_fname, '/');
    return strcmp(slash ? slash + 1 : self.dli_fname, at + 1) == 0 ? buf : NULL;
}

sim_hook_fn sim_hook(struct sim_hook *h) {
    if (!atomic_load_explicit(&h->looked, memory_order_acquire)) {
        const char *name = getenv(h->var);
        if (name && *name)
            atomic_store(&h->fn, (sim_hook_fn)dlsym(RTLD_DEFAULT, name));
        atomic_store_explicit(&h->looked, 1, memory_order_release);
    }
    return atomic_load(&h->fn);
}

long sim_fault_number(const char *var, long none) {
    char buf[256];
    const char *v = sim_fault_value(var, buf, sizeof buf);
    if (!v || !*v)
        return none;
    char *end;
    long n = strtol(v, &end, 10);
    return *end == 0 ? n : none;
}

/* The CUptiResult named by `var` (a name of cupti_result.h, or its number), or
 * CUPTI_SUCCESS when unset or unknown. */
CUptiResult sim_fault_result(const char *var) {
    char buf[256];
    const char *v = sim_fault_value(var, buf, sizeof buf);
    if (!v || !*v)
        return CUPTI_SUCCESS;
    for (size_t i = 0; i < sizeof gpusim_result_names / sizeof gpusim_result_names[0]; i++)
        if (strcmp(gpusim_result_names[i].name, v) == 0)
            return (CUptiResult)gpusim_result_names[i].code;
    return (CUptiResult)sim_fault_number(var, CUPTI_SUCCESS);
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiGetVersion(uint32_t *version) {
    if (!version)
        return fail(CUPTI_ERROR_INVALID_PARAMETER);
    *version = (uint32_t)sim_fault_number("GPUSIM_CUPTI_VERSION", CUPTI_API_VERSION);
    return CUPTI_SUCCESS;
}

/* ------------------------------------------------------------------ clock */

static _Atomic(CUpti_TimestampCallbackFunc) g_clock;
/* CUPTI time = CLOCK_MONOTONIC + offset. By default CUPTI's clock reads like
 * CLOCK_REALTIME; with a timestamp callback it is the callback's clock, measured
 * against CLOCK_MONOTONIC when it is registered. CUPTI documents the callback's
 * clock as nanoseconds; one that runs at another rate (Kineto's TSC-based one)
 * is mapped linearly, as CUPTI interpolates GPU timestamps: then
 * CUPTI time = g_ref_cupti + (CLOCK_MONOTONIC - g_ref_mono) * g_rate. */
static _Atomic int64_t g_offset;
static _Atomic int g_offset_set;
static double g_rate = 1.0;
static uint64_t g_ref_mono, g_ref_cupti;

static int64_t realtime_offset(void) {
    struct timespec r, m;
    clock_gettime(CLOCK_REALTIME, &r);
    clock_gettime(CLOCK_MONOTONIC, &m);
    return ((int64_t)r.tv_sec - m.tv_sec) * 1000000000ll + (r.tv_nsec - m.tv_nsec);
}

int64_t offset(void) {
    if (!atomic_load_explicit(&g_offset_set, memory_order_acquire)) {
        atomic_store(&g_offset, realtime_offset());
        atomic_store_explicit(&g_offset_set, 1, memory_order_release);
    }
    return atomic_load_explicit(&g_offset, memory_order_relaxed);
}

uint64_t to_cupti(uint64_t mono) {
    if (!mono)
        return 0;
    int64_t off = offset();
    if (g_rate != 1.0)
        return g_ref_cupti + (uint64_t)((double)((int64_t)mono - (int64_t)g_ref_mono) * g_rate);
    return (uint64_t)((int64_t)mono + off);
}

/* One reading of the callback, bracketed by CLOCK_MONOTONIC as tightly as 16
 * tries allow: (monotonic at the middle, callback). */
static void bracket(CUpti_TimestampCallbackFunc f, uint64_t *mono, uint64_t *cb) {
    uint64_t width = UINT64_MAX;
    for (int i = 0; i < 16; i++) {
        uint64_t a = gpusim_now_ns();
        uint64_t t = f();
        uint64_t b = gpusim_now_ns();
        if (b - a < width) {
            width = b - a;
            *mono = a + (b - a) / 2;
            *cb = t;
        }
    }
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc f) {
    if (!f)
        return fail(CUPTI_ERROR_INVALID_PARAMETER);
    CUptiResult refused = sim_fault_result("GPUSIM_CUPTI_TIMESTAMP_ERROR");
    if (refused != CUPTI_SUCCESS)
        return fail(refused); /* simulated: the default clock stays */
    uint64_t m0 = 0, c0 = 0, m1 = 0, c1 = 0;
    bracket(f, &m0, &c0);
    /* 2 ms apart, to measure the callback's rate. */
    while (gpusim_now_ns() < m0 + 2000000)
        ;
    bracket(f, &m1, &c1);
    double rate = m1 > m0 ? (double)((int64_t)c1 - (int64_t)c0) / (double)(m1 - m0) : 1.0;
    /* A nanosecond clock (as documented) maps by its offset alone, so that
     * simulated durations stay exact. */
    if (rate > 0.999 && rate < 1.001)
        rate = 1.0;
    g_ref_mono = m1;
    g_ref_cupti = c1;
    g_rate = rate > 0 ? rate : 1.0;
    atomic_store(&g_clock, f);
    atomic_store(&g_offset, (int64_t)c1 - (int64_t)m1);
    atomic_store_explicit(&g_offset_set, 1, memory_order_release);
    return CUPTI_SUCCESS;
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiGetTimestamp(uint64_t *timestamp) {
    if (!timestamp)
        return fail(CUPTI_ERROR_INVALID_PARAMETER);
    CUpti_TimestampCallbackFunc f = atomic_load(&g_clock);
    *timestamp = f ? f() : to_cupti(gpusim_now_ns());
    return CUPTI_SUCCESS;
}

/* ------------------------------------------------------------------ subscriber */

pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_subscribed;
static CUpti_CallbackFunc g_callback;
static void *g_userdata;
static volatile unsigned char g_enabled[NDOMAINS][GPUSIM_MAX_CBID];
static volatile unsigned char g_kinds[NKINDS];
static _Atomic int g_api_kinds; /* RUNTIME or DRIVER records wanted */
static int g_thread_id_type = CUPTI_ACTIVITY_THREAD_ID_TYPE_DEFAULT;
static const struct gpusim_tool g_tool;
static int g_attached;

/* Callbacks of the subscriber's this thread is inside. */
static __thread int tls_in_callback;

int sim_in_callback(void) {
    return tls_in_callback;
}

/* Calls the subscriber's callback, noting that the thread is inside it. */
static void deliver(CUpti_CallbackFunc cb, CUpti_CallbackDomain d, CUpti_CallbackId id, const void *data) {
    tls_in_callback++;
    cb(g_userdata, d, id, data);
    tls_in_callback--;
}

static CUptiResult attach(void) {
    if (g_attached)
        return CUPTI_SUCCESS;
    if (gpusim_attach_tool(&g_tool) != 0)
        return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    g_attached = 1;
    return CUPTI_SUCCESS;
}

#define SUBSCRIBER ((CUpti_SubscriberHandle)&g_subscribed)

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiSubscribe(CUpti_SubscriberHandle *subscriber,
                                                  CUpti_CallbackFunc callback, void *userdata) {
    if (!subscriber)
        return fail(CUPTI_ERROR_INVALID_PARAMETER);
    CUptiResult refused = sim_fault_result("GPUSIM_CUPTI_SUBSCRIBE_ERROR");
    if (refused != CUPTI_SUCCESS)
        return fail(refused); /* simulated */
    pthread_mutex_lock(&g_mu);
    if (g_subscribed) {
        pthread_mutex_unlock(&g_mu);
        return fail(CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
    }
    CUptiResult r = attach();
    if (r == CUPTI_SUCCESS) {
        g_subscribed = 1;
        g_callback = callback;
        g_userdata = userdata;
        *subscriber = SUBSCRIBER;
    }
    pthread_mutex_unlock(&g_mu);
    return r == CUPTI_SUCCESS ? r : fail(r);
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiUnsubscribe(CUpti_SubscriberHandle subscriber) {
    pthread_mutex_lock(&g_mu);
    if (!g_subscribed || subscriber != SUBSCRIBER) {
        pthread_mutex_unlock(&g_mu);
        return fail(CUPTI_ERROR_INVALID_PARAMETER);
    }
    g_subscribed = 0;
    g_callback = NULL;
    memset((void *)g_enabled, 0, sizeof g_enabled);
    pthread_mutex_unlock(&g_mu);
    return CUPTI_SUCCESS;
}

static uint32_t domain_size(CUpti_CallbackDomain d) {
    switch (d) {
    case CUPTI_CB_DOMAIN_RUNTIME_API: return sizeof gpusim_runtime_cbid_names / sizeof(char *);
    case CUPTI_CB_DOMAIN_DRIVER_API: return sizeof gpusim_driver_cbid_names / sizeof(char *);
    case CUPTI_CB_DOMAIN_RESOURCE: return CUPTI_CBID_RESOURCE_SIZE;
    case CUPTI_CB_DOMAIN_SYNCHRONIZE: return CUPTI_CBID_SYNCHRONIZE_SIZE;
    case CUPTI_CB_DOMAIN_NVTX: return CUPTI_CBID_NVTX_SIZE;
    case CUPTI_CB_DOMAIN_STATE: return CUPTI_CBID_STATE_SIZE;
    default: return 0;
    }
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                                       CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
    if (subscriber != SUBSCRIBER || !g_subscribed)
        return fail(CUPTI_ERROR_INVALID_PARAMETER);
    if (cbid >= domain_size(domain) || cbid >= GPUSIM_MAX_CBID)
        return fail(CUPTI_ERROR_INVALID_PARAMETER);
    char buf[256];
    const char *refuse = sim_fault_value("GPUSIM_CUPTI_REFUSE_CALLBACK", buf, sizeof buf);
    unsigned rd, rid;
    if (enable && refuse && sscanf(refuse, "%u:%u", &rd, &rid) == 2 && rd == (unsigned)domain && rid == cbid)
        return fail(CUPTI_ERROR_INVALID_PARAMETER); /* simulated */
    g_enabled[domain][cbid] = enable != 0;
    return CUPTI_SUCCESS;
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiEnableDomain(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                                     CUpti_CallbackDomain domain) {
    if (subscriber != SUBSCRIBER || !g_subscribed || domain_size(domain) == 0)
        return fail(CUPTI_ERROR_INVALID_PARAMETER);
    for (uint32_t i = 0; i < domain_size(domain) && i < GPUSIM_MAX_CBID; i++)
        g_enabled[domain][i] = enable != 0;
    return CUPTI_SUCCESS;
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiEnableAllDomains(uint32_t enable, CUpti_SubscriberHandle subscriber) {
    for (int d = CUPTI_CB_DOMAIN_DRIVER_API; d < CUPTI_CB_DOMAIN_SIZE; d++) {
        CUptiResult r = cuptiEnableDomain(enable, subscriber, (CUpti_CallbackDomain)d);
        if (r != CUPTI_SUCCESS)
            return r;
    }
    return CUPTI_SUCCESS;
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiGetCallbackName(CUpti_CallbackDomain domain, uint32_t cbid,
                                                        const char **name) {
    const char *n = NULL;
    if (!name)
        return fail(CUPTI_ERROR_INVALID_PARAMETER);
    if (domain == CUPTI_CB_DOMAIN_RUNTIME_API && cbid < domain_size(domain))
        n = gpusim_runtime_cbid_names[cbid];
    else if (domain == CUPTI_CB_DOMAIN_DRIVER_API && cbid < domain_size(domain))
        n = gpusim_driver_cbid_names[cbid];
    if (!n)
        return fail(CUPTI_ERROR_INVALID_PARAMETER);
    *name = n;
    return CUPTI_SUCCESS;
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiSetThreadIdType(CUpti_ActivityThreadIdType type) {
    if (type != CUPTI_ACTIVITY_THREAD_ID_TYPE_DEFAULT && type != CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM)
        return fail(CUPTI_ERROR_INVALID_PARAMETER);
    g_thread_id_type = type;
    return CUPTI_SUCCESS;
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiGetThreadIdType(CUpti_ActivityThreadIdType *type) {
    if (!type)
        return fail(CUPTI_ERROR_INVALID_PARAMETER);
    *type = (CUpti_ActivityThreadIdType)g_thread_id_type;
    return CUPTI_SUCCESS;
}

static uint32_t thread_id(void) {
    if (g_thread_id_type == CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM)
        return (uint32_t)gettid();
    return (uint32_t)(uintptr_t)pthread_self();
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiGetContextId(CUcontext context, uint32_t *id) {
    if (!id || gpusim_context_info(context, id, NULL))
        return fail(CUPTI_ERROR_INVALID_PARAMETER);
    return CUPTI_SUCCESS;
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiGetDeviceId(CUcontext context, uint32_t *id) {
    if (!id || gpusim_context_info(context, NULL, id))
        return fail(CUPTI_ERROR_INVALID_PARAMETER);
    return CUPTI_SUCCESS;
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiGetStreamId(CUcontext context, CUstream stream, uint32_t *id) {
    if (!id || gpusim_stream_id(context, stream, id))
        return fail(CUPTI_ERROR_INVALID_PARAMETER);
    return CUPTI_SUCCESS;
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiGetStreamIdEx(CUcontext context, CUstream stream,
                                                      uint8_t perThreadStream, uint32_t *id) {
    return cuptiGetStreamId(context, perThreadStream && !stream ? CU_STREAM_PER_THREAD : stream, id);
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiGetGraphNodeId(CUgraphNode node, uint64_t *id) {
    if (!id || gpusim_graph_node_id(node, id))
        return fail(CUPTI_ERROR_INVALID_PARAMETER);
    return CUPTI_SUCCESS;
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiGetGraphId(CUgraph graph, uint32_t *id) {
    if (!id || gpusim_graph_id(graph, id))
        return fail(CUPTI_ERROR_INVALID_PARAMETER);
    return CUPTI_SUCCESS;
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiGetGraphExecId(CUgraphExec exec, uint32_t *id) {
    if (!id || gpusim_graph_exec_id(exec, id))
        return fail(CUPTI_ERROR_INVALID_PARAMETER);
    return CUPTI_SUCCESS;
}

/* ------------------------------------------------------------------ activity kinds */

static void announce_existing(void);

/* Which API calls get RUNTIME and DRIVER records: the activity kind turns all of
 * a domain's on or off, cuptiActivityEnableRuntimeApi/DriverApi one callback id. */
static volatile unsigned char g_api_on[2][GPUSIM_MAX_CBID];

static void api_domain(int runtime, int on) {
    memset((void *)g_api_on[runtime], on, sizeof g_api_on[runtime]);
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiActivityEnable(CUpti_ActivityKind kind) {
    if ((unsigned)kind == 0 || (unsigned)kind >= CUPTI_ACTIVITY_KIND_COUNT || kind >= NKINDS)
        return fail(CUPTI_ERROR_INVALID_KIND);
    pthread_mutex_lock(&g_mu);
    CUptiResult r = attach();
    pthread_mutex_unlock(&g_mu);
    if (r != CUPTI_SUCCESS)
        return fail(r);
    g_kinds[kind] = 1;
    if (kind == CUPTI_ACTIVITY_KIND_RUNTIME || kind == CUPTI_ACTIVITY_KIND_DRIVER) {
        api_domain(kind == CUPTI_ACTIVITY_KIND_RUNTIME, 1);
        atomic_store(&g_api_kinds, 1);
    }
    if (kind == CUPTI_ACTIVITY_KIND_DEVICE || kind == CUPTI_ACTIVITY_KIND_CONTEXT)
        announce_existing();
    return CUPTI_SUCCESS;
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiActivityDisable(CUpti_ActivityKind kind) {
    if ((unsigned)kind == 0 || (unsigned)kind >= CUPTI_ACTIVITY_KIND_COUNT || kind >= NKINDS)
        return fail(CUPTI_ERROR_INVALID_KIND);
    g_kinds[kind] = 0;
    if (kind == CUPTI_ACTIVITY_KIND_RUNTIME || kind == CUPTI_ACTIVITY_KIND_DRIVER)
        api_domain(kind == CUPTI_ACTIVITY_KIND_RUNTIME, 0);
    char e[16];
    snprintf(e, sizeof e, "D%d", (int)kind);
    sim_event(e);
    return CUPTI_SUCCESS;
}

static CUptiResult enable_api(int runtime, CUpti_CallbackId cbid, uint8_t enable) {
    if (cbid >= GPUSIM_MAX_CBID ||
        cbid >= domain_size(runtime ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API))
        return fail(CUPTI_ERROR_INVALID_PARAMETER);
    pthread_mutex_lock(&g_mu);
    CUptiResult r = attach();
    pthread_mutex_unlock(&g_mu);
    if (r != CUPTI_SUCCESS)
        return fail(r);
    g_api_on[runtime][cbid] = enable != 0;
    if (enable)
        atomic_store(&g_api_kinds, 1);
    return CUPTI_SUCCESS;
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiActivityEnableRuntimeApi(CUpti_CallbackId cbid, uint8_t enable) {
    return enable_api(1, cbid, enable);
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiActivityEnableDriverApi(CUpti_CallbackId cbid, uint8_t enable) {
    return enable_api(0, cbid, enable);
}

/* Device timestamps for CUDA events: the simulated events already carry the
 * simulated device time, so there is nothing to switch. */
GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiActivityEnableCudaEventDeviceTimestamps(uint8_t enable) {
    (void)enable;
    return CUPTI_SUCCESS;
}

/* External correlation: a stack of ids per kind and thread; every API call made
 * while one is pushed gets an EXTERNAL_CORRELATION record naming it. */
#define EXT_KINDS 8
#define EXT_DEPTH 64
static __thread uint64_t tls_ext[EXT_KINDS][EXT_DEPTH];
static __thread int tls_ext_n[EXT_KINDS];

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind kind,
                                                                          uint64_t id) {
    if ((unsigned)kind == 0 || (unsigned)kind >= EXT_KINDS)
        return fail(CUPTI_ERROR_INVALID_PARAMETER);
    if (tls_ext_n[kind] == EXT_DEPTH)
        return fail(CUPTI_ERROR_OUT_OF_MEMORY);
    tls_ext[kind][tls_ext_n[kind]++] = id;
    return CUPTI_SUCCESS;
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind kind,
                                                                         uint64_t *lastId) {
    if ((unsigned)kind == 0 || (unsigned)kind >= EXT_KINDS || tls_ext_n[kind] == 0)
        return fail(CUPTI_ERROR_QUEUE_EMPTY);
    uint64_t id = tls_ext[kind][--tls_ext_n[kind]];
    if (lastId)
        *lastId = id;
    return CUPTI_SUCCESS;
}

static void external_records(const struct gpusim_api *c) {
    if (!g_kinds[CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION] || !c->correlation_id ||
        (c->domain == GPUSIM_DOMAIN_DRIVER && c->outer))
        return;
    for (int k = 1; k < EXT_KINDS; k++) {
        if (!tls_ext_n[k])
            continue;
        CUpti_ActivityExternalCorrelation e;
        memset(&e, 0, sizeof e);
        e.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
        e.externalKind = (CUpti_ExternalCorrelationKind)k;
        e.externalId = tls_ext[k][tls_ext_n[k] - 1];
        e.correlationId = c->correlation_id;
        append(&e, sizeof e, 0);
    }
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiFinalize(void) {
    if (g_complete)
        flush(1, 1);
    pthread_mutex_lock(&g_mu);
    memset((void *)g_kinds, 0, sizeof g_kinds);
    memset((void *)g_api_on, 0, sizeof g_api_on);
    atomic_store(&g_api_kinds, 0);
    g_subscribed = 0;
    g_callback = NULL;
    memset((void *)g_enabled, 0, sizeof g_enabled);
    if (g_attached) {
        gpusim_detach_tool(&g_tool);
        g_attached = 0;
    }
    pthread_mutex_unlock(&g_mu);
    return CUPTI_SUCCESS;
}

/* For test programs (simulated, no CUPTI function): the client's flushes and
 * disabled kinds in order ("F0"/"F1": cuptiActivityFlushAll with flag 0 or
 * FLUSH_FORCED, "DK": cuptiActivityDisable of kind K), space-separated. */
static char g_events[4096];
static pthread_mutex_t g_events_mu = PTHREAD_MUTEX_INITIALIZER;

void sim_event(const char *e) {
    pthread_mutex_lock(&g_events_mu);
    size_t n = strlen(g_events);
    if (n + strlen(e) + 2 < sizeof g_events)
        snprintf(g_events + n, sizeof g_events - n, "%s%s", n ? " " : "", e);
    pthread_mutex_unlock(&g_events_mu);
}

GPUSIM_EXPORT const char *gpusim_cupti_events(void) { return g_events; }

/* For test programs (simulated, no CUPTI function): whether a client is
 * subscribed, how many activity kinds and callbacks are enabled. */
GPUSIM_EXPORT void gpusim_cupti_state(int *subscribed, int *kinds, int *callbacks) {
    pthread_mutex_lock(&g_mu);
    *subscribed = g_subscribed;
    *kinds = 0;
    for (int k = 0; k < NKINDS; k++)
        *kinds += g_kinds[k];
    *callbacks = 0;
    for (int d = 0; d < NDOMAINS; d++)
        for (int i = 0; i < GPUSIM_MAX_CBID; i++)
            *callbacks += g_enabled[d][i];
    pthread_mutex_unlock(&g_mu);
}

/* For test programs (simulated, no CUPTI function): whether the subscriber
 * enabled the callback `cbid` of `domain`. */
GPUSIM_EXPORT int gpusim_cupti_callback_enabled(int domain, int cbid) {
    if (domain < 0 || domain >= NDOMAINS || cbid < 0 || cbid >= GPUSIM_MAX_CBID)
        return 0;
    return g_subscribed && g_enabled[domain][cbid];
}

/* GPUSIM_CUPTI_FATAL_AFTER: kernel ends seen, and whether the fatal error was raised. */
static _Atomic uint64_t g_kernel_ends[64];
static _Atomic unsigned g_kernels_seen;
static _Atomic int g_fatal_raised;

/* Simulated fatal error, at an API call's enter once N kernels have ended: the
 * subscriber hears CUPTI_CBID_STATE_FATAL_ERROR, then CUPTI finalizes itself
 * ("When encountered, CUPTI automatically invokes cuptiFinalize()"). */
static void maybe_fatal(void) {
    /* Read once: this runs at every API call. */
    static _Atomic long cached = -2;
    long after = atomic_load_explicit(&cached, memory_order_relaxed);
    if (after == -2) {
        after = sim_fault_number("GPUSIM_CUPTI_FATAL_AFTER", -1);
        atomic_store(&cached, after);
    }
    if (after < 0 || after > 64 || atomic_load(&g_fatal_raised) || atomic_load(&g_kernels_seen) < (unsigned)after)
        return;
    uint64_t now = to_cupti(gpusim_now_ns());
    for (long i = 0; i < after; i++)
        if (atomic_load(&g_kernel_ends[i]) > now)
            return;
    if (atomic_exchange(&g_fatal_raised, 1))
        return;
    CUpti_CallbackFunc cb = g_callback;
    if (cb && g_enabled[CUPTI_CB_DOMAIN_STATE][CUPTI_CBID_STATE_FATAL_ERROR]) {
        CUpti_StateData st;
        memset(&st, 0, sizeof st);
        st.notification.result = CUPTI_ERROR_UNKNOWN;
        st.notification.message = "simulated fatal error";
        deliver(cb, CUPTI_CB_DOMAIN_STATE, CUPTI_CBID_STATE_FATAL_ERROR, &st);
    }
    cuptiFinalize();
}

/* ------------------------------------------------------------------ the driver's hooks */

/* In cupti_dispatch.c, which has no unwind tables and no frame pointer. */
void gpusim_cupti_deliver(CUpti_CallbackFunc cb, void *userdata, const struct gpusim_api *c,
                          CUpti_ApiCallbackSite site);

static void callback(struct gpusim_api *c, CUpti_ApiCallbackSite site) {
    CUpti_CallbackFunc cb = g_callback;
    if (!cb || c->domain >= NDOMAINS || c->cbid >= GPUSIM_MAX_CBID || !g_enabled[c->domain][c->cbid])
        return;
    tls_in_callback++;
    gpusim_cupti_deliver(cb, g_userdata, c, site);
    tls_in_callback--;
}

/* cudaDeviceReset tears its contexts down under CUPTI's lock
 * (GPUSIM_CUPTI_WORKER_US): taken at its enter, released at its exit. */
static int holds_lock_throughout(const struct gpusim_api *c) {
    return c->domain == GPUSIM_DOMAIN_RUNTIME && c->cbid == CUPTI_RUNTIME_TRACE_CBID_cudaDeviceReset_v3020;
}

static void on_api_enter(struct gpusim_api *c) {
    maybe_fatal();
    /* Only an API activity record needs the call's start. */
    if (atomic_load_explicit(&g_api_kinds, memory_order_relaxed))
        c->start_ns = gpusim_now_ns();
    external_records(c);
    if (holds_lock_throughout(c))
        cupti_lock();
    callback(c, CUPTI_API_ENTER);
    locked_hook();
    if (c->symbol)
        pcs_launch(c->context, c->context_id, c->symbol);
}

static void on_api_exit(struct gpusim_api *c) {
    if (!(c->domain == GPUSIM_DOMAIN_DRIVER && c->outer))
        pcs_before_exit();
    callback(c, CUPTI_API_EXIT);
    if (holds_lock_throughout(c))
        cupti_unlock();
    if (!atomic_load_explicit(&g_api_kinds, memory_order_relaxed))
        return;
    int kind = c->domain == GPUSIM_DOMAIN_RUNTIME ? CUPTI_ACTIVITY_KIND_RUNTIME : CUPTI_ACTIVITY_KIND_DRIVER;
    /* A driver call made by a runtime call has no record of its own: CUPTI logs of
     * real programs with DRIVER records on have none for the runtime's launches
     * and copies, only for the driver calls the program makes itself. */
    /* start_ns == 0: the kind was enabled during the call. */
    if (c->cbid >= GPUSIM_MAX_CBID || !g_api_on[kind == CUPTI_ACTIVITY_KIND_RUNTIME][c->cbid] ||
        (c->domain == GPUSIM_DOMAIN_DRIVER && c->outer) || c->start_ns == 0)
        return;
    CUpti_ActivityAPI a = {
        .kind = (CUpti_ActivityKind)kind,
        .cbid = c->cbid,
        .start = to_cupti(c->start_ns),
        .end = to_cupti(gpusim_now_ns()),
        .processId = (uint32_t)getpid(),
        .threadId = thread_id(),
        .correlationId = c->correlation_id,
        .returnValue = c->ret ? *(uint32_t *)c->ret : 0,
    };
    append(&a, sizeof a, 0);
}

/* The fields a same-device copy record (Memcpy6) and a peer copy record
   (MemcpyPtoP4) share, by name: the two are different structs. */
#define COPY_FIELDS(m, op, start_, end_)                                   \
    do {                                                                   \
        (m).copyKind = (op)->copy_kind;                                    \
        (m).srcKind = (op)->src_kind;                                      \
        (m).dstKind = (op)->dst_kind;                                      \
        (m).flags = (op)->async ? CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC : 0;    \
        (m).bytes = (op)->bytes;                                           \
        (m).start = (start_);                                              \
        (m).end = (end_);                                                  \
        (m).deviceId = (op)->device;                                       \
        (m).contextId = (op)->context;                                     \
        (m).streamId = (op)->stream;                                       \
    } while (0)
#define COPY_GRAPH_FIELDS(m, op)                                           \
    do {                                                                   \
        (m).graphNodeId = (op)->graph_node_id;                             \
        (m).graphId = (op)->graph_id;                                      \
        (m).channelType = CUPTI_CHANNEL_TYPE_ASYNC_MEMCPY;                 \
    } while (0)

static void on_op(const struct gpusim_op *op) {
    uint64_t start = to_cupti(op->start_ns), end = to_cupti(op->end_ns);
    switch (op->kind) {
    case GPUSIM_OP_KERNEL: {
        pcs_kernel(op);
        int kind = g_kinds[CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL] ? CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL
                   : g_kinds[CUPTI_ACTIVITY_KIND_KERNEL]          ? CUPTI_ACTIVITY_KIND_KERNEL
                                                                  : 0;
        if (!kind)
            return;
        CUpti_ActivityKernel10 k;
        memset(&k, 0, sizeof k);
        k.kind = (CUpti_ActivityKind)kind;
        k.start = start;
        k.end = end;
        k.completed = end;
        k.deviceId = op->device;
        k.contextId = op->context;
        k.streamId = op->stream;
        k.gridX = op->grid[0], k.gridY = op->grid[1], k.gridZ = op->grid[2];
        k.blockX = op->block[0], k.blockY = op->block[1], k.blockZ = op->block[2];
        k.staticSharedMemory = op->static_shared;
        k.dynamicSharedMemory = op->dynamic_shared;
        k.registersPerThread = op->registers;
        /* "the driver or runtime API activity record that launched the
           kernel": the runtime call's, when a runtime call made the launch. */
        k.correlationId = op->runtime_correlation_id ? op->runtime_correlation_id : op->correlation_id;
        k.gridId = op->grid_id;
        k.name = op->name;
        k.launchType = op->launch_type;
        k.graphNodeId = op->graph_node_id;
        k.graphId = op->graph_id;
        k.channelType = CUPTI_CHANNEL_TYPE_COMPUTE;
        unsigned nth = atomic_fetch_add(&g_kernels_seen, 1);
        if (nth < 64)
            atomic_store(&g_kernel_ends[nth], end);
        /* Simulated: a corrupt record (a kind no CUPTI knows). Read once. */
        static _Atomic long invalid = -2;
        if (atomic_load_explicit(&invalid, memory_order_relaxed) == -2)
            atomic_store(&invalid, sim_fault_number("GPUSIM_CUPTI_INVALID_RECORD", -1));
        if ((long)nth + 1 == atomic_load_explicit(&invalid, memory_order_relaxed))
            k.kind = (CUpti_ActivityKind)0x7fff;
        append(&k, sizeof k, end);
        return;
    }
    case GPUSIM_OP_MEMCPY: {
        if (!g_kinds[CUPTI_ACTIVITY_KIND_MEMCPY])
            return;
        CUpti_ActivityMemcpy6 m;
        memset(&m, 0, sizeof m);
        m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
        COPY_FIELDS(m, op, start, end);
        m.correlationId = op->correlation_id;
        m.runtimeCorrelationId = op->runtime_correlation_id;
        COPY_GRAPH_FIELDS(m, op);
        m.copyCount = 1;
        append(&m, sizeof m, end);
        return;
    }
    case GPUSIM_OP_MEMCPY_PEER: {
        if (!g_kinds[CUPTI_ACTIVITY_KIND_MEMCPY2])
            return;
        CUpti_ActivityMemcpyPtoP4 m;
        memset(&m, 0, sizeof m);
        m.kind = CUPTI_ACTIVITY_KIND_MEMCPY2;
        COPY_FIELDS(m, op, start, end);
        m.srcDeviceId = op->src_device;
        m.srcContextId = op->src_context;
        m.dstDeviceId = op->dst_device;
        m.dstContextId = op->dst_context;
        m.correlationId = op->correlation_id;
        COPY_GRAPH_FIELDS(m, op);
        append(&m, sizeof m, end);
        return;
    }
    case GPUSIM_OP_MEMSET: {
        if (!g_kinds[CUPTI_ACTIVITY_KIND_MEMSET])
            return;
        CUpti_ActivityMemset4 m;
        memset(&m, 0, sizeof m);
        m.kind = CUPTI_ACTIVITY_KIND_MEMSET;
        m.value = op->value;
        m.bytes = op->bytes;
        m.start = start;
        m.end = end;
        m.deviceId = op->device;
        m.contextId = op->context;
        m.streamId = op->stream;
        m.correlationId = op->correlation_id;
        m.flags = op->async ? CUPTI_ACTIVITY_FLAG_MEMSET_ASYNC : 0;
        m.memoryKind = op->memory_kind;
        m.graphNodeId = op->graph_node_id;
        m.graphId = op->graph_id;
        m.channelType = CUPTI_CHANNEL_TYPE_COMPUTE;
        append(&m, sizeof m, end);
        return;
    }
    default: return;
    }
}

static void on_sync(const struct gpusim_sync *y) {
    if (!g_kinds[CUPTI_ACTIVITY_KIND_SYNCHRONIZATION])
        return;
    CUpti_ActivitySynchronization2 s;
    memset(&s, 0, sizeof s);
    s.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
    s.type = (CUpti_ActivitySynchronizationType)y->type;
    s.start = to_cupti(y->start_ns);
    s.end = to_cupti(y->end_ns);
    s.correlationId = y->correlation_id;
    s.contextId = y->context;
    s.streamId = y->stream;
    s.cudaEventId = y->event;
    append(&s, sizeof s, 0);
}

static unsigned char g_device_reported[GPUSIM_DEVICES];

static void context_records(uint32_t ctx, uint32_t device, uint16_t null_stream) {
    if (g_kinds[CUPTI_ACTIVITY_KIND_DEVICE] && device < GPUSIM_DEVICES && !g_device_reported[device]) {
        const struct gpusim_device_info *f = gpusim_device_info((int)device);
        CUpti_ActivityDevice5 d;
        memset(&d, 0, sizeof d);
        d.kind = CUPTI_ACTIVITY_KIND_DEVICE;
        d.globalMemoryBandwidth = f->memory_bandwidth / 1000; /* KB/s */
        d.globalMemorySize = f->global_memory;
        d.constantMemorySize = f->constant_memory;
        d.l2CacheSize = f->l2_cache;
        d.numThreadsPerWarp = 32;
        d.coreClockRate = f->clock_khz;
        d.numMemcpyEngines = f->copy_engines;
        d.numMultiprocessors = f->multiprocessors;
        d.maxWarpsPerMultiprocessor = f->max_warps_per_sm;
        d.maxBlocksPerMultiprocessor = f->max_blocks_per_sm;
        d.maxSharedMemoryPerMultiprocessor = f->shared_per_sm;
        d.maxRegistersPerMultiprocessor = f->regs_per_sm;
        d.maxRegistersPerBlock = f->regs_per_block;
        d.maxSharedMemoryPerBlock = f->shared_per_block;
        d.maxThreadsPerBlock = f->max_threads_per_block;
        d.maxBlockDimX = 1024, d.maxBlockDimY = 1024, d.maxBlockDimZ = 64;
        d.maxGridDimX = 0x7fffffff, d.maxGridDimY = 65535, d.maxGridDimZ = 65535;
        d.computeCapabilityMajor = (uint32_t)f->cc_major;
        d.computeCapabilityMinor = (uint32_t)f->cc_minor;
        d.id = device;
        memcpy(d.uuid.bytes, f->uuid, 16);
        d.name = f->name;
        d.isCudaVisible = 1;
        g_device_reported[device] = 1;
        append(&d, sizeof d, 0);
    }
    if (g_kinds[CUPTI_ACTIVITY_KIND_CONTEXT]) {
        CUpti_ActivityContext3 c;
        memset(&c, 0, sizeof c);
        c.kind = CUPTI_ACTIVITY_KIND_CONTEXT;
        c.contextId = ctx;
        c.deviceId = device;
        c.computeApiKind = CUPTI_ACTIVITY_COMPUTE_API_CUDA;
        c.nullStreamId = null_stream;
        c.numMultiprocessors = (uint16_t)gpusim_device_info((int)device)->multiprocessors;
        append(&c, sizeof c, 0);
    }
}

static void announce_existing(void) {
    uint32_t ids[64], devs[64];
    uint16_t streams[64];
    int n = gpusim_contexts(ids, devs, streams, 64);
    for (int i = 0; i < n; i++)
        context_records(ids[i], devs[i], streams[i]);
}

static void on_resource(uint32_t cbid, void *context, uint32_t context_id, uint32_t device,
                        void *stream, uint32_t stream_id) {
    if (cbid == CUPTI_CBID_RESOURCE_CONTEXT_CREATED)
        context_records(context_id, device, 7);
    CUpti_CallbackFunc cb = g_callback;
    if (!cb || cbid >= GPUSIM_MAX_CBID || !g_enabled[CUPTI_CB_DOMAIN_RESOURCE][cbid])
        return;
    CUpti_ResourceData r = {.context = (CUcontext)context};
    r.resourceHandle.stream = (CUstream)stream;
    cupti_lock();
    deliver(cb, CUPTI_CB_DOMAIN_RESOURCE, (CUpti_CallbackId)cbid, &r);
    cupti_unlock();
}

int resource_enabled(uint32_t cbid) {
    return g_callback && cbid < GPUSIM_MAX_CBID && g_enabled[CUPTI_CB_DOMAIN_RESOURCE][cbid];
}

void deliver_resource(uint32_t cbid, void *context, void *descriptor) {
    CUpti_CallbackFunc cb = g_callback;
    if (!cb || cbid >= GPUSIM_MAX_CBID || !g_enabled[CUPTI_CB_DOMAIN_RESOURCE][cbid])
        return;
    CUpti_ResourceData r = {.context = (CUcontext)context, .resourceDescriptor = descriptor};
    cupti_lock();
    deliver(cb, CUPTI_CB_DOMAIN_RESOURCE, (CUpti_CallbackId)cbid, &r);
    cupti_unlock();
}

static void on_graph_node(uint32_t cbid, const struct gpusim_graph_event *e) {
    CUpti_CallbackFunc cb = g_callback;
    if (!cb || cbid >= GPUSIM_MAX_CBID || !g_enabled[CUPTI_CB_DOMAIN_RESOURCE][cbid])
        return;
    CUpti_GraphData g = {
        .graph = (CUgraph)e->graph,
        .originalGraph = (CUgraph)e->original_graph,
        .node = (CUgraphNode)e->node,
        .originalNode = (CUgraphNode)e->original_node,
        .nodeType = (CUgraphNodeType)e->node_type,
        .graphExec = (CUgraphExec)e->graph_exec,
    };
    CUpti_ResourceData r = {.context = (CUcontext)e->context, .resourceDescriptor = &g};
    cupti_lock();
    deliver(cb, CUPTI_CB_DOMAIN_RESOURCE, (CUpti_CallbackId)cbid, &r);
    cupti_unlock();
}

static const struct gpusim_tool g_tool = {
    .api_enter = on_api_enter,
    .api_exit = on_api_exit,
    .op = on_op,
    .sync = on_sync,
    .resource = on_resource,
    .graph_node = on_graph_node,
};

/* A marker for tools: this libcupti simulates, so whatever it records ran on no GPU. */
GPUSIM_EXPORT const char gpusim_cupti[] = "gpusim: simulated CUPTI, no GPU";
