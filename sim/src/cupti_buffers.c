/* Simulated CUPTI, libcupti.so.13 (no GPU): the client's activity buffers,
 * requested and filled per thread, their delivery (flushes, and the worker thread
 * that delivers full buffers, as the periodic flush does) and dropped-record
 * counts. See cupti_internal.h for the other files. */
#include "cupti_internal.h"

/* ------------------------------------------------------------------ activity buffers */

struct buffer {
    uint8_t *base;
    size_t size, used, records;
    uint64_t last_end;     /* latest end (CUPTI time) of its records */
    pthread_t owner;       /* the thread whose records it takes */
    struct buffer *next;
};

static CUpti_BuffersCallbackRequestFunc g_request;
CUpti_BuffersCallbackCompleteFunc g_complete;
static pthread_mutex_t g_buf_mu = PTHREAD_MUTEX_INITIALIZER;     /* the lists below */
/* CUPTI's lock: one delivery at a time, held across the client's buffer
 * callback. Recursive, as a client may call CUPTI from a callback that runs
 * under it (GPUSIM_CUPTI_WORKER_US). */
static pthread_mutex_t g_cupti_mu = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
/* Per-thread buffers, CUDA 13's default (CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER):
 * each thread's records go to a buffer of its own, requested on that thread,
 * inside the call that made the record (a launch, say). */
static struct buffer *g_currents;
static struct buffer *g_full, **g_full_tail = &g_full;
static size_t g_max_records;
static size_t g_dropped;
static __thread int tls_delivering;

/* GPUSIM_CUPTI_WORKER_US, read once: 0 when unset. */
long worker_us(void) {
    static _Atomic long cached = -1;
    long us = atomic_load_explicit(&cached, memory_order_relaxed);
    if (us < 0) {
        us = sim_fault_number("GPUSIM_CUPTI_WORKER_US", 0);
        if (us < 0)
            us = 0;
        atomic_store(&cached, us);
    }
    return us;
}

void cupti_lock(void) {
    if (worker_us())
        pthread_mutex_lock(&g_cupti_mu);
}

void cupti_unlock(void) {
    if (worker_us())
        pthread_mutex_unlock(&g_cupti_mu);
}

/* GPUSIM_CUPTI_LOCKED_HOOK=SYMBOL (a test hook, not CUPTI behaviour): at each
 * API call's enter, after the subscriber's callback, CUPTI calls the program's
 * function SYMBOL (found with dlsym, so the program is linked -rdynamic)
 * holding its lock, the one cuptiActivityFlushAll takes, as a signal can land
 * inside CUPTI's own code while it holds that lock. */
void locked_hook(void) {
    static struct sim_hook hook = {.var = "GPUSIM_CUPTI_LOCKED_HOOK"};
    sim_hook_fn h = sim_hook(&hook);
    if (!h)
        return;
    pthread_mutex_lock(&g_cupti_mu);
    h();
    pthread_mutex_unlock(&g_cupti_mu);
}

static size_t record_size(uint32_t kind) {
    switch (kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: return sizeof(CUpti_ActivityKernel10);
    case CUPTI_ACTIVITY_KIND_MEMCPY: return sizeof(CUpti_ActivityMemcpy6);
    case CUPTI_ACTIVITY_KIND_MEMCPY2: return sizeof(CUpti_ActivityMemcpyPtoP4);
    case CUPTI_ACTIVITY_KIND_MEMSET: return sizeof(CUpti_ActivityMemset4);
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: return sizeof(CUpti_ActivitySynchronization2);
    case CUPTI_ACTIVITY_KIND_DEVICE: return sizeof(CUpti_ActivityDevice5);
    case CUPTI_ACTIVITY_KIND_CONTEXT: return sizeof(CUpti_ActivityContext3);
    case CUPTI_ACTIVITY_KIND_DRIVER:
    case CUPTI_ACTIVITY_KIND_RUNTIME: return sizeof(CUpti_ActivityAPI);
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: return sizeof(CUpti_ActivityExternalCorrelation);
    default: return 0;
    }
}

static void queue_full(struct buffer *b) {
    b->next = NULL;
    *g_full_tail = b;
    g_full_tail = &b->next;
}

static pthread_cond_t g_worker_cv;
static void start_worker(void);

/* Appends one record; its end (CUPTI time) says when it is complete. Records
 * that find no buffer space are counted as dropped. */
void append(const void *rec, size_t size, uint64_t end) {
    pthread_mutex_lock(&g_buf_mu);
    pthread_t self = pthread_self();
    struct buffer **slot = &g_currents;
    while (*slot && !pthread_equal((*slot)->owner, self))
        slot = &(*slot)->next;
    struct buffer *b = *slot;
    if (b && (b->used + size > b->size || (g_max_records && b->records >= g_max_records))) {
        *slot = b->next;
        if (b->records) {
            queue_full(b);
            pthread_cond_signal(&g_worker_cv);
        } else {
            free(b); /* too small for any record: never handed back, as CUPTI does */
        }
        b = NULL;
    }
    if (!b) {
        uint8_t *base = NULL;
        size_t sz = 0, max = 0;
        if (g_request)
            g_request(&base, &sz, &max);
        /* Simulated hazard, not documented behaviour: CUPTI before API 27
         * could crash on a null buffer (Kineto works around it since commit
         * baea3804); with GPUSIM_CUPTI_VERSION below 27 the simulation does. */
        if (!base && g_request && sim_fault_number("GPUSIM_CUPTI_VERSION", CUPTI_API_VERSION) < 27)
            abort();
        if (!base || sz < size || !(b = calloc(1, sizeof *b))) {
            g_dropped++;
            pthread_mutex_unlock(&g_buf_mu);
            return;
        }
        b->base = base;
        b->size = sz;
        b->owner = self;
        g_max_records = max;
        b->next = g_currents;
        g_currents = b;
    }
    memcpy(b->base + b->used, rec, size);
    b->used += size;
    b->records++;
    if (end > b->last_end)
        b->last_end = end;
    pthread_mutex_unlock(&g_buf_mu);
}

/* Hands `b` to the client. A forced flush hands back records still in flight:
 * their unknown timestamps are 0 (CUPTI_TIMESTAMP_UNKNOWN). */
static void deliver(struct buffer *b, uint64_t now) {
    for (size_t off = 0; off < b->used;) {
        CUpti_Activity *r = (CUpti_Activity *)(b->base + off);
        uint64_t *start = NULL, *end = NULL, *completed = NULL;
        switch (r->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
            CUpti_ActivityKernel10 *k = (CUpti_ActivityKernel10 *)r;
            start = &k->start, end = &k->end, completed = &k->completed;
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY:
            start = &((CUpti_ActivityMemcpy6 *)r)->start, end = &((CUpti_ActivityMemcpy6 *)r)->end;
            break;
        case CUPTI_ACTIVITY_KIND_MEMCPY2:
            start = &((CUpti_ActivityMemcpyPtoP4 *)r)->start, end = &((CUpti_ActivityMemcpyPtoP4 *)r)->end;
            break;
        case CUPTI_ACTIVITY_KIND_MEMSET:
            start = &((CUpti_ActivityMemset4 *)r)->start, end = &((CUpti_ActivityMemset4 *)r)->end;
            break;
        default: break;
        }
        if (end && *end > now) {
            *end = 0;
            if (completed)
                *completed = 0;
            if (*start > now)
                *start = 0;
        }
        size_t n = record_size(r->kind);
        if (n == 0)
            break; /* a simulated corrupt record (GPUSIM_CUPTI_INVALID_RECORD) ends the walk */
        off += n;
    }
    tls_delivering = 1;
    g_complete(NULL, 0, b->base, b->size, b->used);
    tls_delivering = 0;
    free(b);
}

/* Delivers the full buffers that are complete (and, with `partial`, the current
 * one too); `forced` delivers them all. CUPTI's worker (`worker`) delivers
 * holding CUPTI's lock; so do flushes, one delivery at a time, unless
 * GPUSIM_CUPTI_WORKER_US is set: then a flush hands its buffers over on the
 * caller's thread once the lock is released, while the worker may be
 * delivering too. */
static void flush_buffers(int forced, int partial, int worker) {
    pthread_mutex_lock(&g_cupti_mu);
    pthread_mutex_lock(&g_buf_mu);
    uint64_t now = to_cupti(gpusim_now_ns());
    struct buffer *ready = NULL, **tail = &ready;
    for (struct buffer **p = &g_full; *p;) {
        struct buffer *b = *p;
        if (forced || b->last_end <= now) {
            *p = b->next;
            b->next = NULL;
            *tail = b;
            tail = &b->next;
        } else {
            p = &b->next;
        }
    }
    g_full_tail = &g_full;
    while (*g_full_tail)
        g_full_tail = &(*g_full_tail)->next;
    for (struct buffer **p = &g_currents; partial && *p;) {
        struct buffer *b = *p;
        if (b->records && (forced || b->last_end <= now)) {
            *p = b->next;
            b->next = NULL;
            *tail = b;
            tail = &b->next;
        } else {
            p = &b->next;
        }
    }
    pthread_mutex_unlock(&g_buf_mu);
    int outside = !worker && worker_us();
    if (outside)
        pthread_mutex_unlock(&g_cupti_mu);
    while (ready) {
        struct buffer *next = ready->next;
        deliver(ready, now);
        ready = next;
    }
    if (!outside)
        pthread_mutex_unlock(&g_cupti_mu);
}

void flush(int forced, int partial) { flush_buffers(forced, partial, 0); }

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc request,
                                                                  CUpti_BuffersCallbackCompleteFunc complete) {
    if (!request || !complete)
        return fail(CUPTI_ERROR_INVALID_PARAMETER);
    pthread_mutex_lock(&g_buf_mu);
    g_request = request;
    g_complete = complete;
    pthread_mutex_unlock(&g_buf_mu);
    start_worker();
    return CUPTI_SUCCESS;
}

/* GPUSIM_CUPTI_FORCED_FLUSH_HOOK=SYMBOL (a test hook, not CUPTI behaviour):
 * the first forced flush, before it takes any lock or hands back any buffer,
 * calls the program's function SYMBOL (found with dlsym, so the program is
 * linked -rdynamic) on the flushing thread. A client flushes with
 * FLUSH_FORCED on its exit path: the hook lets a test act at that point,
 * deterministically (other threads' calls made while the exit path runs). */
static void forced_flush_hook(void) {
    static struct sim_hook hook = {.var = "GPUSIM_CUPTI_FORCED_FLUSH_HOOK"};
    static atomic_int called;
    sim_hook_fn h = sim_hook(&hook);
    if (h && !atomic_exchange(&called, 1))
        h();
}

/* Simulated hazard (GPUSIM_CUPTI_FLUSH_HANG_S=N, and
 * GPUSIM_CUPTI_FORCED_FLUSH_HANG_S=N for forced flushes): each such flush a
 * client makes (not CUPTI's worker) stays inside CUPTI for N seconds, holding
 * CUPTI's lock, before it hands anything back, as a flush does in a driver
 * that stopped answering. gpusim_cupti_flush_hanging() tells a test program
 * that one has begun. */
static atomic_int g_flush_hanging;

GPUSIM_EXPORT int gpusim_cupti_flush_hanging(void) { return atomic_load(&g_flush_hanging); }

static void flush_hang(const char *var) {
    long s = sim_fault_number(var, 0);
    if (s <= 0)
        return;
    pthread_mutex_lock(&g_cupti_mu);
    atomic_store(&g_flush_hanging, 1);
    struct timespec t = {.tv_sec = s};
    while (nanosleep(&t, &t) != 0)
        ;
    atomic_store(&g_flush_hanging, 0);
    pthread_mutex_unlock(&g_cupti_mu);
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiActivityFlushAll(uint32_t flag) {
    if (!g_complete)
        return fail(CUPTI_ERROR_INVALID_OPERATION);
    if (tls_delivering)
        return fail(CUPTI_ERROR_INVALID_OPERATION);
    if (gpusim_torn_down()) {
        /* Simulated hazard, not documented behaviour: CUPTI says nothing of a
         * flush once the runtime's exit teardown destroyed every context, and
         * CUPTI tools have hung in that flush on real drivers. The simulation
         * hangs too (for a minute, then fails), so that a tool that still
         * flushes there is caught by a test's time limit. */
        struct timespec t = {.tv_sec = 60};
        while (nanosleep(&t, &t) != 0)
            ;
        return fail(CUPTI_ERROR_UNKNOWN);
    }
    if (flag & CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) {
        CUptiResult refused = sim_fault_result("GPUSIM_CUPTI_FORCED_FLUSH_ERROR");
        if (refused != CUPTI_SUCCESS)
            return fail(refused);
        forced_flush_hook();
        flush_hang("GPUSIM_CUPTI_FORCED_FLUSH_HANG_S");
    } else {
        flush_hang("GPUSIM_CUPTI_FLUSH_HANG_S");
    }
    sim_event((flag & CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) ? "F1" : "F0");
    flush((flag & CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) != 0, 1);
    return CUPTI_SUCCESS;
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiActivityFlush(CUcontext context, uint32_t streamId, uint32_t flag) {
    return cuptiActivityFlushAll(flag);
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid,
                                                              CUpti_Activity **record) {
    if (!buffer || !record)
        return fail(CUPTI_ERROR_INVALID_PARAMETER);
    uint8_t *next = *record ? (uint8_t *)*record + record_size((*record)->kind) : buffer;
    if (next < buffer || next + sizeof(uint32_t) > buffer + valid)
        return CUPTI_ERROR_MAX_LIMIT_REACHED;
    size_t size = record_size(((CUpti_Activity *)next)->kind);
    if (size == 0 || next + size > buffer + valid)
        return fail(CUPTI_ERROR_INVALID_KIND);
    *record = (CUpti_Activity *)next;
    return CUPTI_SUCCESS;
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiActivityGetNumDroppedRecords(CUcontext context, uint32_t streamId,
                                                                     size_t *dropped) {
    if (!dropped)
        return fail(CUPTI_ERROR_INVALID_PARAMETER);
    *dropped = 0;
    if (context)
        return CUPTI_SUCCESS; /* every record goes to the global buffers */
    cupti_lock();
    pthread_mutex_lock(&g_buf_mu);
    static int faked;
    if (!faked) {
        faked = 1;
        g_dropped += (size_t)sim_fault_number("GPUSIM_CUPTI_DROPPED", 0); /* simulated */
    }
    *dropped = g_dropped;
    g_dropped = 0;
    pthread_mutex_unlock(&g_buf_mu);
    cupti_unlock();
    return CUPTI_SUCCESS;
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiActivityGetAttribute(CUpti_ActivityAttribute attr, size_t *size,
                                                             void *value) {
    if (!size || !value)
        return fail(CUPTI_ERROR_INVALID_PARAMETER);
    if (*size >= sizeof(size_t))
        *(size_t *)value = 0;
    return CUPTI_SUCCESS;
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiActivitySetAttribute(CUpti_ActivityAttribute attr, size_t *size,
                                                             void *value) {
    if (!size || !value)
        return fail(CUPTI_ERROR_INVALID_PARAMETER);
    return CUPTI_SUCCESS; /* device-side buffer sizes mean nothing here */
}

/* Simulated hazard (GPUSIM_CUPTI_LATE_BUFFER=1): at process exit, once every
 * atexit handler has run (the client's final flush among them), the worker hands
 * back one more buffer holding one complete kernel record, as a worker racing
 * the exit can. Runs as libcupti's destructor. */
__attribute__((destructor)) static void late_buffer(void) {
    if (sim_fault_number("GPUSIM_CUPTI_LATE_BUFFER", 0) != 1 || !g_request || !g_complete)
        return;
    uint8_t *base = NULL;
    size_t size = 0, max = 0;
    g_request(&base, &size, &max);
    if (!base || size < sizeof(CUpti_ActivityKernel10))
        return;
    CUpti_ActivityKernel10 k;
    memset(&k, 0, sizeof k);
    k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k.start = to_cupti(gpusim_now_ns());
    k.end = k.completed = k.start + 1000;
    k.correlationId = 0x7fffffff;
    k.name = "_Z4latev";
    k.gridX = k.gridY = k.gridZ = k.blockX = k.blockY = k.blockZ = 1;
    memcpy(base, &k, sizeof k);
    g_complete(NULL, 0, base, size, sizeof k);
}

/* ------------------------------------------------------------------ worker thread */

static uint32_t g_period_ms;
static int g_worker_started;
static pthread_mutex_t g_worker_mu = PTHREAD_MUTEX_INITIALIZER;

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiActivityFlushPeriod(uint32_t ms) {
    g_period_ms = ms;
    pthread_cond_signal(&g_worker_cv);
    return CUPTI_SUCCESS;
}

/* CUPTI's worker: delivers full buffers once their records are complete (the
 * periodic flush never returns a partial or incomplete buffer). It wakes when a
 * buffer fills, when the earliest full one completes, and every flush period
 * (100 ms when none is set). With GPUSIM_CUPTI_WORKER_US=N it wakes every N µs
 * and hands back partly filled buffers too. */
static void *worker(void *arg) {
    pthread_mutex_lock(&g_worker_mu);
    for (;;) {
        uint64_t now = gpusim_now_ns();
        uint64_t period = worker_us() ? (uint64_t)worker_us() * 1000ull
                                      : (g_period_ms ? g_period_ms : 100) * 1000000ull;
        uint64_t wake = now + period;
        pthread_mutex_lock(&g_buf_mu);
        int64_t off = offset();
        for (struct buffer *b = g_full; b; b = b->next) {
            uint64_t done = (uint64_t)((int64_t)b->last_end - off);
            if (done < wake)
                wake = done > now ? done : now;
        }
        int ready = g_full && g_full->last_end <= to_cupti(now);
        pthread_mutex_unlock(&g_buf_mu);
        if (!ready) {
            struct timespec ts = {(time_t)(wake / 1000000000ull), (long)(wake % 1000000000ull)};
            pthread_cond_timedwait(&g_worker_cv, &g_worker_mu, &ts);
        }
        pthread_mutex_unlock(&g_worker_mu);
        if (g_complete)
            flush_buffers(0, worker_us() != 0, 1);
        pthread_mutex_lock(&g_worker_mu);
    }
    return arg;
}

static void before_fork(void) {
    pthread_mutex_lock(&g_cupti_mu);
    pthread_mutex_lock(&g_buf_mu);
}

static void after_fork_parent(void) {
    pthread_mutex_unlock(&g_buf_mu);
    pthread_mutex_unlock(&g_cupti_mu);
}

static void after_fork_child(void) {
    pthread_mutex_unlock(&g_buf_mu);
    pthread_mutex_unlock(&g_cupti_mu);
    g_worker_started = 0; /* the worker did not survive the fork */
}

static void start_worker(void) {
    pthread_mutex_lock(&g_mu);
    if (!g_worker_started) {
        static int once;
        if (!once) {
            pthread_condattr_t a;
            pthread_condattr_init(&a);
            pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
            pthread_cond_init(&g_worker_cv, &a);
            pthread_atfork(before_fork, after_fork_parent, after_fork_child);
            once = 1;
        }
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &attr, worker, NULL) == 0) {
            pthread_setname_np(t, "cupti-sim");
            g_worker_started = 1;
        }
        pthread_attr_destroy(&attr);
    }
    pthread_mutex_unlock(&g_mu);
}
