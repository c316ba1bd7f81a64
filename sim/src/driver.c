/* Simulated CUDA driver, libcuda.so.1 (no GPU): kernels never run, "device" memory is zeroed host memory, and GPU work only gets simulated start and end times.
 *
 * What it does: the driver API with NVIDIA's signatures (cuda.h) for what the
 * runtime, cudarc and small C programs use: 2 devices, primary and created
 * contexts, streams with CUDA's ordering rules, events, memory, copies that really
 * copy, memsets that really set, modules (PTX entries are parsed for their names),
 * launches, stream capture into graphs, graphs built from kernel nodes (each node
 * reported to the tool as it is made, and again as instantiation copies it) and
 * graph launches. The first call that needs the driver does what cuInit does: it
 * loads CUDA_INJECTION64_PATH and calls its InitializeInjection. Every call is
 * reported to the attached tool (libcupti), on the calling thread, from inside
 * the call.
 *
 * Also: bounded device memory (16 GiB per device, lazily backed), the virtual
 * memory API, pointer attributes, occupancy, host functions and stream callbacks
 * in stream order, user objects, capture across event-joined streams, driver
 * entry points by name, libraries, memory pools, and the device clock that
 * makes event times deterministic (sim/README.md#clocks).
 *
 * What it does not do: run kernels, model SM occupancy, copy-engine contention or
 * caches, arrays/textures/IPC, graph dependencies other than node order; it
 * prints nothing. The cost model is written down once, in sim/README.md, and
 * implemented once, in the "Cost model" section below. */
#define _GNU_SOURCE
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>
#include <cupti_activity.h>
#include <cupti_callbacks.h>
#include <cupti_driver_cbid.h>
/* The parameter structs of CUPTI callbacks. Its structs for the legacy 32-bit
 * entry points name types that cuda.h only declares for NVIDIA's own build; they
 * are only pointed to, so incomplete types do. */
typedef unsigned int CUdeviceptr_v1;
typedef struct CUDA_MEMCPY2D_v1_st CUDA_MEMCPY2D_v1;
typedef struct CUDA_MEMCPY3D_v1_st CUDA_MEMCPY3D_v1;
typedef struct CUDA_ARRAY_DESCRIPTOR_v1_st CUDA_ARRAY_DESCRIPTOR_v1;
typedef struct CUDA_ARRAY3D_DESCRIPTOR_v1_st CUDA_ARRAY3D_DESCRIPTOR_v1;
#include <generated_cuda_meta.h>
/* Functions without parameters have no struct there. */
typedef struct { int none; } cuCtxSynchronize_params;

#include "gpusim.h"
#include "nvdev.h"

#define XSTR(x) STR_(x)
#define STR_(x) #x
#define CAT(a, b) CAT_(a, b)
#define CAT_(a, b) a##b

/* ------------------------------------------------------------------ clock */

GPUSIM_EXPORT uint64_t gpusim_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
#define now_ns gpusim_now_ns

/* Blocks the calling thread until CLOCK_MONOTONIC reaches `t`: a wait for the
 * simulated GPU takes as long on the wall clock as the work it waits for. */
static void sleep_until(uint64_t t) {
    struct timespec ts = {(time_t)(t / 1000000000ull), (long)(t % 1000000000ull)};
    while (now_ns() < t) {
        if (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0 && errno != EINTR)
            break;
    }
}

/* ------------------------------------------------------------------ cost model
 * The only place durations are decided; sim/README.md#cost-model documents it.
 * All durations are multiplied by GPUSIM_TIME_SCALE (default 1). */
#define LAUNCH_LATENCY_NS 2000u  /* API call to earliest GPU start */
#define KERNEL_BASE_NS 1000u     /* an empty kernel */
#define THREADS_PER_NS 256u      /* grid x block threads retired per ns */
#define COPY_BASE_NS 1000u
#define MEMSET_BASE_NS 500u
#define QUEUE_DEPTH 1024u        /* pending operations per stream before a call blocks */

static double g_scale = 1.0;

static uint64_t scaled(uint64_t ns) { return g_scale == 1.0 ? ns : (uint64_t)((double)ns * g_scale); }

static uint64_t kernel_cost(uint64_t threads) {
    return scaled(KERNEL_BASE_NS + (threads + THREADS_PER_NS - 1) / THREADS_PER_NS);
}

/* Bytes per ns (= GB/s) by copy kind and host memory kind. */
static uint64_t copy_cost(uint8_t copy_kind, uint8_t host_kind, uint64_t bytes) {
    uint64_t bw;
    switch (copy_kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: bw = 1000; break;
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: bw = 50; break;
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: bw = 10; break;
    default: bw = host_kind == CUPTI_ACTIVITY_MEMORY_KIND_PINNED ? 25 : 10; break;
    }
    return scaled(COPY_BASE_NS + (bytes + bw - 1) / bw);
}

static uint64_t memset_cost(uint64_t bytes) { return scaled(MEMSET_BASE_NS + (bytes + 1999) / 2000); }

/* Math-library kernels (the cuBLAS and cuBLASLt stand-ins) are costed from the
 * work they do: the longer of FLOPs at the datatype's rate and bytes moved at
 * the memory's, after a fixed start. FLOPs per ns: 60000 for 32- and 64-bit
 * types (60 TFLOP/s), 500000 for 16- and 8-bit types on tensor cores. */
#define MATH_BASE_NS 2000u
#define MATH_FLOPS_PER_NS 60000.0
#define MATH_FLOPS_PER_NS_TENSOR 500000.0
#define MATH_BYTES_PER_NS 3000.0

GPUSIM_EXPORT uint64_t gpusim_math_cost(double flops, double bytes, int tensor_cores) {
    double f = flops / (tensor_cores ? MATH_FLOPS_PER_NS_TENSOR : MATH_FLOPS_PER_NS);
    double b = bytes / MATH_BYTES_PER_NS;
    double t = f > b ? f : b;
    if (t > 1e15)
        t = 1e15;
    return MATH_BASE_NS + (uint64_t)t;
}

/* A cost for the next kernel this thread launches, set by the math libraries
 * just before they launch (0: cost from the launch configuration). */
static __thread uint64_t tls_next_cost;

GPUSIM_EXPORT void gpusim_set_next_kernel_cost(uint64_t ns) { tls_next_cost = ns; }

/* ------------------------------------------------------------------ state */

/* Memory of each simulated device (sim/README.md). */
#define DEVICE_MEMORY (16ull << 30)

#define MAGIC_CTX 0x63747831u
#define MAGIC_STREAM 0x7374726du
#define MAGIC_EVENT 0x65766e74u
#define MAGIC_MODULE 0x6d6f646cu
#define MAGIC_GRAPH 0x67726170u
#define MAGIC_EXEC 0x67657865u
#define MAGIC_NODE 0x6e6f6465u
#define MAGIC_KERNEL 0x6b65726e6c73696dull

struct device;
struct stream;

struct ctx {
    uint32_t magic, id;
    struct device *dev;
    struct stream *legacy;
    unsigned flags;
    int primary, live;
    struct ctx *next;
};

struct stream {
    uint32_t magic, id;
    struct ctx *ctx;
    unsigned flags;
    int priority, legacy;
    uint64_t tail;                 /* simulated end of the last operation (host clock) */
    uint64_t vtail;                /* the same on the device clock */
    uint64_t ring[QUEUE_DEPTH];    /* ends of the pending operations */
    unsigned ring_head, ring_len;
    struct graph *capture;         /* the graph this stream captures into, if any */
    int capture_origin;            /* began the capture (others joined it by an event) */
    struct stream *next;           /* the device's streams */
};

struct device {
    struct gpusim_device_info info;
    char name[64];
    pthread_mutex_t mu;            /* streams and their times */
    struct stream *streams;
    struct ctx primary;
    int primary_refs;
    unsigned primary_flags;
    int runtime_retained;
    int64_t grid_ids;
    uint64_t allocated;
};

struct kernel {
    uint64_t magic;
    const char *name;
    const void *host_fun;
    void *module;
    uint32_t id;
    int max_dynamic_shared;
};

struct event {
    uint32_t magic, id;
    unsigned flags;
    int recorded;
    uint64_t time;                 /* completion on the host clock */
    uint64_t vtime;                /* completion on the device clock */
    struct ctx *ctx;
    uint64_t capture_id;           /* recorded in a capturing stream: waiting on it joins */
};

struct module {
    uint32_t magic;
    int any_name;                  /* not PTX: every name resolves */
    struct kernel **kernels;
    int nkernels;
    struct ctx *ctx;
};

enum { NODE_KERNEL = 1, NODE_COPY, NODE_MEMSET, NODE_HOST, NODE_MEM_ALLOC, NODE_MEM_FREE };

/* A graph node: its handle (CUgraphNode) is its address, stable for the life of
 * its graph; `id` is what cuptiGetGraphNodeId returns and GPU records carry. */
struct node {
    uint32_t magic;
    uint64_t id;
    int kind;
    struct kernel *k;
    uint32_t grid[3], block[3], shared;
    uint8_t launch_type;
    void *dst;
    const void *src;
    size_t bytes;
    uint8_t copy_kind, src_kind, dst_kind;
    uint32_t value, elem;
    CUhostFn host_fn;
    void *host_data;
    uint64_t cost;                 /* kernels: ns before scaling, 0 for the launch configuration's */
    struct graph *graph;           /* the graph that holds it */
};

struct user_object;

struct graph {
    uint32_t magic, id;
    struct node **nodes;
    size_t n, cap;
    uint64_t capture_id;           /* while captured into: the capture's id */
    struct user_object *owned[16]; /* user objects it holds references to */
    unsigned owned_refs[16];
};

/* An instantiated graph holds its own copy of the graph, with the exec's id: the
 * graph that GPU records of its launches name (graph and exec ids share one
 * counter, so they never collide). */
struct graph_exec {
    uint32_t magic, id;
    struct graph graph;
};

static struct device g_dev[GPUSIM_DEVICES];
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER; /* contexts, modules, graphs */
static struct ctx *g_ctxs;
static _Atomic uint32_t g_next_ctx = 1, g_next_stream = 13, g_next_event = 1, g_next_graph = 1;
static _Atomic uint64_t g_next_node = 1;
static _Atomic uint32_t g_next_corr = 1;
static const struct gpusim_tool *_Atomic g_tool;

static __thread struct ctx *tls_ctx;
static __thread struct ctx *tls_ctx_stack[16];
static __thread int tls_ctx_depth;
static __thread uint32_t tls_runtime_corr;
static __thread struct stream *tls_ptds[GPUSIM_DEVICES];

/* ------------------------------------------------------------------ init */

static _Atomic int g_init_state; /* 0 no, 1 running, 2 done */
static __thread int tls_initializing;
static pthread_mutex_t g_init_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_init_cv = PTHREAD_COND_INITIALIZER;

static void setup_devices(void) {
    for (int i = 0; i < GPUSIM_DEVICES; i++) {
        struct device *d = &g_dev[i];
        snprintf(d->name, sizeof d->name, "Simulated GPU %d (gpusim, not a real GPU)", i);
        struct gpusim_device_info *f = &d->info;
        f->ordinal = (uint32_t)i;
        f->name = d->name;
        f->cc_major = 9;
        f->cc_minor = 0;
        f->global_memory = DEVICE_MEMORY;
        f->multiprocessors = 132;
        f->l2_cache = 50u << 20;
        f->shared_per_block = 48u << 10;
        f->shared_per_sm = 228u << 10;
        f->regs_per_block = 65536;
        f->regs_per_sm = 65536;
        f->max_threads_per_block = 1024;
        f->max_blocks_per_sm = 32;
        f->max_warps_per_sm = 64;
        f->clock_khz = 1980000;
        f->copy_engines = 3;
        f->constant_memory = 65536;
        f->memory_bandwidth = 3350ull * 1000 * 1000 * 1000;
        memcpy(f->uuid, "gpusim-device-0", 16);
        f->uuid[14] = (unsigned char)('0' + i);
        pthread_mutex_init(&d->mu, NULL);
    }
}

static void load_injection(void) {
    const char *p = getenv("CUDA_INJECTION64_PATH");
    if (!p || !*p)
        return;
    /* As the driver does: a library that cannot be loaded is ignored. */
    void *h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return;
    int (*init)(void) = (int (*)(void))dlsym(h, "InitializeInjection");
    if (init)
        init();
}

GPUSIM_EXPORT int gpusim_initialized(void) { return atomic_load(&g_init_state) == 2 || tls_initializing; }

GPUSIM_EXPORT int gpusim_init(void) {
    if (atomic_load_explicit(&g_init_state, memory_order_acquire) == 2 || tls_initializing)
        return 0;
    pthread_mutex_lock(&g_init_mu);
    while (atomic_load(&g_init_state) == 1)
        pthread_cond_wait(&g_init_cv, &g_init_mu);
    if (atomic_load(&g_init_state) == 2) {
        pthread_mutex_unlock(&g_init_mu);
        return 0;
    }
    atomic_store(&g_init_state, 1);
    pthread_mutex_unlock(&g_init_mu);
    const char *s = getenv("GPUSIM_TIME_SCALE");
    if (s && *s) {
        char *end;
        double v = strtod(s, &end);
        if (*end == 0 && v >= 0 && v <= 1000)
            g_scale = v;
    }
    tls_initializing = 1;
    load_injection();
    tls_initializing = 0;
    pthread_mutex_lock(&g_init_mu);
    atomic_store_explicit(&g_init_state, 2, memory_order_release);
    pthread_cond_broadcast(&g_init_cv);
    pthread_mutex_unlock(&g_init_mu);
    return 0;
}

__attribute__((constructor)) static void on_load(void) { setup_devices(); }

/* ------------------------------------------------------------------ tool */

GPUSIM_EXPORT int gpusim_attach_tool(const struct gpusim_tool *tool) {
    const struct gpusim_tool *none = NULL;
    if (atomic_load(&g_tool) == tool)
        return 0;
    return atomic_compare_exchange_strong(&g_tool, &none, tool) ? 0 : -1;
}

GPUSIM_EXPORT void gpusim_detach_tool(const struct gpusim_tool *tool) {
    const struct gpusim_tool *t = tool;
    atomic_compare_exchange_strong(&g_tool, &t, NULL);
}

GPUSIM_EXPORT const struct gpusim_device_info *gpusim_device_info(int ordinal) {
    return ordinal >= 0 && ordinal < GPUSIM_DEVICES ? &g_dev[ordinal].info : NULL;
}

GPUSIM_EXPORT int gpusim_contexts(uint32_t *ids, uint32_t *devices, uint16_t *null_streams, int max) {
    int n = 0;
    pthread_mutex_lock(&g_mu);
    for (struct ctx *c = g_ctxs; c && n < max; c = c->next) {
        if (!c->live)
            continue;
        ids[n] = c->id;
        devices[n] = c->dev->info.ordinal;
        null_streams[n] = (uint16_t)c->legacy->id;
        n++;
    }
    pthread_mutex_unlock(&g_mu);
    return n;
}

/* In driver_dispatch.c, which has no unwind tables and no frame pointer. */
void gpusim_dispatch_api(void (*hook)(struct gpusim_api *), struct gpusim_api *c);

/* Correlation ids: every API call gets its own, the driver calls a runtime call
 * makes included, as CUPTI documents (CUpti_CallbackData::correlationId; the
 * correlationId and runtimeCorrelationId of CUpti_ActivityMemcpy6). The GPU work
 * is reported with the id of the call that issued it and the id of the runtime
 * call around that one; libcupti chooses which a record carries. */
GPUSIM_EXPORT void gpusim_api_begin(struct gpusim_api *c, int domain, uint32_t cbid,
                                    const char *name, const void *params, void *ret,
                                    const char *symbol) {
    const struct gpusim_tool *t = atomic_load_explicit(&g_tool, memory_order_acquire);
    c->domain = domain;
    c->cbid = cbid;
    c->name = name;
    c->params = params;
    c->ret = ret;
    c->symbol = symbol;
    c->outer = tls_runtime_corr;
    c->traced = 0;
    c->correlation_data = 0;
    c->context = tls_ctx;
    c->context_id = tls_ctx ? tls_ctx->id : 0;
    if (!t) {
        c->correlation_id = 0;
        if (domain == GPUSIM_DOMAIN_RUNTIME)
            tls_runtime_corr = 0;
        if (domain == GPUSIM_DOMAIN_DRIVER)
            nvdev_call(name);
        return;
    }
    c->correlation_id = atomic_fetch_add_explicit(&g_next_corr, 1, memory_order_relaxed);
    if (domain == GPUSIM_DOMAIN_RUNTIME)
        tls_runtime_corr = c->correlation_id;
    /* Timestamped by the tool only for an API activity record (CUPTI's callback
       data carries no time). */
    c->start_ns = 0;
    c->traced = 1;
    gpusim_dispatch_api(t->api_enter, c);
    /* Simulated ioctls inside the call, after its start (nvdev.h). */
    if (domain == GPUSIM_DOMAIN_DRIVER)
        nvdev_call(name);
}

GPUSIM_EXPORT void gpusim_api_end(struct gpusim_api *c) {
    if (c->domain == GPUSIM_DOMAIN_RUNTIME)
        tls_runtime_corr = c->outer;
    if (!c->traced)
        return;
    const struct gpusim_tool *t = atomic_load_explicit(&g_tool, memory_order_acquire);
    if (t) {
        /* The context may have changed during the call (cuCtxSetCurrent). */
        c->context = tls_ctx;
        c->context_id = tls_ctx ? tls_ctx->id : 0;
        gpusim_dispatch_api(t->api_exit, c);
    }
}

static void report_op(struct gpusim_op *op, const struct gpusim_api *call) {
    const struct gpusim_tool *t = atomic_load_explicit(&g_tool, memory_order_acquire);
    if (!t)
        return;
    op->correlation_id = call->correlation_id;
    op->runtime_correlation_id = call->outer;
    t->op(op);
}

static void report_sync(uint32_t type, uint64_t start, const struct gpusim_api *call,
                        struct ctx *c, struct stream *s, struct event *e) {
    const struct gpusim_tool *t = atomic_load_explicit(&g_tool, memory_order_acquire);
    if (!t)
        return;
    struct gpusim_sync y = {
        .type = type,
        .start_ns = start,
        .end_ns = now_ns(),
        .correlation_id = call->correlation_id,
        .context = c ? c->id : 0,
        .stream = s ? s->id : UINT32_MAX,
        .event = e ? e->id : UINT32_MAX,
    };
    t->sync(&y);
}

static void report_resource(uint32_t cbid, struct ctx *c, struct stream *s) {
    const struct gpusim_tool *t = atomic_load_explicit(&g_tool, memory_order_acquire);
    if (t)
        t->resource(cbid, c, c->id, c->dev->info.ordinal, s, s ? s->id : 0);
}

/* ------------------------------------------------------------------ API macros */

#define DCBID(name) CAT(CUPTI_DRIVER_TRACE_CBID_, name)
#define DPARAMS(name) CAT(name, _params)

/* Defines the public driver function `name` (after cuda.h's renaming, e.g.
 * cuMemAlloc -> cuMemAlloc_v2), and `gpusim_<that name>`, the same implementation for
 * libcudart: a probe on the public symbol fires only for the program's own calls. */
#define DRV(name, decl, args)                                                          \
    static CUresult impl_##name decl __attribute__((noinline));                        \
    GPUSIM_EXPORT CUresult CUDAAPI name decl { return impl_##name args; }              \
    GPUSIM_EXPORT extern __typeof__(impl_##name) CAT(gpusim_, name)                    \
        __attribute__((alias("impl_" #name)));                                         \
    static CUresult impl_##name decl

#define ENTER_SYM(name, sym, ...)                                                      \
    if (!gpusim_initialized())                                                         \
        return CUDA_ERROR_NOT_INITIALIZED;                                             \
    CUresult ret_ = CUDA_SUCCESS;                                                      \
    DPARAMS(name) params_ = {__VA_ARGS__};                                             \
    struct gpusim_api call_;                                                           \
    gpusim_api_begin(&call_, GPUSIM_DOMAIN_DRIVER, DCBID(name), XSTR(name), &params_,  \
                     &ret_, sym)
#define ENTER(name, ...) ENTER_SYM(name, NULL, __VA_ARGS__)
#define RETURN(r)                                                                      \
    do {                                                                               \
        ret_ = (r);                                                                    \
        gpusim_api_end(&call_);                                                        \
        return ret_;                                                                   \
    } while (0)

/* ------------------------------------------------------------------ contexts */

static struct stream *new_stream(struct ctx *c, unsigned flags, int priority, int legacy);

static void ctx_activate(struct ctx *c) {
    /* Called with g_mu held. */
    if (c->live)
        return;
    c->magic = MAGIC_CTX;
    c->id = atomic_fetch_add(&g_next_ctx, 1);
    c->live = 1;
    c->legacy = new_stream(c, 0, 0, 1);
    c->next = g_ctxs;
    g_ctxs = c;
}

static struct ctx *as_ctx(CUcontext h) {
    struct ctx *c = (struct ctx *)h;
    return c && c->magic == MAGIC_CTX && c->live ? c : NULL;
}

static struct ctx *current_ctx(void) {
    struct ctx *c = tls_ctx;
    return c && c->live ? c : NULL;
}

/* ------------------------------------------------------------------ memory */

/* Device, pinned and managed memory are anonymous mappings made with
 * MAP_NORESERVE: their pages take host memory only once written (copies and
 * memsets write them; kernels never run), so no program on the simulation can
 * take the host down, however much it allocates. Each device has a fixed size
 * (DEVICE_MEMORY), and an allocation beyond what is free fails as on a GPU. */

enum { BACKING_NONE, BACKING_MMAP, BACKING_VMM };

struct alloc {
    uintptr_t base;
    size_t size;
    uint8_t kind; /* CUPTI_ACTIVITY_MEMORY_KIND_* */
    uint8_t backing; /* BACKING_*: NONE for registered host memory */
    uint32_t device;
    void *handle;    /* BACKING_VMM: the physical allocation mapped here */
};

static pthread_mutex_t g_mem_mu = PTHREAD_MUTEX_INITIALIZER;
static struct alloc *g_allocs;
static size_t g_nallocs, g_cap_allocs;

static size_t alloc_index(uintptr_t p) {
    size_t lo = 0, hi = g_nallocs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (g_allocs[mid].base <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo; /* first entry with base > p */
}

/* Device memory that an allocation of `a` takes from its device's total. */
static size_t counted(const struct alloc *a) {
    return a->kind == CUPTI_ACTIVITY_MEMORY_KIND_DEVICE && a->backing == BACKING_MMAP &&
                   a->device < GPUSIM_DEVICES
               ? a->size
               : 0;
}

/* Adds an allocation; -1 when out of memory (the table, or the device's free
 * memory). */
static int mem_add(void *p, size_t size, uint8_t kind, uint32_t device, int backing) {
    struct alloc a = {(uintptr_t)p, size, kind, (uint8_t)backing, device, NULL};
    pthread_mutex_lock(&g_mem_mu);
    size_t take = counted(&a);
    if (take && take > g_dev[device].info.global_memory - g_dev[device].allocated) {
        pthread_mutex_unlock(&g_mem_mu);
        return -1;
    }
    if (g_nallocs == g_cap_allocs) {
        size_t cap = g_cap_allocs ? g_cap_allocs * 2 : 256;
        struct alloc *n = realloc(g_allocs, cap * sizeof *n);
        if (!n) {
            pthread_mutex_unlock(&g_mem_mu);
            return -1;
        }
        g_allocs = n;
        g_cap_allocs = cap;
    }
    size_t i = alloc_index((uintptr_t)p);
    memmove(&g_allocs[i + 1], &g_allocs[i], (g_nallocs - i) * sizeof *g_allocs);
    g_allocs[i] = a;
    g_nallocs++;
    if (take)
        g_dev[device].allocated += take;
    pthread_mutex_unlock(&g_mem_mu);
    return 0;
}

/* Removes the allocation starting at p; 0 if there is none. */
static int mem_remove(void *p, uint8_t kind, struct alloc *out) {
    pthread_mutex_lock(&g_mem_mu);
    size_t i = alloc_index((uintptr_t)p);
    if (i == 0 || g_allocs[i - 1].base != (uintptr_t)p || g_allocs[i - 1].kind != kind) {
        pthread_mutex_unlock(&g_mem_mu);
        return 0;
    }
    *out = g_allocs[i - 1];
    memmove(&g_allocs[i - 1], &g_allocs[i], (g_nallocs - i) * sizeof *g_allocs);
    g_nallocs--;
    size_t take = counted(out);
    if (take)
        g_dev[out->device].allocated -= take;
    pthread_mutex_unlock(&g_mem_mu);
    return 1;
}

/* The allocation holding p, if any. */
static int mem_find(const void *p, struct alloc *out) {
    int found = 0;
    pthread_mutex_lock(&g_mem_mu);
    size_t i = alloc_index((uintptr_t)p);
    if (i > 0 && (uintptr_t)p < g_allocs[i - 1].base + g_allocs[i - 1].size) {
        *out = g_allocs[i - 1];
        found = 1;
    }
    pthread_mutex_unlock(&g_mem_mu);
    return found;
}

/* The memory kind at p (PAGEABLE when it is no allocation of ours). */
static uint8_t mem_kind(const void *p, uint32_t *device) {
    struct alloc a;
    if (!mem_find(p, &a))
        return CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
    if (device)
        *device = a.device;
    return a.kind;
}

static size_t page_round(size_t n) {
    size_t pg = 4096;
    return n ? (n + pg - 1) / pg * pg : pg;
}

/* Zeroed memory whose pages are committed only when written. */
static void *lazy_map(size_t size) {
    void *p = mmap(NULL, page_round(size), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void lazy_unmap(void *p, size_t size) { munmap(p, page_round(size)); }

/* Sets n bytes at p to zero; whole pages are handed back instead of written. */
static void zero_bytes(uint8_t *p, size_t n) {
    uintptr_t a = ((uintptr_t)p + 4095) & ~(uintptr_t)4095, b = ((uintptr_t)p + n) & ~(uintptr_t)4095;
    if (n < (64u << 10) || b <= a || madvise((void *)a, b - a, MADV_DONTNEED) != 0) {
        memset(p, 0, n);
        return;
    }
    memset(p, 0, a - (uintptr_t)p);
    memset((void *)b, 0, (uintptr_t)p + n - b);
}

static int is_device_kind(uint8_t k) {
    return k == CUPTI_ACTIVITY_MEMORY_KIND_DEVICE || k == CUPTI_ACTIVITY_MEMORY_KIND_MANAGED;
}

/* ------------------------------------------------------------------ streams */

static struct stream *new_stream(struct ctx *c, unsigned flags, int priority, int legacy) {
    struct stream *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->magic = MAGIC_STREAM;
    s->id = legacy ? 7 : atomic_fetch_add(&g_next_stream, 1);
    s->ctx = c;
    s->flags = flags;
    s->priority = priority;
    s->legacy = legacy;
    struct device *d = c->dev;
    pthread_mutex_lock(&d->mu);
    s->next = d->streams;
    d->streams = s;
    pthread_mutex_unlock(&d->mu);
    return s;
}

/* The stream a handle names, in the current context for NULL and the special
 * handles; NULL if invalid. */
static struct stream *resolve_stream(CUstream h) {
    if (h == NULL || h == CU_STREAM_LEGACY) {
        struct ctx *c = current_ctx();
        return c ? c->legacy : NULL;
    }
    if (h == CU_STREAM_PER_THREAD) {
        struct ctx *c = current_ctx();
        if (!c)
            return NULL;
        if (!c->primary)
            return c->legacy;
        int d = (int)c->dev->info.ordinal;
        if (!tls_ptds[d] || tls_ptds[d]->ctx != c)
            tls_ptds[d] = new_stream(c, 0, 0, 0);
        return tls_ptds[d];
    }
    struct stream *s = (struct stream *)h;
    return s->magic == MAGIC_STREAM && s->ctx->live ? s : NULL;
}

/* Two clocks place GPU work (sim/README.md#clocks). The device clock is the
 * simulated GPU's own: work starts there when its stream is ready, and never
 * before the host could have submitted it, which it knows only at the host's
 * last wait for the device (g_vhost, plus the launch latency). It depends on
 * nothing but the work, so durations, event times and the time a wait covers
 * are the same on every run, however the host is scheduled. Activity records
 * carry the host clock (CLOCK_MONOTONIC), as CUPTI's do: the same durations,
 * each piece of work starting no earlier than its API call plus the launch
 * latency, so that a timeline shows the host's real gaps. */
static _Atomic uint64_t g_vhost;

static void vhost_reaches(uint64_t t) {
    uint64_t v = atomic_load(&g_vhost);
    while (t > v && !atomic_compare_exchange_weak(&g_vhost, &v, t))
        ;
}

/* The earliest time new work on `s` may start, from CUDA's ordering rules: a
 * stream is serial; the legacy default stream waits for every blocking stream of
 * its context, and blocking streams wait for it. `device` picks the clock.
 * Called with the device lock. */
static uint64_t ready_on(struct stream *s, int device) {
#define TAIL(x) (device ? (x)->vtail : (x)->tail)
    uint64_t t = TAIL(s);
    if (s->flags & CU_STREAM_NON_BLOCKING)
        return t;
    if (s->legacy) {
        for (struct stream *x = s->ctx->dev->streams; x; x = x->next)
            if (x->ctx == s->ctx && !(x->flags & CU_STREAM_NON_BLOCKING) && TAIL(x) > t)
                t = TAIL(x);
    } else if (TAIL(s->ctx->legacy) > t) {
        t = TAIL(s->ctx->legacy);
    }
    return t;
#undef TAIL
}

static uint64_t ready_time(struct stream *s) { return ready_on(s, 0); }

/* Where new work on `s` starts on the device clock. Called with the device lock. */
static uint64_t device_start(struct stream *s) {
    uint64_t t = atomic_load(&g_vhost) + scaled(LAUNCH_LATENCY_NS), r = ready_on(s, 1);
    return r > t ? r : t;
}

/* Places `dur` ns of work on `s`: returns its start and end on the host clock.
 * A stream with QUEUE_DEPTH unfinished operations makes the caller wait, as a
 * full launch queue does on a GPU. */
static void schedule(struct stream *s, uint64_t dur, uint64_t *start, uint64_t *end) {
    struct device *d = s->ctx->dev;
    pthread_mutex_lock(&d->mu);
    uint64_t now = now_ns();
    while (s->ring_len > 0 && s->ring[s->ring_head] <= now) {
        s->ring_head = (s->ring_head + 1) % QUEUE_DEPTH;
        s->ring_len--;
    }
    while (s->ring_len == QUEUE_DEPTH) {
        uint64_t oldest = s->ring[s->ring_head];
        pthread_mutex_unlock(&d->mu);
        sleep_until(oldest);
        pthread_mutex_lock(&d->mu);
        now = now_ns();
        while (s->ring_len > 0 && s->ring[s->ring_head] <= now) {
            s->ring_head = (s->ring_head + 1) % QUEUE_DEPTH;
            s->ring_len--;
        }
    }
    s->vtail = device_start(s) + dur;
    uint64_t t = now + scaled(LAUNCH_LATENCY_NS);
    uint64_t r = ready_time(s);
    if (r > t)
        t = r;
    *start = t;
    *end = t + dur;
    s->tail = *end;
    s->ring[(s->ring_head + s->ring_len) % QUEUE_DEPTH] = *end;
    s->ring_len++;
    pthread_mutex_unlock(&d->mu);
}

static uint64_t stream_done_time(struct stream *s) {
    pthread_mutex_lock(&s->ctx->dev->mu);
    uint64_t t = s->tail;
    pthread_mutex_unlock(&s->ctx->dev->mu);
    return t;
}

/* The host waited for the work queued on `s`: on the device clock, it is now at
 * that work's end. */
static void waited_for_stream(struct stream *s) {
    pthread_mutex_lock(&s->ctx->dev->mu);
    uint64_t t = s->vtail;
    pthread_mutex_unlock(&s->ctx->dev->mu);
    vhost_reaches(t);
}

static uint64_t ctx_done_time(struct ctx *c) {
    uint64_t t = 0;
    pthread_mutex_lock(&c->dev->mu);
    for (struct stream *x = c->dev->streams; x; x = x->next)
        if (x->ctx == c && x->tail > t)
            t = x->tail;
    pthread_mutex_unlock(&c->dev->mu);
    return t;
}

static void waited_for_ctx(struct ctx *c) {
    uint64_t t = 0;
    pthread_mutex_lock(&c->dev->mu);
    for (struct stream *x = c->dev->streams; x; x = x->next)
        if (x->ctx == c && x->vtail > t)
            t = x->vtail;
    pthread_mutex_unlock(&c->dev->mu);
    vhost_reaches(t);
}

/* ------------------------------------------------------------------ kernels */

/* Kernels live in chunks that are never freed or moved (CUPTI records and
 * handles point into them): up to MAX_KERNELS in all (torch registers about
 * 23,700 at import). */
#define KERNEL_CHUNK 16384
#define KERNEL_CHUNKS 64
#define MAX_KERNELS (KERNEL_CHUNK * KERNEL_CHUNKS)
#define HOST_SLOTS (2 * MAX_KERNELS)
static struct kernel *_Atomic g_kernel_chunks[KERNEL_CHUNKS];
static _Atomic int g_nkernels;
static pthread_mutex_t g_kernel_mu = PTHREAD_MUTEX_INITIALIZER;
/* host stub -> kernel, open addressing; entries are never removed. The table is
 * mapped on first use, so that its untouched pages cost nothing. */
static struct kernel *_Atomic *_Atomic g_by_host;

static size_t host_slot(const void *p) { return ((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ull % HOST_SLOTS; }

/* Called with g_kernel_mu held. */
static struct kernel *new_kernel(const char *name, const void *host_fun, void *module) {
    int i = atomic_load(&g_nkernels);
    if (i >= MAX_KERNELS)
        return NULL;
    struct kernel *chunk = atomic_load(&g_kernel_chunks[i / KERNEL_CHUNK]);
    if (!chunk) {
        chunk = calloc(KERNEL_CHUNK, sizeof *chunk);
        if (!chunk)
            return NULL;
        atomic_store(&g_kernel_chunks[i / KERNEL_CHUNK], chunk);
    }
    struct kernel *k = &chunk[i % KERNEL_CHUNK];
    /* Kernel names live as long as the process: CUPTI records point to them. */
    k->name = strdup(name ? name : "");
    if (!k->name)
        return NULL;
    k->host_fun = host_fun;
    k->module = module;
    k->id = (uint32_t)i + 1;
    k->magic = MAGIC_KERNEL;
    atomic_store(&g_nkernels, i + 1);
    return k;
}

static struct kernel *as_kernel(const void *p) {
    for (int c = 0; c < KERNEL_CHUNKS; c++) {
        const struct kernel *chunk = atomic_load_explicit(&g_kernel_chunks[c], memory_order_acquire);
        if (!chunk)
            return NULL;
        if ((const char *)p < (const char *)chunk || (const char *)p >= (const char *)(chunk + KERNEL_CHUNK))
            continue;
        const struct kernel *k = p;
        if (((uintptr_t)p - (uintptr_t)chunk) % sizeof *k != 0 || k->magic != MAGIC_KERNEL)
            return NULL;
        return (struct kernel *)k;
    }
    return NULL;
}

static struct kernel *_Atomic *host_table(void) {
    struct kernel *_Atomic *t = atomic_load_explicit(&g_by_host, memory_order_acquire);
    if (t)
        return t;
    void *m = mmap(NULL, HOST_SLOTS * sizeof *t, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    struct kernel *_Atomic *none = NULL;
    if (!atomic_compare_exchange_strong(&g_by_host, &none, (struct kernel *_Atomic *)m)) {
        munmap(m, HOST_SLOTS * sizeof *t);
        return none;
    }
    return m;
}

/* For nvcc's __cudaRegisterFunction: the host stub names the device function. */
GPUSIM_EXPORT CUfunction gpusim_register_function(const void *host_fun, const char *device_name) {
    pthread_mutex_lock(&g_kernel_mu);
    struct kernel *_Atomic *table = host_table();
    if (!table) {
        pthread_mutex_unlock(&g_kernel_mu);
        return NULL;
    }
    size_t h = host_slot(host_fun);
    struct kernel *k;
    while ((k = atomic_load(&table[h])) != NULL) {
        if (k->host_fun == host_fun) {
            pthread_mutex_unlock(&g_kernel_mu);
            return (CUfunction)k;
        }
        h = (h + 1) % HOST_SLOTS;
    }
    k = new_kernel(device_name, host_fun, NULL);
    if (k)
        atomic_store(&table[h], k);
    pthread_mutex_unlock(&g_kernel_mu);
    return (CUfunction)k;
}

/* A host stub or a kernel handle (cudaKernel_t, CUfunction) -> the kernel. */
GPUSIM_EXPORT CUfunction gpusim_resolve_function(const void *func) {
    struct kernel *k = as_kernel(func);
    if (k)
        return (CUfunction)k;
    struct kernel *_Atomic *table = atomic_load_explicit(&g_by_host, memory_order_acquire);
    if (!table)
        return NULL;
    size_t h = host_slot(func);
    while ((k = atomic_load(&table[h])) != NULL) {
        if (k->host_fun == func)
            return (CUfunction)k;
        h = (h + 1) % HOST_SLOTS;
    }
    return NULL;
}

/* A kernel known by its name alone, for the math-library stand-ins: one handle
 * per name. */
GPUSIM_EXPORT CUfunction gpusim_named_kernel(const char *name) {
    static struct kernel **named;
    static size_t n, cap;
    if (!name)
        return NULL;
    pthread_mutex_lock(&g_kernel_mu);
    for (size_t i = 0; i < n; i++)
        if (strcmp(named[i]->name, name) == 0) {
            struct kernel *k = named[i];
            pthread_mutex_unlock(&g_kernel_mu);
            return (CUfunction)k;
        }
    struct kernel *k = NULL;
    if (n == cap) {
        size_t c = cap ? cap * 2 : 64;
        struct kernel **p = realloc(named, c * sizeof *p);
        if (p) {
            named = p;
            cap = c;
        }
    }
    if (n < cap && (k = new_kernel(name, NULL, NULL)) != NULL)
        named[n++] = k;
    pthread_mutex_unlock(&g_kernel_mu);
    return (CUfunction)k;
}

GPUSIM_EXPORT const char *gpusim_function_name(CUfunction f) {
    struct kernel *k = as_kernel(f);
    return k ? k->name : NULL;
}

/* ------------------------------------------------------------------ graphs */

static int node_type(const struct node *n) {
    return n->kind == NODE_KERNEL ? CU_GRAPH_NODE_TYPE_KERNEL
           : n->kind == NODE_COPY ? CU_GRAPH_NODE_TYPE_MEMCPY
           : n->kind == NODE_HOST ? CU_GRAPH_NODE_TYPE_HOST
           : n->kind == NODE_MEM_ALLOC ? CU_GRAPH_NODE_TYPE_MEM_ALLOC
           : n->kind == NODE_MEM_FREE ? CU_GRAPH_NODE_TYPE_MEM_FREE
                                  : CU_GRAPH_NODE_TYPE_MEMSET;
}

/* Tells the tool that a node was made (GRAPHNODE_CREATED) or copied from
 * `original` into an instantiated graph (GRAPHNODE_CLONED), on the calling thread,
 * from inside the call that made it, as CUPTI does. */
static void report_graph_node(uint32_t cbid, struct graph *g, struct node *n,
                              struct graph *original_graph, struct node *original,
                              struct graph_exec *x) {
    const struct gpusim_tool *t = atomic_load_explicit(&g_tool, memory_order_acquire);
    if (!t || !t->graph_node)
        return;
    struct gpusim_graph_event e = {
        .context = tls_ctx,
        .graph = g,
        .original_graph = original_graph,
        .node = n,
        .original_node = original,
        .node_type = node_type(n),
        .graph_exec = x,
    };
    t->graph_node(cbid, &e);
}

/* Appends a new node, a copy of `n` with the next node id, to `g`. */
static struct node *graph_add(struct graph *g, const struct node *n) {
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 16;
        struct node **p = realloc(g->nodes, cap * sizeof *p);
        if (!p)
            return NULL;
        g->nodes = p;
        g->cap = cap;
    }
    struct node *copy = malloc(sizeof *copy);
    if (!copy)
        return NULL;
    *copy = *n;
    copy->magic = MAGIC_NODE;
    copy->id = atomic_fetch_add(&g_next_node, 1);
    copy->graph = g;
    g->nodes[g->n++] = copy;
    return copy;
}

/* Stream capture: the work becomes a node of the capturing stream's graph. */
static CUresult capture(struct stream *s, const struct node *n) {
    struct node *made = graph_add(s->capture, n);
    if (!made)
        return CUDA_ERROR_OUT_OF_MEMORY;
    report_graph_node(CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, s->capture, made, NULL, NULL, NULL);
    return CUDA_SUCCESS;
}

static void graph_release_objects(struct graph *g);

static void graph_free_nodes(struct graph *g) {
    for (size_t i = 0; i < g->n; i++) {
        g->nodes[i]->magic = 0;
        free(g->nodes[i]);
    }
    free(g->nodes);
    g->nodes = NULL;
    g->n = g->cap = 0;
}

/* ------------------------------------------------------------------ work */

static uint64_t threads_of(const uint32_t grid[3], const uint32_t block[3]) {
    return (uint64_t)grid[0] * grid[1] * grid[2] * block[0] * block[1] * block[2];
}

static void run_kernel(struct stream *s, const struct node *n, const struct gpusim_api *call,
                       uint32_t graph_id, uint64_t node_id) {
    uint64_t start, end;
    schedule(s, n->cost ? scaled(n->cost) : kernel_cost(threads_of(n->grid, n->block)), &start, &end);
    if (!atomic_load_explicit(&g_tool, memory_order_relaxed))
        return;
    struct device *d = s->ctx->dev;
    struct gpusim_op op = {
        .kind = GPUSIM_OP_KERNEL,
        .start_ns = start,
        .end_ns = end,
        .device = d->info.ordinal,
        .context = s->ctx->id,
        .stream = s->id,
        .graph_id = graph_id,
        .graph_node_id = node_id,
        .name = n->k->name,
        .grid = {(int32_t)n->grid[0], (int32_t)n->grid[1], (int32_t)n->grid[2]},
        .block = {(int32_t)n->block[0], (int32_t)n->block[1], (int32_t)n->block[2]},
        .dynamic_shared = (int32_t)n->shared,
        .launch_type = n->launch_type,
        .grid_id = __atomic_add_fetch(&d->grid_ids, 1, __ATOMIC_RELAXED),
    };
    report_op(&op, call);
}

/* Whether [p, p + bytes) is still inside one allocation, for memory that was
 * device memory (of `kind`) when a graph node named it; other memory is the
 * program's to keep alive. */
static int live_range(const void *p, uint8_t kind, size_t bytes) {
    struct alloc a;
    if (!is_device_kind(kind))
        return 1;
    return mem_find(p, &a) && (uintptr_t)p + bytes <= a.base + a.size;
}

/* Places the copy on the stream and copies the bytes now: the host sees them at
 * once, and no kernel runs that could tell the difference. */
static uint64_t run_copy(struct stream *s, const struct node *n, const struct gpusim_api *call,
                         uint32_t graph_id, uint64_t node_id, int async) {
    uint8_t host = n->src_kind == CUPTI_ACTIVITY_MEMORY_KIND_DEVICE ? n->dst_kind : n->src_kind;
    uint64_t start, end;
    schedule(s, copy_cost(n->copy_kind, host, n->bytes), &start, &end);
    /* A graph's copy may name device memory freed since it was made (freed by
     * the program, as CUDA forbids): no bytes move then, rather than a crash. */
    if (n->bytes && (!graph_id || (live_range(n->src, n->src_kind, n->bytes) &&
                                   live_range(n->dst, n->dst_kind, n->bytes))))
        memmove(n->dst, n->src, n->bytes);
    if (!atomic_load_explicit(&g_tool, memory_order_relaxed))
        return end;
    uint32_t src_dev = s->ctx->dev->info.ordinal, dst_dev = src_dev;
    mem_kind(n->src, &src_dev);
    mem_kind(n->dst, &dst_dev);
    struct gpusim_op op = {
        .kind = n->copy_kind == CUPTI_ACTIVITY_MEMCPY_KIND_PTOP ? GPUSIM_OP_MEMCPY_PEER
                                                                : GPUSIM_OP_MEMCPY,
        .start_ns = start,
        .end_ns = end,
        .device = s->ctx->dev->info.ordinal,
        .context = s->ctx->id,
        .stream = s->id,
        .graph_id = graph_id,
        .graph_node_id = node_id,
        .bytes = n->bytes,
        .copy_kind = n->copy_kind,
        .src_kind = n->src_kind,
        .dst_kind = n->dst_kind,
        .async = (uint8_t)async,
        .src_device = src_dev,
        .dst_device = dst_dev,
        .src_context = s->ctx->id,
        .dst_context = s->ctx->id,
    };
    /* A peer copy's contexts: the primary contexts of its two devices. */
    if (op.kind == GPUSIM_OP_MEMCPY_PEER) {
        op.src_context = g_dev[src_dev].primary.live ? g_dev[src_dev].primary.id : s->ctx->id;
        op.dst_context = g_dev[dst_dev].primary.live ? g_dev[dst_dev].primary.id : s->ctx->id;
    }
    report_op(&op, call);
    return end;
}

static uint64_t run_memset(struct stream *s, const struct node *n, const struct gpusim_api *call,
                           uint32_t graph_id, uint64_t node_id, int async) {
    uint64_t start, end;
    schedule(s, memset_cost(n->bytes), &start, &end);
    uint8_t *p = n->dst;
    if (n->value == 0)
        zero_bytes(p, n->bytes);
    else if (n->elem == 1)
        memset(p, (int)n->value, n->bytes);
    else
        for (size_t i = 0; i < n->bytes; i += n->elem)
            memcpy(p + i, &n->value, n->elem);
    if (!atomic_load_explicit(&g_tool, memory_order_relaxed))
        return end;
    struct gpusim_op op = {
        .kind = GPUSIM_OP_MEMSET,
        .start_ns = start,
        .end_ns = end,
        .device = s->ctx->dev->info.ordinal,
        .context = s->ctx->id,
        .stream = s->id,
        .graph_id = graph_id,
        .graph_node_id = node_id,
        .bytes = n->bytes,
        .value = n->value,
        .async = (uint8_t)async,
        .memory_kind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE,
    };
    report_op(&op, call);
    return end;
}

/* Host functions (cuLaunchHostFunc, cuStreamAddCallback, graph host nodes) run
 * in stream order on one worker thread, as CUDA runs them on a thread of its
 * own: each when the simulated work queued before it on its stream has ended.
 * Work queued after one is not held back (kernels never run, so nothing could
 * tell), but every synchronization waits until the queued host functions have
 * returned. */
struct host_call {
    CUhostFn fn;
    void *data;
    uint64_t ready;
    struct host_call *next;
};
static pthread_mutex_t g_host_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_host_cv = PTHREAD_COND_INITIALIZER;      /* work queued */
static pthread_cond_t g_host_idle_cv = PTHREAD_COND_INITIALIZER; /* queue drained */
static struct host_call *g_host_head, **g_host_tail = &g_host_head;
static int g_host_pending, g_host_worker;
static __thread int tls_host_worker;

static void sleep_until(uint64_t t);

static void *host_worker(void *arg) {
    (void)arg;
    tls_host_worker = 1;
    pthread_mutex_lock(&g_host_mu);
    for (;;) {
        while (!g_host_head)
            pthread_cond_wait(&g_host_cv, &g_host_mu);
        struct host_call *h = g_host_head;
        g_host_head = h->next;
        if (!g_host_head)
            g_host_tail = &g_host_head;
        pthread_mutex_unlock(&g_host_mu);
        sleep_until(h->ready);
        h->fn(h->data);
        free(h);
        pthread_mutex_lock(&g_host_mu);
        if (--g_host_pending == 0)
            pthread_cond_broadcast(&g_host_idle_cv);
    }
    return NULL;
}

static CUresult queue_host_fn(CUhostFn fn, void *data, uint64_t ready) {
    struct host_call *h = calloc(1, sizeof *h);
    if (!h)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *h = (struct host_call){fn, data, ready, NULL};
    pthread_mutex_lock(&g_host_mu);
    if (!g_host_worker) {
        pthread_t t;
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &a, host_worker, NULL) != 0) {
            pthread_attr_destroy(&a);
            pthread_mutex_unlock(&g_host_mu);
            free(h);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        pthread_attr_destroy(&a);
        g_host_worker = 1;
    }
    *g_host_tail = h;
    g_host_tail = &h->next;
    g_host_pending++;
    pthread_cond_signal(&g_host_cv);
    pthread_mutex_unlock(&g_host_mu);
    return CUDA_SUCCESS;
}

/* Waits until every queued host function has returned (not from one of them). */
static void wait_host_fns(void) {
    if (tls_host_worker)
        return;
    pthread_mutex_lock(&g_host_mu);
    while (g_host_pending)
        pthread_cond_wait(&g_host_idle_cv, &g_host_mu);
    pthread_mutex_unlock(&g_host_mu);
}

static void run_host(struct stream *s, const struct node *n) {
    uint64_t ready = stream_done_time(s);
    queue_host_fn(n->host_fn, n->host_data, ready);
}

/* A kernel launch's work, checked as cuLaunchKernel checks it: for a launch or a
 * kernel node. */
static CUresult kernel_node(CUfunction f, const uint32_t grid[3], const uint32_t block[3],
                            unsigned shared, uint8_t launch_type, struct node *n) {
    struct kernel *k = as_kernel(f);
    if (!k)
        return CUDA_ERROR_INVALID_HANDLE;
    for (int i = 0; i < 3; i++)
        if (grid[i] == 0 || block[i] == 0)
            return CUDA_ERROR_INVALID_VALUE;
    if ((uint64_t)block[0] * block[1] * block[2] > 1024 || block[0] > 1024 || block[1] > 1024 ||
        block[2] > 64 || grid[1] > 65535 || grid[2] > 65535 || grid[0] > 0x7fffffffu ||
        shared > 232448)
        return CUDA_ERROR_INVALID_VALUE;
    *n = (struct node){.kind = NODE_KERNEL, .k = k, .shared = shared, .launch_type = launch_type};
    memcpy(n->grid, grid, sizeof n->grid);
    memcpy(n->block, block, sizeof n->block);
    return CUDA_SUCCESS;
}

static CUresult launch(CUfunction f, const uint32_t grid[3], const uint32_t block[3],
                       unsigned shared, CUstream hs, uint8_t launch_type,
                       const struct gpusim_api *call) {
    if (!as_kernel(f))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!current_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    struct stream *s = resolve_stream(hs);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    struct node n;
    CUresult r = kernel_node(f, grid, block, shared, launch_type, &n);
    n.cost = tls_next_cost;
    tls_next_cost = 0;
    if (r != CUDA_SUCCESS)
        return r;
    if (s->capture)
        return capture(s, &n);
    run_kernel(s, &n, call, 0, 0);
    return CUDA_SUCCESS;
}

/* A copy between any two pointers; `hs` NULL with sync=1 is a synchronous copy on
 * the legacy stream. */
static CUresult copy(void *dst, const void *src, size_t bytes, CUstream hs, int async,
                     const struct gpusim_api *call) {
    if (!current_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    struct stream *s = resolve_stream(hs);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    if (bytes && (!dst || !src))
        return CUDA_ERROR_INVALID_VALUE;
    uint32_t sd = UINT32_MAX, dd = UINT32_MAX;
    uint8_t sk = mem_kind(src, &sd), dk = mem_kind(dst, &dd);
    struct node n = {.kind = NODE_COPY, .dst = dst, .src = src, .bytes = bytes,
                     .src_kind = sk, .dst_kind = dk};
    int sdev = is_device_kind(sk), ddev = is_device_kind(dk);
    if (sdev && ddev)
        n.copy_kind = sd != dd ? CUPTI_ACTIVITY_MEMCPY_KIND_PTOP : CUPTI_ACTIVITY_MEMCPY_KIND_DTOD;
    else if (sdev)
        n.copy_kind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
    else if (ddev)
        n.copy_kind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
    else
        n.copy_kind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOH;
    if (s->capture)
        return capture(s, &n);
    uint64_t end = run_copy(s, &n, call, 0, 0, async);
    /* Synchronous copies return when done; so do async copies to pageable host
     * memory, as CUDA documents. */
    if (!async || (n.copy_kind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH &&
                   dk == CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE)) {
        sleep_until(end);
        waited_for_stream(s);
    }
    return CUDA_SUCCESS;
}

static CUresult memset_(CUdeviceptr dst, uint32_t value, unsigned elem, size_t count, CUstream hs,
                        int async, const struct gpusim_api *call) {
    if (!current_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    struct stream *s = resolve_stream(hs);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    if (count && !dst)
        return CUDA_ERROR_INVALID_VALUE;
    struct node n = {.kind = NODE_MEMSET, .dst = (void *)dst, .bytes = count * elem,
                     .value = value, .elem = elem};
    if (s->capture)
        return capture(s, &n);
    uint64_t end = run_memset(s, &n, call, 0, 0, async);
    if (!async) {
        sleep_until(end);
        waited_for_stream(s);
    }
    return CUDA_SUCCESS;
}

/* ================================================================== driver API */

GPUSIM_EXPORT CUresult CUDAAPI cuInit(unsigned int flags) {
    gpusim_init();
    CUresult ret_ = CUDA_SUCCESS;
    cuInit_params params_ = {flags};
    struct gpusim_api call_;
    gpusim_api_begin(&call_, GPUSIM_DOMAIN_DRIVER, CUPTI_DRIVER_TRACE_CBID_cuInit, "cuInit",
                     &params_, &ret_, NULL);
    RETURN(flags ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS);
}

DRV(cuDriverGetVersion, (int *v), (v)) {
    ENTER(cuDriverGetVersion, v);
    if (!v)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    *v = 13000;
    RETURN(CUDA_SUCCESS);
}

DRV(cuDeviceGetCount, (int *n), (n)) {
    ENTER(cuDeviceGetCount, n);
    if (!n)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    *n = GPUSIM_DEVICES;
    RETURN(CUDA_SUCCESS);
}

DRV(cuDeviceGet, (CUdevice *d, int ordinal), (d, ordinal)) {
    ENTER(cuDeviceGet, d, ordinal);
    if (!d)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (ordinal < 0 || ordinal >= GPUSIM_DEVICES)
        RETURN(CUDA_ERROR_INVALID_DEVICE);
    *d = ordinal;
    RETURN(CUDA_SUCCESS);
}

#define BAD_DEVICE(d) ((d) < 0 || (d) >= GPUSIM_DEVICES)

DRV(cuDeviceGetName, (char *name, int len, CUdevice dev), (name, len, dev)) {
    ENTER(cuDeviceGetName, name, len, dev);
    if (!name || len <= 0)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (BAD_DEVICE(dev))
        RETURN(CUDA_ERROR_INVALID_DEVICE);
    snprintf(name, (size_t)len, "%s", g_dev[dev].name);
    RETURN(CUDA_SUCCESS);
}

DRV(cuDeviceGetUuid, (CUuuid *uuid, CUdevice dev), (uuid, dev)) {
    ENTER(cuDeviceGetUuid, uuid, dev);
    if (!uuid)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (BAD_DEVICE(dev))
        RETURN(CUDA_ERROR_INVALID_DEVICE);
    memcpy(uuid->bytes, g_dev[dev].info.uuid, 16);
    RETURN(CUDA_SUCCESS);
}

DRV(cuDeviceTotalMem, (size_t *bytes, CUdevice dev), (bytes, dev)) {
    ENTER(cuDeviceTotalMem, bytes, dev);
    if (!bytes)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (BAD_DEVICE(dev))
        RETURN(CUDA_ERROR_INVALID_DEVICE);
    *bytes = g_dev[dev].info.global_memory;
    RETURN(CUDA_SUCCESS);
}

/* The attributes of a Hopper-class device; 0 for anything not listed. */
static int attribute(CUdevice_attribute a, const struct gpusim_device_info *f) {
    switch (a) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return 0x7fffffff;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return (int)f->shared_per_block;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: return (int)f->constant_memory;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: return 0x7fffffff;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: return (int)f->regs_per_block;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return (int)f->clock_khz;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: return 512;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: return 1;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return (int)f->multiprocessors;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: return 0;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: return 0;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: return 1;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: return 0;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return (int)f->ordinal + 1;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: return 0;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: return 2619000;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return 5120;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return (int)f->l2_cache;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return 2048;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: return (int)f->copy_engines;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return f->cc_major;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return f->cc_minor;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: return (int)f->shared_per_sm;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: return (int)f->regs_per_sm;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD: return 0;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: return 232448;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: return (int)f->max_blocks_per_sm;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH: return 1;
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED: return 1;
    default: return 0;
    }
}

DRV(cuDeviceGetAttribute, (int *v, CUdevice_attribute a, CUdevice dev), (v, a, dev)) {
    ENTER(cuDeviceGetAttribute, v, a, dev);
    if (!v)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (BAD_DEVICE(dev))
        RETURN(CUDA_ERROR_INVALID_DEVICE);
    *v = attribute(a, &g_dev[dev].info);
    RETURN(CUDA_SUCCESS);
}

GPUSIM_EXPORT int gpusim_device_attribute(int attr, int dev) {
    return BAD_DEVICE(dev) ? 0 : attribute((CUdevice_attribute)attr, &g_dev[dev].info);
}

DRV(cuDeviceCanAccessPeer, (int *can, CUdevice dev, CUdevice peer), (can, dev, peer)) {
    ENTER(cuDeviceCanAccessPeer, can, dev, peer);
    if (!can)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (BAD_DEVICE(dev) || BAD_DEVICE(peer))
        RETURN(CUDA_ERROR_INVALID_DEVICE);
    *can = dev != peer;
    RETURN(CUDA_SUCCESS);
}

/* Contexts ----------------------------------------------------------------- */

static void announce_ctx(struct ctx *c) {
    report_resource(CUPTI_CBID_RESOURCE_CONTEXT_CREATED, c, NULL);
}

/* The runtime's context handling (no API calls, as NVIDIA's runtime does it
 * through private entry points): retains the device's primary context once and
 * makes it current on this thread. */
GPUSIM_EXPORT int gpusim_runtime_device(int dev) {
    if (BAD_DEVICE(dev))
        return -1;
    struct device *d = &g_dev[dev];
    if (tls_ctx == &d->primary && d->primary.live && d->runtime_retained)
        return 0;
    pthread_mutex_lock(&g_mu);
    int created = !d->primary.live;
    if (created) {
        d->primary.dev = d;
        d->primary.primary = 1;
        d->primary.flags = d->primary_flags;
        ctx_activate(&d->primary);
        d->runtime_retained = 0;
    }
    if (!d->runtime_retained) {
        d->runtime_retained = 1;
        d->primary_refs++;
    }
    pthread_mutex_unlock(&g_mu);
    if (created)
        announce_ctx(&d->primary);
    tls_ctx = &d->primary;
    return 0;
}

GPUSIM_EXPORT CUcontext gpusim_runtime_context(int dev) {
    if (BAD_DEVICE(dev))
        return NULL;
    struct ctx *saved = tls_ctx;
    gpusim_runtime_device(dev);
    tls_ctx = saved;
    return (CUcontext)&g_dev[dev].primary;
}

/* Storage for __device__ variables: device 0 memory. */
GPUSIM_EXPORT void *gpusim_static_alloc(size_t bytes) {
    void *p = lazy_map(bytes);
    if (p && mem_add(p, bytes, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 0, BACKING_MMAP)) {
        lazy_unmap(p, bytes);
        return NULL;
    }
    return p;
}

DRV(cuDevicePrimaryCtxRetain, (CUcontext *pctx, CUdevice dev), (pctx, dev)) {
    ENTER(cuDevicePrimaryCtxRetain, pctx, dev);
    if (!pctx)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (BAD_DEVICE(dev))
        RETURN(CUDA_ERROR_INVALID_DEVICE);
    struct device *d = &g_dev[dev];
    pthread_mutex_lock(&g_mu);
    int created = !d->primary.live;
    if (created) {
        d->primary.dev = d;
        d->primary.primary = 1;
        d->primary.flags = d->primary_flags;
        ctx_activate(&d->primary);
    }
    d->primary_refs++;
    pthread_mutex_unlock(&g_mu);
    if (created)
        announce_ctx(&d->primary);
    *pctx = (CUcontext)&d->primary;
    RETURN(CUDA_SUCCESS);
}

static void ctx_retire(struct ctx *c) {
    report_resource(CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING, c, NULL);
    sleep_until(ctx_done_time(c));
    waited_for_ctx(c);
    pthread_mutex_lock(&g_mu);
    c->live = 0;
    for (struct ctx **p = &g_ctxs; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    pthread_mutex_unlock(&g_mu);
    /* Its streams stay allocated (handles may still be held) but die with it. */
    struct device *d = c->dev;
    pthread_mutex_lock(&d->mu);
    for (struct stream **p = &d->streams; *p;) {
        if ((*p)->ctx == c) {
            (*p)->magic = 0;
            *p = (*p)->next;
        } else {
            p = &(*p)->next;
        }
    }
    pthread_mutex_unlock(&d->mu);
    for (int i = 0; i < GPUSIM_DEVICES; i++)
        if (tls_ptds[i] && tls_ptds[i]->ctx == c)
            tls_ptds[i] = NULL;
    if (tls_ctx == c)
        tls_ctx = NULL;
}

static atomic_int g_torn_down;

GPUSIM_EXPORT void gpusim_teardown_contexts(void) {
    for (;;) {
        pthread_mutex_lock(&g_mu);
        struct ctx *c = g_ctxs;
        while (c && !c->live)
            c = c->next;
        pthread_mutex_unlock(&g_mu);
        if (!c)
            break;
        /* CONTEXT_DESTROY_STARTING, the context's work waited for, then gone. */
        ctx_retire(c);
        if (c->primary) {
            pthread_mutex_lock(&g_mu);
            c->dev->primary_refs = 0;
            pthread_mutex_unlock(&g_mu);
        }
    }
    atomic_store(&g_torn_down, 1);
}

GPUSIM_EXPORT int gpusim_torn_down(void) { return atomic_load(&g_torn_down); }

DRV(cuDevicePrimaryCtxRelease, (CUdevice dev), (dev)) {
    ENTER(cuDevicePrimaryCtxRelease, dev);
    if (BAD_DEVICE(dev))
        RETURN(CUDA_ERROR_INVALID_DEVICE);
    struct device *d = &g_dev[dev];
    pthread_mutex_lock(&g_mu);
    int last = d->primary_refs > 0 && --d->primary_refs == 0 && d->primary.live;
    pthread_mutex_unlock(&g_mu);
    if (last)
        ctx_retire(&d->primary);
    RETURN(CUDA_SUCCESS);
}

DRV(cuDevicePrimaryCtxReset, (CUdevice dev), (dev)) {
    ENTER(cuDevicePrimaryCtxReset, dev);
    if (BAD_DEVICE(dev))
        RETURN(CUDA_ERROR_INVALID_DEVICE);
    struct device *d = &g_dev[dev];
    if (d->primary.live)
        ctx_retire(&d->primary);
    pthread_mutex_lock(&g_mu);
    d->primary_refs = 0;
    pthread_mutex_unlock(&g_mu);
    RETURN(CUDA_SUCCESS);
}

DRV(cuDevicePrimaryCtxGetState, (CUdevice dev, unsigned int *flags, int *active), (dev, flags, active)) {
    ENTER(cuDevicePrimaryCtxGetState, dev, flags, active);
    if (BAD_DEVICE(dev))
        RETURN(CUDA_ERROR_INVALID_DEVICE);
    if (flags)
        *flags = g_dev[dev].primary_flags;
    if (active)
        *active = g_dev[dev].primary.live;
    RETURN(CUDA_SUCCESS);
}

DRV(cuDevicePrimaryCtxSetFlags, (CUdevice dev, unsigned int flags), (dev, flags)) {
    ENTER(cuDevicePrimaryCtxSetFlags, dev, flags);
    if (BAD_DEVICE(dev))
        RETURN(CUDA_ERROR_INVALID_DEVICE);
    g_dev[dev].primary_flags = flags;
    RETURN(CUDA_SUCCESS);
}

static CUresult create_ctx(CUcontext *pctx, unsigned flags, CUdevice dev) {
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (BAD_DEVICE(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    struct ctx *c = calloc(1, sizeof *c);
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    c->dev = &g_dev[dev];
    c->flags = flags;
    pthread_mutex_lock(&g_mu);
    ctx_activate(c);
    pthread_mutex_unlock(&g_mu);
    announce_ctx(c);
    if (tls_ctx_depth < 16)
        tls_ctx_stack[tls_ctx_depth++] = tls_ctx;
    tls_ctx = c;
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

DRV(cuCtxCreate, (CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev),
    (pctx, params, flags, dev)) {
    ENTER(cuCtxCreate, pctx, params, flags, dev);
    RETURN(create_ctx(pctx, flags, dev));
}

DRV(cuCtxDestroy, (CUcontext h), (h)) {
    ENTER(cuCtxDestroy, h);
    struct ctx *c = as_ctx(h);
    if (!c || c->primary)
        RETURN(CUDA_ERROR_INVALID_CONTEXT);
    ctx_retire(c);
    RETURN(CUDA_SUCCESS);
}

DRV(cuCtxSetCurrent, (CUcontext h), (h)) {
    ENTER(cuCtxSetCurrent, h);
    if (h && !as_ctx(h))
        RETURN(CUDA_ERROR_INVALID_CONTEXT);
    tls_ctx = (struct ctx *)h;
    RETURN(CUDA_SUCCESS);
}

DRV(cuCtxGetCurrent, (CUcontext *h), (h)) {
    ENTER(cuCtxGetCurrent, h);
    if (!h)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    *h = (CUcontext)current_ctx();
    RETURN(CUDA_SUCCESS);
}

DRV(cuCtxPushCurrent, (CUcontext h), (h)) {
    ENTER(cuCtxPushCurrent, h);
    if (!as_ctx(h))
        RETURN(CUDA_ERROR_INVALID_CONTEXT);
    if (tls_ctx_depth == 16)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    tls_ctx_stack[tls_ctx_depth++] = tls_ctx;
    tls_ctx = (struct ctx *)h;
    RETURN(CUDA_SUCCESS);
}

DRV(cuCtxPopCurrent, (CUcontext *h), (h)) {
    ENTER(cuCtxPopCurrent, h);
    if (!tls_ctx)
        RETURN(CUDA_ERROR_INVALID_CONTEXT);
    if (h)
        *h = (CUcontext)tls_ctx;
    tls_ctx = tls_ctx_depth ? tls_ctx_stack[--tls_ctx_depth] : NULL;
    RETURN(CUDA_SUCCESS);
}

DRV(cuCtxGetDevice, (CUdevice *dev), (dev)) {
    ENTER(cuCtxGetDevice, dev);
    struct ctx *c = current_ctx();
    if (!dev)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!c)
        RETURN(CUDA_ERROR_INVALID_CONTEXT);
    *dev = (CUdevice)c->dev->info.ordinal;
    RETURN(CUDA_SUCCESS);
}

DRV(cuCtxGetId, (CUcontext h, unsigned long long *id), (h, id)) {
    ENTER(cuCtxGetId, h, id);
    struct ctx *c = h ? as_ctx(h) : current_ctx();
    if (!id)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!c)
        RETURN(CUDA_ERROR_INVALID_CONTEXT);
    *id = c->id;
    RETURN(CUDA_SUCCESS);
}

DRV(cuCtxGetFlags, (unsigned int *flags), (flags)) {
    ENTER(cuCtxGetFlags, flags);
    struct ctx *c = current_ctx();
    if (!c)
        RETURN(CUDA_ERROR_INVALID_CONTEXT);
    if (flags)
        *flags = c->flags;
    RETURN(CUDA_SUCCESS);
}

DRV(cuCtxSetFlags, (unsigned int flags), (flags)) {
    ENTER(cuCtxSetFlags, flags);
    struct ctx *c = current_ctx();
    if (!c)
        RETURN(CUDA_ERROR_INVALID_CONTEXT);
    c->flags = flags;
    RETURN(CUDA_SUCCESS);
}

DRV(cuCtxGetApiVersion, (CUcontext h, unsigned int *v), (h, v)) {
    ENTER(cuCtxGetApiVersion, h, v);
    if (!v)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    *v = 13000;
    RETURN(CUDA_SUCCESS);
}

DRV(cuCtxGetStreamPriorityRange, (int *least, int *greatest), (least, greatest)) {
    ENTER(cuCtxGetStreamPriorityRange, least, greatest);
    if (least)
        *least = 0;
    if (greatest)
        *greatest = -5;
    RETURN(CUDA_SUCCESS);
}

DRV(cuCtxGetLimit, (size_t *v, CUlimit limit), (v, limit)) {
    ENTER(cuCtxGetLimit, v, limit);
    if (!v)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    *v = limit == CU_LIMIT_STACK_SIZE ? 1024 : limit == CU_LIMIT_PRINTF_FIFO_SIZE ? 1 << 20 : 0;
    RETURN(CUDA_SUCCESS);
}

DRV(cuCtxSetLimit, (CUlimit limit, size_t v), (limit, v)) {
    ENTER(cuCtxSetLimit, limit, v);
    RETURN(CUDA_SUCCESS);
}

DRV(cuCtxGetCacheConfig, (CUfunc_cache *c), (c)) {
    ENTER(cuCtxGetCacheConfig, c);
    if (c)
        *c = CU_FUNC_CACHE_PREFER_NONE;
    RETURN(CUDA_SUCCESS);
}

DRV(cuCtxSetCacheConfig, (CUfunc_cache c), (c)) {
    ENTER(cuCtxSetCacheConfig, c);
    RETURN(CUDA_SUCCESS);
}

DRV(cuCtxEnablePeerAccess, (CUcontext peer, unsigned int flags), (peer, flags)) {
    ENTER(cuCtxEnablePeerAccess, peer, flags);
    RETURN(as_ctx(peer) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT);
}

static CUresult ctx_sync(struct gpusim_api *call) {
    struct ctx *c = current_ctx();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    uint64_t t0 = now_ns();
    sleep_until(ctx_done_time(c));
    waited_for_ctx(c);
    wait_host_fns();
    report_sync(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE, t0, call, c, NULL, NULL);
    return CUDA_SUCCESS;
}

DRV(cuCtxSynchronize, (void), ()) {
    ENTER(cuCtxSynchronize, 0);
    RETURN(ctx_sync(&call_));
}

/* Memory -------------------------------------------------------------------- */

static CUresult device_alloc(CUdeviceptr *p, size_t n, uint8_t kind) {
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    struct ctx *c = current_ctx();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    uint32_t dev = c->dev->info.ordinal;
    if (n > c->dev->info.global_memory)
        return CUDA_ERROR_OUT_OF_MEMORY;
    void *m = lazy_map(n);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (mem_add(m, n, kind, dev, BACKING_MMAP)) {
        lazy_unmap(m, n);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *p = (CUdeviceptr)m;
    return CUDA_SUCCESS;
}

static CUresult device_free(CUdeviceptr p) {
    struct alloc a;
    if (!p)
        return CUDA_SUCCESS;
    if (!mem_remove((void *)p, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, &a) &&
        !mem_remove((void *)p, CUPTI_ACTIVITY_MEMORY_KIND_MANAGED, &a))
        return CUDA_ERROR_INVALID_VALUE;
    if (a.backing == BACKING_MMAP)
        lazy_unmap((void *)p, a.size);
    return CUDA_SUCCESS;
}

DRV(cuMemAlloc, (CUdeviceptr *p, size_t n), (p, n)) {
    ENTER(cuMemAlloc, p, n);
    RETURN(device_alloc(p, n, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE));
}

DRV(cuMemAllocManaged, (CUdeviceptr *p, size_t n, unsigned int flags), (p, n, flags)) {
    ENTER(cuMemAllocManaged, p, n, flags);
    RETURN(device_alloc(p, n, CUPTI_ACTIVITY_MEMORY_KIND_MANAGED));
}

DRV(cuMemAllocAsync, (CUdeviceptr *p, size_t n, CUstream s), (p, n, s)) {
    ENTER(cuMemAllocAsync, p, n, s);
    struct stream *st = resolve_stream(s);
    if (!st)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    CUresult r = device_alloc(p, n, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE);
    /* Captured, it is an allocation node (whose memory lives from now on). */
    if (r == CUDA_SUCCESS && st->capture) {
        struct node node = {.kind = NODE_MEM_ALLOC, .dst = (void *)*p, .bytes = n};
        r = capture(st, &node);
    }
    RETURN(r);
}

DRV(cuMemFree, (CUdeviceptr p), (p)) {
    ENTER(cuMemFree, p);
    RETURN(device_free(p));
}

DRV(cuMemFreeAsync, (CUdeviceptr p, CUstream s), (p, s)) {
    ENTER(cuMemFreeAsync, p, s);
    struct stream *st = resolve_stream(s);
    if (!st)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    /* Captured, it is a free node: the graph's memory is not freed. */
    if (st->capture) {
        struct node node = {.kind = NODE_MEM_FREE, .dst = (void *)p};
        RETURN(capture(st, &node));
    }
    /* The memory must outlive the work queued before the free. */
    sleep_until(stream_done_time(st));
    waited_for_stream(st);
    RETURN(device_free(p));
}

static CUresult host_alloc(void **p, size_t n) {
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    void *m = lazy_map(n);
    struct ctx *c = current_ctx();
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (mem_add(m, n, CUPTI_ACTIVITY_MEMORY_KIND_PINNED, c ? c->dev->info.ordinal : 0, BACKING_MMAP)) {
        lazy_unmap(m, n);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *p = m;
    return CUDA_SUCCESS;
}

DRV(cuMemAllocHost, (void **p, size_t n), (p, n)) {
    ENTER(cuMemAllocHost, p, n);
    RETURN(host_alloc(p, n));
}

DRV(cuMemHostAlloc, (void **p, size_t n, unsigned int flags), (p, n, flags)) {
    ENTER(cuMemHostAlloc, p, n, flags);
    RETURN(host_alloc(p, n));
}

DRV(cuMemFreeHost, (void *p), (p)) {
    ENTER(cuMemFreeHost, p);
    struct alloc a;
    if (!p)
        RETURN(CUDA_SUCCESS);
    if (!mem_remove(p, CUPTI_ACTIVITY_MEMORY_KIND_PINNED, &a))
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (a.backing != BACKING_MMAP) {
        mem_add(p, a.size, a.kind, a.device, a.backing); /* registered, not ours to free */
        RETURN(CUDA_ERROR_INVALID_VALUE);
    }
    lazy_unmap(p, a.size);
    RETURN(CUDA_SUCCESS);
}

DRV(cuMemHostRegister, (void *p, size_t n, unsigned int flags), (p, n, flags)) {
    ENTER(cuMemHostRegister, p, n, flags);
    if (!p || !n)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    RETURN(mem_add(p, n, CUPTI_ACTIVITY_MEMORY_KIND_PINNED, 0, BACKING_NONE) ? CUDA_ERROR_OUT_OF_MEMORY
                                                                   : CUDA_SUCCESS);
}

DRV(cuMemHostUnregister, (void *p), (p)) {
    ENTER(cuMemHostUnregister, p);
    struct alloc a;
    RETURN(mem_remove(p, CUPTI_ACTIVITY_MEMORY_KIND_PINNED, &a) && a.backing == BACKING_NONE
               ? CUDA_SUCCESS
               : CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
}

DRV(cuMemGetInfo, (size_t *free_, size_t *total), (free_, total)) {
    ENTER(cuMemGetInfo, free_, total);
    struct ctx *c = current_ctx();
    if (!c)
        RETURN(CUDA_ERROR_INVALID_CONTEXT);
    if (total)
        *total = c->dev->info.global_memory;
    if (free_)
        *free_ = c->dev->info.global_memory - c->dev->allocated;
    RETURN(CUDA_SUCCESS);
}

/* Copies and memsets ---------------------------------------------------------- */

#define COPY_FN(name, dtype, stype, args_decl, args, dst, src, n, stream, async)       \
    DRV(name, args_decl, args) {                                                       \
        ENTER(name, CAT_ARGS args);                                                    \
        RETURN(copy((void *)(dst), (const void *)(src), n, stream, async, &call_));    \
    }
#define CAT_ARGS(...) __VA_ARGS__

COPY_FN(cuMemcpy, , , (CUdeviceptr d, CUdeviceptr s, size_t n), (d, s, n), d, s, n, NULL, 0)
COPY_FN(cuMemcpyAsync, , , (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st), (d, s, n, st), d, s, n, st, 1)
COPY_FN(cuMemcpyHtoD, , , (CUdeviceptr d, const void *s, size_t n), (d, s, n), d, s, n, NULL, 0)
COPY_FN(cuMemcpyDtoH, , , (void *d, CUdeviceptr s, size_t n), (d, s, n), d, s, n, NULL, 0)
COPY_FN(cuMemcpyDtoD, , , (CUdeviceptr d, CUdeviceptr s, size_t n), (d, s, n), d, s, n, NULL, 0)
COPY_FN(cuMemcpyHtoDAsync, , , (CUdeviceptr d, const void *s, size_t n, CUstream st), (d, s, n, st), d, s, n, st, 1)
COPY_FN(cuMemcpyDtoHAsync, , , (void *d, CUdeviceptr s, size_t n, CUstream st), (d, s, n, st), d, s, n, st, 1)
COPY_FN(cuMemcpyDtoDAsync, , , (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st), (d, s, n, st), d, s, n, st, 1)

DRV(cuMemcpyPeer, (CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n),
    (d, dc, s, sc, n)) {
    ENTER(cuMemcpyPeer, d, dc, s, sc, n);
    if (!as_ctx(dc) || !as_ctx(sc))
        RETURN(CUDA_ERROR_INVALID_CONTEXT);
    RETURN(copy((void *)d, (const void *)s, n, NULL, 0, &call_));
}

DRV(cuMemcpyPeerAsync, (CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n, CUstream st),
    (d, dc, s, sc, n, st)) {
    ENTER(cuMemcpyPeerAsync, d, dc, s, sc, n, st);
    if (!as_ctx(dc) || !as_ctx(sc))
        RETURN(CUDA_ERROR_INVALID_CONTEXT);
    RETURN(copy((void *)d, (const void *)s, n, st, 1, &call_));
}

/* A pitched 2D copy, as one copy of width x height bytes. */
static CUresult copy2d(const CUDA_MEMCPY2D *p, CUstream st, int async, struct gpusim_api *call) {
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    const char *src = p->srcMemoryType == CU_MEMORYTYPE_HOST ? p->srcHost : (const char *)p->srcDevice;
    char *dst = p->dstMemoryType == CU_MEMORYTYPE_HOST ? p->dstHost : (char *)p->dstDevice;
    src += p->srcY * p->srcPitch + p->srcXInBytes;
    dst += p->dstY * p->dstPitch + p->dstXInBytes;
    if (!current_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    struct stream *s = resolve_stream(st);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    if (p->WidthInBytes > p->srcPitch || p->WidthInBytes > p->dstPitch)
        return CUDA_ERROR_INVALID_VALUE;
    /* The rows are copied here; the single copy below moves no bytes itself. */
    for (size_t y = 0; y < p->Height; y++)
        memmove(dst + y * p->dstPitch, src + y * p->srcPitch, p->WidthInBytes);
    uint32_t sd = 0, dd = 0;
    uint8_t sk = mem_kind(src, &sd), dk = mem_kind(dst, &dd);
    struct node n = {.kind = NODE_COPY, .dst = dst, .src = src, .bytes = 0, .src_kind = sk, .dst_kind = dk};
    int sdev = is_device_kind(sk), ddev = is_device_kind(dk);
    n.copy_kind = sdev && ddev ? CUPTI_ACTIVITY_MEMCPY_KIND_DTOD
                  : sdev       ? CUPTI_ACTIVITY_MEMCPY_KIND_DTOH
                  : ddev       ? CUPTI_ACTIVITY_MEMCPY_KIND_HTOD
                               : CUPTI_ACTIVITY_MEMCPY_KIND_HTOH;
    uint8_t host = sdev ? dk : sk;
    uint64_t bytes = (uint64_t)p->WidthInBytes * p->Height, start, end;
    schedule(s, copy_cost(n.copy_kind, host, bytes), &start, &end);
    if (atomic_load(&g_tool)) {
        struct gpusim_op op = {.kind = GPUSIM_OP_MEMCPY, .start_ns = start, .end_ns = end,
                               .device = s->ctx->dev->info.ordinal, .context = s->ctx->id,
                               .stream = s->id, .bytes = bytes, .copy_kind = n.copy_kind,
                               .src_kind = sk, .dst_kind = dk, .async = (uint8_t)async};
        report_op(&op, call);
    }
    if (!async || (sdev && dk == CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE)) {
        sleep_until(end);
        waited_for_stream(s);
    }
    return CUDA_SUCCESS;
}

DRV(cuMemcpy2D, (const CUDA_MEMCPY2D *p), (p)) {
    ENTER(cuMemcpy2D, p);
    RETURN(copy2d(p, NULL, 0, &call_));
}

DRV(cuMemcpy2DAsync, (const CUDA_MEMCPY2D *p, CUstream st), (p, st)) {
    ENTER(cuMemcpy2DAsync, p, st);
    RETURN(copy2d(p, st, 1, &call_));
}

#define MEMSET_FN(name, vtype, elem, async, decl, args, stream)                        \
    DRV(name, decl, args) {                                                            \
        ENTER(name, CAT_ARGS args);                                                    \
        RETURN(memset_(d, (uint32_t)v, elem, n, stream, async, &call_));               \
    }
MEMSET_FN(cuMemsetD8, unsigned char, 1, 0, (CUdeviceptr d, unsigned char v, size_t n), (d, v, n), NULL)
MEMSET_FN(cuMemsetD16, unsigned short, 2, 0, (CUdeviceptr d, unsigned short v, size_t n), (d, v, n), NULL)
MEMSET_FN(cuMemsetD32, unsigned int, 4, 0, (CUdeviceptr d, unsigned int v, size_t n), (d, v, n), NULL)
MEMSET_FN(cuMemsetD8Async, unsigned char, 1, 1, (CUdeviceptr d, unsigned char v, size_t n, CUstream s), (d, v, n, s), s)
MEMSET_FN(cuMemsetD16Async, unsigned short, 2, 1, (CUdeviceptr d, unsigned short v, size_t n, CUstream s), (d, v, n, s), s)
MEMSET_FN(cuMemsetD32Async, unsigned int, 4, 1, (CUdeviceptr d, unsigned int v, size_t n, CUstream s), (d, v, n, s), s)

/* Streams --------------------------------------------------------------------- */

static CUresult create_stream(CUstream *ph, unsigned flags, int priority) {
    if (!ph)
        return CUDA_ERROR_INVALID_VALUE;
    struct ctx *c = current_ctx();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct stream *s = new_stream(c, flags, priority, 0);
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    report_resource(CUPTI_CBID_RESOURCE_STREAM_CREATED, c, s);
    *ph = (CUstream)s;
    return CUDA_SUCCESS;
}

DRV(cuStreamCreate, (CUstream *ph, unsigned int flags), (ph, flags)) {
    ENTER(cuStreamCreate, ph, flags);
    RETURN(create_stream(ph, flags, 0));
}

DRV(cuStreamCreateWithPriority, (CUstream *ph, unsigned int flags, int priority), (ph, flags, priority)) {
    ENTER(cuStreamCreateWithPriority, ph, flags, priority);
    RETURN(create_stream(ph, flags, priority));
}

DRV(cuStreamDestroy, (CUstream h), (h)) {
    ENTER(cuStreamDestroy, h);
    struct stream *s = resolve_stream(h);
    if (!s || s->legacy || h == CU_STREAM_PER_THREAD)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    report_resource(CUPTI_CBID_RESOURCE_STREAM_DESTROY_STARTING, s->ctx, s);
    /* Work already queued still runs; the handle dies now. Its tail stays in the
     * device's list so that the legacy stream keeps ordering after it. */
    s->magic = 0;
    RETURN(CUDA_SUCCESS);
}

DRV(cuStreamSynchronize, (CUstream h), (h)) {
    ENTER(cuStreamSynchronize, h);
    struct stream *s = resolve_stream(h);
    if (!s)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (s->capture)
        RETURN(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    uint64_t t0 = now_ns();
    sleep_until(stream_done_time(s));
    waited_for_stream(s);
    wait_host_fns();
    report_sync(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE, t0, &call_, s->ctx, s, NULL);
    RETURN(CUDA_SUCCESS);
}

DRV(cuStreamQuery, (CUstream h), (h)) {
    ENTER(cuStreamQuery, h);
    struct stream *s = resolve_stream(h);
    if (!s)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    RETURN(now_ns() >= stream_done_time(s) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY);
}

DRV(cuStreamGetPriority, (CUstream h, int *p), (h, p)) {
    ENTER(cuStreamGetPriority, h, p);
    struct stream *s = resolve_stream(h);
    if (!s || !p)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    *p = s->priority;
    RETURN(CUDA_SUCCESS);
}

DRV(cuStreamGetFlags, (CUstream h, unsigned int *f), (h, f)) {
    ENTER(cuStreamGetFlags, h, f);
    struct stream *s = resolve_stream(h);
    if (!s || !f)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    *f = s->flags;
    RETURN(CUDA_SUCCESS);
}

DRV(cuStreamGetId, (CUstream h, unsigned long long *id), (h, id)) {
    ENTER(cuStreamGetId, h, id);
    struct stream *s = resolve_stream(h);
    if (!s || !id)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    *id = s->id;
    RETURN(CUDA_SUCCESS);
}

/* Events ---------------------------------------------------------------------- */

static struct event *as_event(CUevent h) {
    struct event *e = (struct event *)h;
    return e && e->magic == MAGIC_EVENT ? e : NULL;
}

DRV(cuEventCreate, (CUevent *ph, unsigned int flags), (ph, flags)) {
    ENTER(cuEventCreate, ph, flags);
    if (!ph)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    struct ctx *c = current_ctx();
    if (!c)
        RETURN(CUDA_ERROR_INVALID_CONTEXT);
    struct event *e = calloc(1, sizeof *e);
    if (!e)
        RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    e->magic = MAGIC_EVENT;
    e->id = atomic_fetch_add(&g_next_event, 1);
    e->flags = flags;
    e->ctx = c;
    *ph = (CUevent)e;
    RETURN(CUDA_SUCCESS);
}

DRV(cuEventDestroy, (CUevent h), (h)) {
    ENTER(cuEventDestroy, h);
    struct event *e = as_event(h);
    if (!e)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    e->magic = 0;
    free(e);
    RETURN(CUDA_SUCCESS);
}

/* An event completes when the work queued before it on its stream is done, or at
 * the record call when the stream is idle. */
static CUresult event_record(CUevent h, CUstream hs) {
    struct event *e = as_event(h);
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    struct stream *s = resolve_stream(hs);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    if (s->capture) {
        /* Ordering inside a capture is the node order; a stream that waits on
         * this event joins the capture. */
        e->capture_id = s->capture->capture_id;
        return CUDA_SUCCESS;
    }
    e->capture_id = 0;
    pthread_mutex_lock(&s->ctx->dev->mu);
    uint64_t t = ready_time(s), now = now_ns();
    /* An event is work of no duration: on the device clock, it completes where
     * the next work on its stream could start. */
    e->vtime = device_start(s);
    pthread_mutex_unlock(&s->ctx->dev->mu);
    e->time = t > now ? t : now;
    e->recorded = 1;
    return CUDA_SUCCESS;
}

DRV(cuEventRecord, (CUevent h, CUstream s), (h, s)) {
    ENTER(cuEventRecord, h, s);
    RETURN(event_record(h, s));
}

DRV(cuEventRecordWithFlags, (CUevent h, CUstream s, unsigned int flags), (h, s, flags)) {
    ENTER(cuEventRecordWithFlags, h, s, flags);
    RETURN(event_record(h, s));
}

DRV(cuEventQuery, (CUevent h), (h)) {
    ENTER(cuEventQuery, h);
    struct event *e = as_event(h);
    if (!e)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    RETURN(!e->recorded || now_ns() >= e->time ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY);
}

DRV(cuEventSynchronize, (CUevent h), (h)) {
    ENTER(cuEventSynchronize, h);
    struct event *e = as_event(h);
    if (!e)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    uint64_t t0 = now_ns();
    if (e->recorded) {
        sleep_until(e->time);
        vhost_reaches(e->vtime);
    }
    wait_host_fns();
    report_sync(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE, t0, &call_, e->ctx, NULL, e);
    RETURN(CUDA_SUCCESS);
}

static CUresult elapsed(float *ms, CUevent a, CUevent b) {
    struct event *x = as_event(a), *y = as_event(b);
    if (!ms)
        return CUDA_ERROR_INVALID_VALUE;
    if (!x || !y)
        return CUDA_ERROR_INVALID_HANDLE;
    if ((x->flags | y->flags) & CU_EVENT_DISABLE_TIMING)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!x->recorded || !y->recorded)
        return CUDA_ERROR_INVALID_HANDLE;
    uint64_t now = now_ns();
    if (now < x->time || now < y->time)
        return CUDA_ERROR_NOT_READY;
    /* The device clock's difference: the same on every run. */
    *ms = (float)((double)((int64_t)y->vtime - (int64_t)x->vtime) / 1e6);
    return CUDA_SUCCESS;
}

DRV(cuEventElapsedTime, (float *ms, CUevent a, CUevent b), (ms, a, b)) {
    ENTER(cuEventElapsedTime, ms, a, b);
    RETURN(elapsed(ms, a, b));
}

DRV(cuStreamWaitEvent, (CUstream hs, CUevent h, unsigned int flags), (hs, h, flags)) {
    ENTER(cuStreamWaitEvent, hs, h, flags);
    struct stream *s = resolve_stream(hs);
    struct event *e = as_event(h);
    if (!s || !e)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    uint64_t t0 = now_ns();
    /* The capture the event was recorded in, if it is still going on: the
     * streams capturing into it hold its graph. */
    if (e->capture_id && !s->capture && !s->legacy) {
        struct graph *g = NULL;
        pthread_mutex_lock(&s->ctx->dev->mu);
        for (struct stream *x = s->ctx->dev->streams; x && !g; x = x->next)
            if (x->magic == MAGIC_STREAM && x->capture && x->capture->capture_id == e->capture_id)
                g = x->capture;
        pthread_mutex_unlock(&s->ctx->dev->mu);
        if (g) {
            s->capture = g;
            s->capture_origin = 0;
        }
    }
    if (e->recorded && !s->capture) {
        pthread_mutex_lock(&s->ctx->dev->mu);
        if (e->time > s->tail)
            s->tail = e->time;
        if (e->vtime > s->vtail)
            s->vtail = e->vtime;
        pthread_mutex_unlock(&s->ctx->dev->mu);
    }
    report_sync(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT, t0, &call_, s->ctx, s, e);
    RETURN(CUDA_SUCCESS);
}

/* Modules and functions ------------------------------------------------------------ */

/* The names after each `.entry` of a PTX text. */
static int ptx_entries(struct module *m, const char *ptx) {
    for (const char *p = ptx; (p = strstr(p, ".entry")) != NULL;) {
        p += 6;
        if (!isspace((unsigned char)*p))
            continue;
        while (isspace((unsigned char)*p))
            p++;
        const char *e = p;
        while (*e && (isalnum((unsigned char)*e) || *e == '_' || *e == '$' || *e == '.'))
            e++;
        if (e == p)
            continue;
        char name[512];
        size_t len = (size_t)(e - p) < sizeof name - 1 ? (size_t)(e - p) : sizeof name - 1;
        memcpy(name, p, len);
        name[len] = 0;
        struct kernel **ks = realloc(m->kernels, (size_t)(m->nkernels + 1) * sizeof *ks);
        if (!ks)
            return -1;
        m->kernels = ks;
        pthread_mutex_lock(&g_kernel_mu);
        struct kernel *k = new_kernel(name, NULL, m);
        pthread_mutex_unlock(&g_kernel_mu);
        if (!k)
            return -1;
        m->kernels[m->nkernels++] = k;
        p = e;
    }
    return 0;
}

/* A module (or library) from an image; `c` may be NULL for a library. */
static CUresult load_module_in(CUmodule *pm, const void *image, struct ctx *c) {
    if (!pm || !image)
        return CUDA_ERROR_INVALID_VALUE;
    struct module *m = calloc(1, sizeof *m);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    m->magic = MAGIC_MODULE;
    m->ctx = c;
    const unsigned char *b = image;
    /* ELF cubins and fatbins are not parsed: any function name resolves. */
    if ((b[0] == 0x7f && b[1] == 'E' && b[2] == 'L' && b[3] == 'F') ||
        (b[0] == 0x50 && b[1] == 0xed && b[2] == 0x55 && b[3] == 0xba) ||
        (b[0] == 0x46 && b[1] == 0x24 && b[2] == 0x6b && b[3] == 0x46))
        m->any_name = 1;
    else if (ptx_entries(m, image)) {
        free(m->kernels);
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pm = (CUmodule)m;
    return CUDA_SUCCESS;
}

static CUresult load_module(CUmodule *pm, const void *image) {
    struct ctx *c = current_ctx();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    return load_module_in(pm, image, c);
}

static CUresult load_module_any(CUmodule *pm, const void *image) {
    return load_module_in(pm, image, current_ctx());
}

DRV(cuModuleLoadData, (CUmodule *pm, const void *image), (pm, image)) {
    ENTER(cuModuleLoadData, pm, image);
    RETURN(load_module(pm, image));
}

DRV(cuModuleLoadDataEx, (CUmodule *pm, const void *image, unsigned int n, CUjit_option *o, void **v),
    (pm, image, n, o, v)) {
    ENTER(cuModuleLoadDataEx, pm, image, n, o, v);
    RETURN(load_module(pm, image));
}

DRV(cuModuleLoad, (CUmodule *pm, const char *path), (pm, path)) {
    ENTER(cuModuleLoad, pm, path);
    if (!path)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    FILE *f = fopen(path, "rb");
    if (!f)
        RETURN(CUDA_ERROR_FILE_NOT_FOUND);
    char *text = NULL;
    size_t len = 0, cap = 0, r;
    char chunk[65536];
    while ((r = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (len + r + 1 > cap) {
            cap = (len + r + 1) * 2;
            char *t = realloc(text, cap);
            if (!t)
                break;
            text = t;
        }
        memcpy(text + len, chunk, r);
        len += r;
    }
    fclose(f);
    if (!text)
        RETURN(CUDA_ERROR_INVALID_IMAGE);
    text[len] = 0;
    CUresult r2 = load_module(pm, text);
    free(text);
    RETURN(r2);
}

DRV(cuModuleUnload, (CUmodule h), (h)) {
    ENTER(cuModuleUnload, h);
    struct module *m = (struct module *)h;
    if (!m || m->magic != MAGIC_MODULE)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    /* Kernels stay: records delivered later still point to their names. */
    m->magic = 0;
    RETURN(CUDA_SUCCESS);
}

static CUresult module_function(CUfunction *pf, CUmodule h, const char *name) {
    struct module *m = (struct module *)h;
    if (!pf || !name)
        return CUDA_ERROR_INVALID_VALUE;
    if (!m || m->magic != MAGIC_MODULE)
        return CUDA_ERROR_INVALID_HANDLE;
    for (int i = 0; i < m->nkernels; i++)
        if (strcmp(m->kernels[i]->name, name) == 0) {
            *pf = (CUfunction)m->kernels[i];
            return CUDA_SUCCESS;
        }
    if (!m->any_name)
        return CUDA_ERROR_NOT_FOUND;
    struct kernel **ks = realloc(m->kernels, (size_t)(m->nkernels + 1) * sizeof *ks);
    if (!ks)
        return CUDA_ERROR_OUT_OF_MEMORY;
    m->kernels = ks;
    pthread_mutex_lock(&g_kernel_mu);
    struct kernel *k = new_kernel(name, NULL, m);
    pthread_mutex_unlock(&g_kernel_mu);
    if (!k)
        return CUDA_ERROR_OUT_OF_MEMORY;
    m->kernels[m->nkernels++] = k;
    *pf = (CUfunction)k;
    return CUDA_SUCCESS;
}

DRV(cuModuleGetFunction, (CUfunction *pf, CUmodule h, const char *name), (pf, h, name)) {
    ENTER(cuModuleGetFunction, pf, h, name);
    RETURN(module_function(pf, h, name));
}

DRV(cuModuleGetGlobal, (CUdeviceptr *dp, size_t *bytes, CUmodule h, const char *name), (dp, bytes, h, name)) {
    ENTER(cuModuleGetGlobal, dp, bytes, h, name);
    RETURN(CUDA_ERROR_NOT_FOUND);
}

DRV(cuFuncGetAttribute, (int *v, CUfunction_attribute a, CUfunction f), (v, a, f)) {
    ENTER(cuFuncGetAttribute, v, a, f);
    if (!v)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!as_kernel(f))
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION: *v = 90; break;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *v = 90; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *v = as_kernel(f)->max_dynamic_shared; break;
    default: *v = 0; break;
    }
    RETURN(CUDA_SUCCESS);
}

DRV(cuFuncSetAttribute, (CUfunction f, CUfunction_attribute a, int v), (f, a, v)) {
    ENTER(cuFuncSetAttribute, f, a, v);
    struct kernel *k = as_kernel(f);
    if (!k)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (a == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
        k->max_dynamic_shared = v;
    RETURN(CUDA_SUCCESS);
}

DRV(cuFuncSetCacheConfig, (CUfunction f, CUfunc_cache c), (f, c)) {
    ENTER(cuFuncSetCacheConfig, f, c);
    RETURN(as_kernel(f) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

DRV(cuFuncGetName, (const char **name, CUfunction f), (name, f)) {
    ENTER(cuFuncGetName, name, f);
    struct kernel *k = as_kernel(f);
    if (!name)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!k)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    *name = k->name;
    RETURN(CUDA_SUCCESS);
}

/* Launches -------------------------------------------------------------------------- */

DRV(cuLaunchKernel,
    (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
     unsigned int by, unsigned int bz, unsigned int shared, CUstream s, void **params, void **extra),
    (f, gx, gy, gz, bx, by, bz, shared, s, params, extra)) {
    ENTER_SYM(cuLaunchKernel, gpusim_function_name(f), f, gx, gy, gz, bx, by, bz, shared, s,
              params, extra);
    uint32_t grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
    RETURN(launch(f, grid, block, shared, s, CUPTI_ACTIVITY_LAUNCH_TYPE_REGULAR, &call_));
}

DRV(cuLaunchCooperativeKernel,
    (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
     unsigned int by, unsigned int bz, unsigned int shared, CUstream s, void **params),
    (f, gx, gy, gz, bx, by, bz, shared, s, params)) {
    ENTER_SYM(cuLaunchCooperativeKernel, gpusim_function_name(f), f, gx, gy, gz, bx, by, bz,
              shared, s, params);
    uint32_t grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
    RETURN(launch(f, grid, block, shared, s, CUPTI_ACTIVITY_LAUNCH_TYPE_COOPERATIVE_SINGLE_DEVICE,
                  &call_));
}

DRV(cuLaunchKernelEx, (const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra),
    (cfg, f, params, extra)) {
    ENTER_SYM(cuLaunchKernelEx, gpusim_function_name(f), cfg, f, params, extra);
    if (!cfg)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    uint8_t type = CUPTI_ACTIVITY_LAUNCH_TYPE_REGULAR;
    for (unsigned i = 0; i < cfg->numAttrs; i++)
        if (cfg->attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && cfg->attrs[i].value.cooperative)
            type = CUPTI_ACTIVITY_LAUNCH_TYPE_COOPERATIVE_SINGLE_DEVICE;
    uint32_t grid[3] = {cfg->gridDimX, cfg->gridDimY, cfg->gridDimZ};
    uint32_t block[3] = {cfg->blockDimX, cfg->blockDimY, cfg->blockDimZ};
    RETURN(launch(f, grid, block, cfg->sharedMemBytes, cfg->hStream, type, &call_));
}

/* Graphs ---------------------------------------------------------------------------- */

static struct graph *new_graph(void) {
    struct graph *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->magic = MAGIC_GRAPH;
    g->id = atomic_fetch_add(&g_next_graph, 1);
    return g;
}

DRV(cuGraphCreate, (CUgraph *pg, unsigned int flags), (pg, flags)) {
    ENTER(cuGraphCreate, pg, flags);
    if (!pg || flags)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    struct graph *g = new_graph();
    if (!g)
        RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    *pg = (CUgraph)g;
    RETURN(CUDA_SUCCESS);
}

/* A user-built kernel node. Dependencies must be nodes of the same graph; since a
 * node can only depend on nodes made before it, running the nodes in the order
 * they were added (as every launch here does) honours them. The node is
 * reported made (GRAPHNODE_CREATED) from inside this call, as CUPTI does. */
DRV(cuGraphAddKernelNode, (CUgraphNode *pn, CUgraph hg, const CUgraphNode *deps, size_t ndeps,
                           const CUDA_KERNEL_NODE_PARAMS *p),
    (pn, hg, deps, ndeps, p)) {
    ENTER_SYM(cuGraphAddKernelNode, p ? gpusim_function_name(p->func) : NULL, pn, hg, deps, ndeps,
              p);
    struct graph *g = (struct graph *)hg;
    if (!pn || !p || (ndeps && !deps))
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!g || g->magic != MAGIC_GRAPH)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (!current_ctx())
        RETURN(CUDA_ERROR_INVALID_CONTEXT);
    for (size_t i = 0; i < ndeps; i++) {
        int found = 0;
        for (size_t j = 0; j < g->n && !found; j++)
            found = (CUgraphNode)g->nodes[j] == deps[i];
        if (!found)
            RETURN(CUDA_ERROR_INVALID_VALUE);
    }
    /* A NULL func with a CUkernel: the simulated driver's CUkernel and CUfunction
     * are the same handle. */
    CUfunction f = p->func ? p->func : (CUfunction)p->kern;
    uint32_t grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ};
    uint32_t block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
    struct node n;
    CUresult r =
        kernel_node(f, grid, block, p->sharedMemBytes, CUPTI_ACTIVITY_LAUNCH_TYPE_REGULAR, &n);
    if (r != CUDA_SUCCESS)
        RETURN(r);
    struct node *made = graph_add(g, &n);
    if (!made)
        RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    report_graph_node(CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, g, made, NULL, NULL, NULL);
    *pn = (CUgraphNode)made;
    RETURN(CUDA_SUCCESS);
}

static _Atomic uint64_t g_next_capture = 1;
static __thread CUstreamCaptureMode tls_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

static CUresult begin_capture(struct stream *s, struct graph *into) {
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    if (s->legacy)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (s->capture)
        return CUDA_ERROR_ILLEGAL_STATE;
    struct graph *g = into ? into : new_graph();
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    g->capture_id = atomic_fetch_add(&g_next_capture, 1);
    s->capture = g;
    s->capture_origin = 1;
    return CUDA_SUCCESS;
}

/* User-built nodes other than kernels: checks the dependencies as for kernel
 * nodes, appends a copy of `n` and reports it made. */
static CUresult add_node(CUgraphNode *pn, CUgraph hg, const CUgraphNode *deps, size_t ndeps,
                         const struct node *n) {
    struct graph *g = (struct graph *)hg;
    if (!pn || (ndeps && !deps))
        return CUDA_ERROR_INVALID_VALUE;
    if (!g || g->magic != MAGIC_GRAPH)
        return CUDA_ERROR_INVALID_HANDLE;
    for (size_t i = 0; i < ndeps; i++) {
        int found = 0;
        for (size_t j = 0; j < g->n && !found; j++)
            found = (CUgraphNode)g->nodes[j] == deps[i];
        if (!found)
            return CUDA_ERROR_INVALID_VALUE;
    }
    struct node *made = graph_add(g, n);
    if (!made)
        return CUDA_ERROR_OUT_OF_MEMORY;
    report_graph_node(CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, g, made, NULL, NULL, NULL);
    *pn = (CUgraphNode)made;
    return CUDA_SUCCESS;
}

DRV(cuGraphAddHostNode, (CUgraphNode *pn, CUgraph hg, const CUgraphNode *deps, size_t ndeps, const CUDA_HOST_NODE_PARAMS *p),
    (pn, hg, deps, ndeps, p)) {
    ENTER(cuGraphAddHostNode, pn, hg, deps, ndeps, p);
    if (!p || !p->fn)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    struct node n = {.kind = NODE_HOST, .host_fn = p->fn, .host_data = p->userData};
    RETURN(add_node(pn, hg, deps, ndeps, &n));
}

/* A copy node; only copies whose bytes are contiguous at both ends (the 1D
 * form, or rows whose pitch is their width). */
DRV(cuGraphAddMemcpyNode, (CUgraphNode *pn, CUgraph hg, const CUgraphNode *deps, size_t ndeps, const CUDA_MEMCPY3D *p, CUcontext c),
    (pn, hg, deps, ndeps, p, c)) {
    ENTER(cuGraphAddMemcpyNode, pn, hg, deps, ndeps, p, c);
    if (!p)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (p->srcMemoryType == CU_MEMORYTYPE_ARRAY || p->dstMemoryType == CU_MEMORYTYPE_ARRAY)
        RETURN(CUDA_ERROR_NOT_SUPPORTED);
    size_t h = p->Height ? p->Height : 1, d = p->Depth ? p->Depth : 1;
    int rows = h * d > 1;
    if (rows && ((p->srcPitch && p->srcPitch != p->WidthInBytes) || (p->dstPitch && p->dstPitch != p->WidthInBytes)))
        RETURN(CUDA_ERROR_NOT_SUPPORTED);
    const char *src = p->srcMemoryType == CU_MEMORYTYPE_HOST ? p->srcHost : (const char *)p->srcDevice;
    char *dst = p->dstMemoryType == CU_MEMORYTYPE_HOST ? p->dstHost : (char *)p->dstDevice;
    size_t sp = p->srcPitch ? p->srcPitch : p->WidthInBytes, dp = p->dstPitch ? p->dstPitch : p->WidthInBytes;
    src += p->srcXInBytes + (p->srcY + p->srcZ * (p->srcHeight ? p->srcHeight : h)) * sp;
    dst += p->dstXInBytes + (p->dstY + p->dstZ * (p->dstHeight ? p->dstHeight : h)) * dp;
    uint32_t sd = 0, dd = 0;
    uint8_t sk = mem_kind(src, &sd), dk = mem_kind(dst, &dd);
    struct node n = {.kind = NODE_COPY, .dst = dst, .src = src, .bytes = p->WidthInBytes * h * d,
                     .src_kind = sk, .dst_kind = dk};
    int sdev = is_device_kind(sk), ddev = is_device_kind(dk);
    n.copy_kind = sdev && ddev ? (sd != dd ? CUPTI_ACTIVITY_MEMCPY_KIND_PTOP : CUPTI_ACTIVITY_MEMCPY_KIND_DTOD)
                  : sdev       ? CUPTI_ACTIVITY_MEMCPY_KIND_DTOH
                  : ddev       ? CUPTI_ACTIVITY_MEMCPY_KIND_HTOD
                               : CUPTI_ACTIVITY_MEMCPY_KIND_HTOH;
    RETURN(add_node(pn, hg, deps, ndeps, &n));
}

DRV(cuGraphAddMemsetNode, (CUgraphNode *pn, CUgraph hg, const CUgraphNode *deps, size_t ndeps, const CUDA_MEMSET_NODE_PARAMS *p, CUcontext c),
    (pn, hg, deps, ndeps, p, c)) {
    ENTER(cuGraphAddMemsetNode, pn, hg, deps, ndeps, p, c);
    if (!p || !p->dst || (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4))
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (p->height > 1 && p->pitch != p->width * p->elementSize)
        RETURN(CUDA_ERROR_NOT_SUPPORTED);
    struct node n = {.kind = NODE_MEMSET, .dst = (void *)p->dst,
                     .bytes = p->width * p->elementSize * (p->height ? p->height : 1),
                     .value = p->value, .elem = p->elementSize};
    RETURN(add_node(pn, hg, deps, ndeps, &n));
}

/* An allocation node: the memory is allocated when the node is made, and lives
 * until the process ends (the simulation does not reuse graph memory). */
DRV(cuGraphAddMemAllocNode, (CUgraphNode *pn, CUgraph hg, const CUgraphNode *deps, size_t ndeps, CUDA_MEM_ALLOC_NODE_PARAMS *p),
    (pn, hg, deps, ndeps, p)) {
    ENTER(cuGraphAddMemAllocNode, pn, hg, deps, ndeps, p);
    if (!p || !p->bytesize || p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        BAD_DEVICE(p->poolProps.location.id))
        RETURN(CUDA_ERROR_INVALID_VALUE);
    struct ctx *saved = tls_ctx;
    struct device *dev = &g_dev[p->poolProps.location.id];
    tls_ctx = dev->primary.live ? &dev->primary : tls_ctx;
    CUdeviceptr m = 0;
    CUresult r = device_alloc(&m, p->bytesize, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE);
    tls_ctx = saved;
    if (r != CUDA_SUCCESS)
        RETURN(r);
    struct node n = {.kind = NODE_MEM_ALLOC, .dst = (void *)m, .bytes = p->bytesize};
    r = add_node(pn, hg, deps, ndeps, &n);
    if (r != CUDA_SUCCESS) {
        device_free(m);
        RETURN(r);
    }
    p->dptr = m;
    RETURN(CUDA_SUCCESS);
}

DRV(cuGraphAddMemFreeNode, (CUgraphNode *pn, CUgraph hg, const CUgraphNode *deps, size_t ndeps, CUdeviceptr dptr),
    (pn, hg, deps, ndeps, dptr)) {
    ENTER(cuGraphAddMemFreeNode, pn, hg, deps, ndeps, dptr);
    struct alloc a;
    if (!dptr || !mem_find((const void *)dptr, &a) || !is_device_kind(a.kind))
        RETURN(CUDA_ERROR_INVALID_VALUE);
    struct node n = {.kind = NODE_MEM_FREE, .dst = (void *)dptr};
    RETURN(add_node(pn, hg, deps, ndeps, &n));
}

/* A copy of a graph: its nodes copied in order (the dependencies are the order). */
DRV(cuGraphClone, (CUgraph *pg, CUgraph hg), (pg, hg)) {
    ENTER(cuGraphClone, pg, hg);
    struct graph *g = (struct graph *)hg;
    if (!pg)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!g || g->magic != MAGIC_GRAPH)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    struct graph *c = new_graph();
    if (!c)
        RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    for (size_t i = 0; i < g->n; i++) {
        struct node *made = graph_add(c, g->nodes[i]);
        if (!made) {
            graph_free_nodes(c);
            free(c);
            RETURN(CUDA_ERROR_OUT_OF_MEMORY);
        }
        report_graph_node(CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, c, made, NULL, NULL, NULL);
    }
    *pg = (CUgraph)c;
    RETURN(CUDA_SUCCESS);
}

DRV(cuStreamBeginCapture, (CUstream hs, CUstreamCaptureMode mode), (hs, mode)) {
    ENTER(cuStreamBeginCapture, hs, mode);
    RETURN(begin_capture(resolve_stream(hs), NULL));
}

DRV(cuStreamBeginCaptureToGraph,
    (CUstream hs, CUgraph hg, const CUgraphNode *deps, const CUgraphEdgeData *edges, size_t ndeps,
     CUstreamCaptureMode mode),
    (hs, hg, deps, edges, ndeps, mode)) {
    ENTER(cuStreamBeginCaptureToGraph, hs, hg, deps, edges, ndeps, mode);
    struct graph *g = (struct graph *)hg;
    if (!g || g->magic != MAGIC_GRAPH)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    RETURN(begin_capture(resolve_stream(hs), g));
}

/* Ends the capture that `s` began: every stream that joined it leaves it. */
DRV(cuStreamEndCapture, (CUstream hs, CUgraph *pg), (hs, pg)) {
    ENTER(cuStreamEndCapture, hs, pg);
    struct stream *s = resolve_stream(hs);
    if (!s || !pg)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!s->capture)
        RETURN(CUDA_ERROR_ILLEGAL_STATE);
    if (!s->capture_origin)
        RETURN(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
    struct graph *g = s->capture;
    struct device *d = s->ctx->dev;
    pthread_mutex_lock(&d->mu);
    for (struct stream *x = d->streams; x; x = x->next)
        if (x->capture == g)
            x->capture = NULL;
    pthread_mutex_unlock(&d->mu);
    s->capture = NULL;
    g->capture_id = 0;
    *pg = (CUgraph)g;
    RETURN(CUDA_SUCCESS);
}

DRV(cuStreamIsCapturing, (CUstream hs, CUstreamCaptureStatus *st), (hs, st)) {
    ENTER(cuStreamIsCapturing, hs, st);
    struct stream *s = resolve_stream(hs);
    if (!s || !st)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    *st = s->capture ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    RETURN(CUDA_SUCCESS);
}

/* The capture's dependencies are the last captured node: the simulation keeps a
 * capture as one chain in node order. */
DRV(cuStreamGetCaptureInfo,
    (CUstream hs, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *graph,
     const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps),
    (hs, st, id, graph, deps, edges, ndeps)) {
    ENTER(cuStreamGetCaptureInfo, hs, st, id, graph, deps, edges, ndeps);
    struct stream *s = resolve_stream(hs);
    if (!s)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (!st)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    struct graph *g = s->capture;
    *st = g ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    if (id)
        *id = g ? g->capture_id : 0;
    if (graph)
        *graph = (CUgraph)g;
    if (deps)
        *deps = g && g->n ? (const CUgraphNode *)&g->nodes[g->n - 1] : NULL;
    if (edges)
        *edges = NULL;
    if (ndeps)
        *ndeps = g && g->n ? 1 : 0;
    RETURN(CUDA_SUCCESS);
}

DRV(cuStreamUpdateCaptureDependencies,
    (CUstream hs, CUgraphNode *deps, const CUgraphEdgeData *edges, size_t ndeps, unsigned int flags),
    (hs, deps, edges, ndeps, flags)) {
    ENTER(cuStreamUpdateCaptureDependencies, hs, deps, edges, ndeps, flags);
    struct stream *s = resolve_stream(hs);
    if (!s)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    RETURN(s->capture ? CUDA_SUCCESS : CUDA_ERROR_ILLEGAL_STATE);
}

DRV(cuThreadExchangeStreamCaptureMode, (CUstreamCaptureMode *mode), (mode)) {
    ENTER(cuThreadExchangeStreamCaptureMode, mode);
    if (!mode)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    CUstreamCaptureMode old = tls_capture_mode;
    tls_capture_mode = *mode;
    *mode = old;
    RETURN(CUDA_SUCCESS);
}

DRV(cuGraphGetNodes, (CUgraph hg, CUgraphNode *nodes, size_t *n), (hg, nodes, n)) {
    ENTER(cuGraphGetNodes, hg, nodes, n);
    struct graph *g = (struct graph *)hg;
    if (!g || g->magic != MAGIC_GRAPH)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!n)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (nodes) {
        size_t k = *n < g->n ? *n : g->n;
        for (size_t i = 0; i < k; i++)
            nodes[i] = (CUgraphNode)g->nodes[i];
        for (size_t i = k; i < *n; i++)
            nodes[i] = NULL;
        *n = k;
    } else {
        *n = g->n;
    }
    RETURN(CUDA_SUCCESS);
}

/* The graph that holds node `h`, and its index there. */
static struct graph *node_graph(struct node *h, size_t *index);

/* A node depends on the node before it: the simulation keeps one chain. */
DRV(cuGraphNodeGetDependencies, (CUgraphNode hn, CUgraphNode *deps, CUgraphEdgeData *edges, size_t *n),
    (hn, deps, edges, n)) {
    ENTER(cuGraphNodeGetDependencies, hn, deps, edges, n);
    struct node *node = (struct node *)hn;
    size_t i = 0;
    struct graph *g = node && node->magic == MAGIC_NODE ? node_graph(node, &i) : NULL;
    if (!g || !n)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    size_t have = i > 0 ? 1 : 0;
    if (deps) {
        if (*n >= 1 && have) {
            deps[0] = (CUgraphNode)g->nodes[i - 1];
            if (edges)
                memset(&edges[0], 0, sizeof edges[0]);
        }
        *n = *n < have ? *n : have;
    } else {
        *n = have;
    }
    RETURN(CUDA_SUCCESS);
}

/* Copies every node of `hg` into a new instantiated graph: for each, the copy is
 * reported made (GRAPHNODE_CREATED), then copied from its original
 * (GRAPHNODE_CLONED), as CUPTI reports instantiation. */
static CUresult instantiate(CUgraphExec *pe, CUgraph hg) {
    struct graph *g = (struct graph *)hg;
    if (!pe)
        return CUDA_ERROR_INVALID_VALUE;
    if (!g || g->magic != MAGIC_GRAPH)
        return CUDA_ERROR_INVALID_HANDLE;
    struct graph_exec *x = calloc(1, sizeof *x);
    if (!x)
        return CUDA_ERROR_OUT_OF_MEMORY;
    x->magic = MAGIC_EXEC;
    x->id = atomic_fetch_add(&g_next_graph, 1);
    x->graph.magic = MAGIC_GRAPH;
    x->graph.id = x->id;
    for (size_t i = 0; i < g->n; i++) {
        struct node *copy = graph_add(&x->graph, g->nodes[i]);
        if (!copy) {
            graph_free_nodes(&x->graph);
            free(x);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        report_graph_node(CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, &x->graph, copy, NULL, NULL, NULL);
        report_graph_node(CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED, &x->graph, copy, g, g->nodes[i], x);
    }
    *pe = (CUgraphExec)x;
    return CUDA_SUCCESS;
}

DRV(cuGraphInstantiateWithFlags, (CUgraphExec *pe, CUgraph g, unsigned long long flags), (pe, g, flags)) {
    ENTER(cuGraphInstantiateWithFlags, pe, g, flags);
    RETURN(instantiate(pe, g));
}

/* The nodes run in the order they were captured or added, on the launch stream, each charged to the
 * graph launch's correlation id. */
DRV(cuGraphLaunch, (CUgraphExec he, CUstream hs), (he, hs)) {
    ENTER(cuGraphLaunch, he, hs);
    struct graph_exec *x = (struct graph_exec *)he;
    if (!x || x->magic != MAGIC_EXEC)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    struct stream *s = resolve_stream(hs);
    if (!s)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    for (size_t i = 0; i < x->graph.n; i++) {
        const struct node *n = x->graph.nodes[i];
        if (n->kind == NODE_KERNEL)
            run_kernel(s, n, &call_, x->id, n->id);
        else if (n->kind == NODE_COPY)
            run_copy(s, n, &call_, x->id, n->id, 1);
        else if (n->kind == NODE_HOST)
            run_host(s, n);
        else if (n->kind == NODE_MEMSET)
            run_memset(s, n, &call_, x->id, n->id, 1);
        /* Memory nodes are no work: the memory lives from the node's making. */
    }
    RETURN(CUDA_SUCCESS);
}

DRV(cuGraphUpload, (CUgraphExec he, CUstream hs), (he, hs)) {
    ENTER(cuGraphUpload, he, hs);
    struct graph_exec *x = (struct graph_exec *)he;
    RETURN(x && x->magic == MAGIC_EXEC ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

DRV(cuGraphExecDestroy, (CUgraphExec he), (he)) {
    ENTER(cuGraphExecDestroy, he);
    struct graph_exec *x = (struct graph_exec *)he;
    if (!x || x->magic != MAGIC_EXEC)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    x->magic = 0;
    x->graph.magic = 0;
    graph_free_nodes(&x->graph);
    free(x);
    RETURN(CUDA_SUCCESS);
}

DRV(cuGraphDestroy, (CUgraph hg), (hg)) {
    ENTER(cuGraphDestroy, hg);
    struct graph *g = (struct graph *)hg;
    if (!g || g->magic != MAGIC_GRAPH)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    graph_release_objects(g);
    g->magic = 0;
    graph_free_nodes(g);
    free(g);
    RETURN(CUDA_SUCCESS);
}

/* More of the driver API, for PyTorch, Triton and NVIDIA's samples -------------- */

static struct graph *node_graph(struct node *h, size_t *index) {
    struct graph *g = h->graph;
    if (!g || g->magic != MAGIC_GRAPH)
        return NULL;
    for (size_t i = 0; i < g->n; i++)
        if (g->nodes[i] == h) {
            *index = i;
            return g;
        }
    return NULL;
}

DRV(cuMemGetAddressRange, (CUdeviceptr *base, size_t *size, CUdeviceptr p), (base, size, p)) {
    ENTER(cuMemGetAddressRange, base, size, p);
    struct alloc a;
    if (!mem_find((const void *)p, &a) || !is_device_kind(a.kind))
        RETURN(CUDA_ERROR_NOT_FOUND);
    if (base)
        *base = (CUdeviceptr)a.base;
    if (size)
        *size = a.size;
    RETURN(CUDA_SUCCESS);
}

/* One attribute of the memory at p; CUDA_ERROR_INVALID_VALUE for memory CUDA
 * does not know, as the driver documents. */
static CUresult pointer_attribute(void *data, CUpointer_attribute attr, CUdeviceptr p) {
    struct alloc a;
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    if (!mem_find((const void *)p, &a))
        return CUDA_ERROR_INVALID_VALUE;
    int dev = is_device_kind(a.kind);
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = a.device < GPUSIM_DEVICES && g_dev[a.device].primary.live
                                 ? (CUcontext)&g_dev[a.device].primary
                                 : (CUcontext)current_ctx();
        break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned *)data = dev ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: *(void **)data = (void *)p; break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *(unsigned *)data = a.kind == CUPTI_ACTIVITY_MEMORY_KIND_MANAGED;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = (int)a.device; break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data = (CUdeviceptr)a.base; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = a.size; break;
    case CU_POINTER_ATTRIBUTE_MAPPED: *(unsigned *)data = 1; break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: *(unsigned long long *)data = (unsigned long long)a.base; break;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: *(unsigned *)data = 1; break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: *(unsigned *)data = 0; break;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: *(unsigned long long *)data = 0; break;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
        *(unsigned *)data = CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
        break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: *(void **)data = NULL; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

DRV(cuPointerGetAttribute, (void *data, CUpointer_attribute attr, CUdeviceptr p), (data, attr, p)) {
    ENTER(cuPointerGetAttribute, data, attr, p);
    RETURN(pointer_attribute(data, attr, p));
}

/* As documented: memory CUDA does not know gets zeroes (a NULL context, memory
 * type 0) and success. */
DRV(cuPointerGetAttributes, (unsigned int n, CUpointer_attribute *attrs, void **data, CUdeviceptr p),
    (n, attrs, data, p)) {
    ENTER(cuPointerGetAttributes, n, attrs, data, p);
    if (!attrs || !data)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    struct alloc a;
    int known = mem_find((const void *)p, &a);
    for (unsigned i = 0; i < n; i++) {
        if (!data[i])
            continue;
        if (known && pointer_attribute(data[i], attrs[i], p) == CUDA_SUCCESS)
            continue;
        switch (attrs[i]) {
        case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data[i] = -2; break;
        case CU_POINTER_ATTRIBUTE_CONTEXT:
        case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: *(void **)data[i] = NULL; break;
        case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: *(unsigned long long *)data[i] = 0; break;
        case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data[i] = 0; break;
        default: *(unsigned *)data[i] = 0; break;
        }
    }
    RETURN(CUDA_SUCCESS);
}

/* Virtual memory management (PyTorch's expandable segments): a physical
 * allocation counts against its device's memory; reserved address ranges are
 * lazily backed mappings; mapping makes a range device memory of the physical
 * allocation's device. */
#define MAGIC_PHYS 0x70687973u
#define VMM_GRANULARITY (2u << 20)

struct phys {
    uint32_t magic;
    int refs;
    size_t size;
    uint32_t device;
    CUmemAllocationProp prop;
};

DRV(cuMemGetAllocationGranularity, (size_t *g, const CUmemAllocationProp *prop, CUmemAllocationGranularity_flags option),
    (g, prop, option)) {
    ENTER(cuMemGetAllocationGranularity, g, prop, option);
    if (!g || !prop)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    *g = VMM_GRANULARITY;
    RETURN(CUDA_SUCCESS);
}

DRV(cuMemCreate, (CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop, unsigned long long flags),
    (h, size, prop, flags)) {
    ENTER(cuMemCreate, h, size, prop, flags);
    if (!h || !prop || !size || size % VMM_GRANULARITY)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        BAD_DEVICE(prop->location.id))
        RETURN(CUDA_ERROR_INVALID_DEVICE);
    /* Fabric handles need an NVLink fabric manager, which no simulated device has. */
    if (prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_FABRIC)
        RETURN(CUDA_ERROR_NOT_SUPPORTED);
    struct device *d = &g_dev[prop->location.id];
    pthread_mutex_lock(&g_mem_mu);
    int fits = size <= d->info.global_memory - d->allocated;
    if (fits)
        d->allocated += size;
    pthread_mutex_unlock(&g_mem_mu);
    if (!fits)
        RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    struct phys *p = calloc(1, sizeof *p);
    if (!p) {
        pthread_mutex_lock(&g_mem_mu);
        d->allocated -= size;
        pthread_mutex_unlock(&g_mem_mu);
        RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    }
    *p = (struct phys){MAGIC_PHYS, 1, size, (uint32_t)prop->location.id, *prop};
    *h = (CUmemGenericAllocationHandle)(uintptr_t)p;
    RETURN(CUDA_SUCCESS);
}

static struct phys *as_phys(CUmemGenericAllocationHandle h) {
    struct phys *p = (struct phys *)(uintptr_t)h;
    return p && p->magic == MAGIC_PHYS ? p : NULL;
}

static void phys_release(struct phys *p) {
    pthread_mutex_lock(&g_mem_mu);
    int last = --p->refs == 0;
    if (last)
        g_dev[p->device].allocated -= p->size;
    pthread_mutex_unlock(&g_mem_mu);
    if (last) {
        p->magic = 0;
        free(p);
    }
}

DRV(cuMemRelease, (CUmemGenericAllocationHandle h), (h)) {
    ENTER(cuMemRelease, h);
    struct phys *p = as_phys(h);
    if (!p)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    phys_release(p);
    RETURN(CUDA_SUCCESS);
}

DRV(cuMemAddressReserve, (CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr, unsigned long long flags),
    (ptr, size, align, addr, flags)) {
    ENTER(cuMemAddressReserve, ptr, size, align, addr, flags);
    if (!ptr || !size || size % VMM_GRANULARITY)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    size_t a = align > VMM_GRANULARITY ? align : VMM_GRANULARITY;
    /* Over-map to align, then trim both ends. */
    uint8_t *m = mmap((void *)addr, size + a, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
        RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    uintptr_t start = ((uintptr_t)m + a - 1) / a * a;
    if (start > (uintptr_t)m)
        munmap(m, start - (uintptr_t)m);
    uintptr_t end = (uintptr_t)m + size + a;
    if (end > start + size)
        munmap((void *)(start + size), end - (start + size));
    *ptr = (CUdeviceptr)start;
    RETURN(CUDA_SUCCESS);
}

DRV(cuMemAddressFree, (CUdeviceptr ptr, size_t size), (ptr, size)) {
    ENTER(cuMemAddressFree, ptr, size);
    if (!ptr || !size)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    munmap((void *)ptr, size);
    RETURN(CUDA_SUCCESS);
}

DRV(cuMemMap, (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h, unsigned long long flags),
    (ptr, size, offset, h, flags)) {
    ENTER(cuMemMap, ptr, size, offset, h, flags);
    struct phys *p = as_phys(h);
    if (!p || !ptr || offset + size > p->size || flags)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (mem_add((void *)ptr, size, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, p->device, BACKING_VMM))
        RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    pthread_mutex_lock(&g_mem_mu);
    size_t i = alloc_index((uintptr_t)ptr);
    g_allocs[i - 1].handle = p;
    p->refs++;
    pthread_mutex_unlock(&g_mem_mu);
    RETURN(CUDA_SUCCESS);
}

DRV(cuMemUnmap, (CUdeviceptr ptr, size_t size), (ptr, size)) {
    ENTER(cuMemUnmap, ptr, size);
    struct alloc a;
    if (!mem_remove((void *)ptr, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, &a))
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (a.backing != BACKING_VMM) {
        mem_add((void *)ptr, a.size, a.kind, a.device, a.backing);
        RETURN(CUDA_ERROR_INVALID_VALUE);
    }
    /* The pages go back to the host; the range stays reserved. */
    madvise((void *)ptr, a.size, MADV_DONTNEED);
    if (a.handle)
        phys_release(a.handle);
    RETURN(CUDA_SUCCESS);
}

DRV(cuMemSetAccess, (CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count),
    (ptr, size, desc, count)) {
    ENTER(cuMemSetAccess, ptr, size, desc, count);
    RETURN(ptr && desc && count ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
}

DRV(cuMemRetainAllocationHandle, (CUmemGenericAllocationHandle *h, void *addr), (h, addr)) {
    ENTER(cuMemRetainAllocationHandle, h, addr);
    struct alloc a;
    if (!h || !mem_find(addr, &a) || a.backing != BACKING_VMM || !a.handle)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    struct phys *p = a.handle;
    pthread_mutex_lock(&g_mem_mu);
    p->refs++;
    pthread_mutex_unlock(&g_mem_mu);
    *h = (CUmemGenericAllocationHandle)(uintptr_t)p;
    RETURN(CUDA_SUCCESS);
}

DRV(cuMemGetAllocationPropertiesFromHandle, (CUmemAllocationProp *prop, CUmemGenericAllocationHandle h),
    (prop, h)) {
    ENTER(cuMemGetAllocationPropertiesFromHandle, prop, h);
    struct phys *p = as_phys(h);
    if (!prop || !p)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    *prop = p->prop;
    RETURN(CUDA_SUCCESS);
}

/* Sharing memory with other processes cannot be simulated. */
DRV(cuMemExportToShareableHandle, (void *out, CUmemGenericAllocationHandle h, CUmemAllocationHandleType t, unsigned long long flags),
    (out, h, t, flags)) {
    ENTER(cuMemExportToShareableHandle, out, h, t, flags);
    RETURN(CUDA_ERROR_NOT_SUPPORTED);
}

DRV(cuMemImportFromShareableHandle, (CUmemGenericAllocationHandle *h, void *os, CUmemAllocationHandleType t),
    (h, os, t)) {
    ENTER(cuMemImportFromShareableHandle, h, os, t);
    RETURN(CUDA_ERROR_NOT_SUPPORTED);
}

DRV(cuIpcGetMemHandle, (CUipcMemHandle *h, CUdeviceptr p), (h, p)) {
    ENTER(cuIpcGetMemHandle, h, p);
    RETURN(CUDA_ERROR_NOT_SUPPORTED);
}

DRV(cuIpcOpenMemHandle, (CUdeviceptr *p, CUipcMemHandle h, unsigned int flags), (p, h, flags)) {
    ENTER(cuIpcOpenMemHandle, p, h, flags);
    RETURN(CUDA_ERROR_NOT_SUPPORTED);
}

DRV(cuIpcCloseMemHandle, (CUdeviceptr p), (p)) {
    ENTER(cuIpcCloseMemHandle, p);
    RETURN(CUDA_ERROR_NOT_SUPPORTED);
}

DRV(cuIpcGetEventHandle, (CUipcEventHandle *h, CUevent e), (h, e)) {
    ENTER(cuIpcGetEventHandle, h, e);
    RETURN(CUDA_ERROR_NOT_SUPPORTED);
}

DRV(cuIpcOpenEventHandle, (CUevent *e, CUipcEventHandle h), (e, h)) {
    ENTER(cuIpcOpenEventHandle, e, h);
    RETURN(CUDA_ERROR_NOT_SUPPORTED);
}

/* Memory pools: one default pool per device, whose attributes read back. */
struct pool {
    uint64_t attrs[16];
};
static struct pool g_pools[GPUSIM_DEVICES];

DRV(cuDeviceGetDefaultMemPool, (CUmemoryPool *pool, CUdevice dev), (pool, dev)) {
    ENTER(cuDeviceGetDefaultMemPool, pool, dev);
    if (!pool)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (BAD_DEVICE(dev))
        RETURN(CUDA_ERROR_INVALID_DEVICE);
    *pool = (CUmemoryPool)&g_pools[dev];
    RETURN(CUDA_SUCCESS);
}

static struct pool *as_pool(CUmemoryPool p) {
    for (int i = 0; i < GPUSIM_DEVICES; i++)
        if ((struct pool *)p == &g_pools[i])
            return &g_pools[i];
    return NULL;
}

DRV(cuMemPoolGetAttribute, (CUmemoryPool pool, CUmemPool_attribute attr, void *v), (pool, attr, v)) {
    ENTER(cuMemPoolGetAttribute, pool, attr, v);
    struct pool *p = as_pool(pool);
    if (!p || !v || (unsigned)attr >= 16)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (attr == CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES ||
        attr == CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC ||
        attr == CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES)
        *(int *)v = (int)p->attrs[attr];
    else
        *(cuuint64_t *)v = p->attrs[attr];
    RETURN(CUDA_SUCCESS);
}

DRV(cuMemPoolSetAttribute, (CUmemoryPool pool, CUmemPool_attribute attr, void *v), (pool, attr, v)) {
    ENTER(cuMemPoolSetAttribute, pool, attr, v);
    struct pool *p = as_pool(pool);
    if (!p || !v || (unsigned)attr >= 16)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (attr == CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES ||
        attr == CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC ||
        attr == CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES)
        p->attrs[attr] = (uint64_t)*(int *)v;
    else
        p->attrs[attr] = *(cuuint64_t *)v;
    RETURN(CUDA_SUCCESS);
}

DRV(cuMemPoolSetAccess, (CUmemoryPool pool, const CUmemAccessDesc *map, size_t count), (pool, map, count)) {
    ENTER(cuMemPoolSetAccess, pool, map, count);
    RETURN(as_pool(pool) && (map || !count) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
}

DRV(cuMemPoolTrimTo, (CUmemoryPool pool, size_t keep), (pool, keep)) {
    ENTER(cuMemPoolTrimTo, pool, keep);
    RETURN(as_pool(pool) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
}

DRV(cuDeviceGetGraphMemAttribute, (CUdevice dev, CUgraphMem_attribute attr, void *v), (dev, attr, v)) {
    ENTER(cuDeviceGetGraphMemAttribute, dev, attr, v);
    if (BAD_DEVICE(dev))
        RETURN(CUDA_ERROR_INVALID_DEVICE);
    if (!v)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    *(cuuint64_t *)v = 0;
    RETURN(CUDA_SUCCESS);
}

DRV(cuDeviceSetGraphMemAttribute, (CUdevice dev, CUgraphMem_attribute attr, void *v), (dev, attr, v)) {
    ENTER(cuDeviceSetGraphMemAttribute, dev, attr, v);
    if (BAD_DEVICE(dev))
        RETURN(CUDA_ERROR_INVALID_DEVICE);
    RETURN(v ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
}

DRV(cuDeviceGetPCIBusId, (char *id, int len, CUdevice dev), (id, len, dev)) {
    ENTER(cuDeviceGetPCIBusId, id, len, dev);
    if (!id || len <= 0)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (BAD_DEVICE(dev))
        RETURN(CUDA_ERROR_INVALID_DEVICE);
    snprintf(id, (size_t)len, "0000:%02x:00.0", (unsigned)dev + 1);
    RETURN(CUDA_SUCCESS);
}

DRV(cuDeviceGetP2PAttribute, (int *v, CUdevice_P2PAttribute attr, CUdevice a, CUdevice b), (v, attr, a, b)) {
    ENTER(cuDeviceGetP2PAttribute, v, attr, a, b);
    if (!v)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (BAD_DEVICE(a) || BAD_DEVICE(b) || a == b)
        RETURN(CUDA_ERROR_INVALID_DEVICE);
    *v = attr == CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK ? 0 : 1;
    RETURN(CUDA_SUCCESS);
}

DRV(cuCtxDisablePeerAccess, (CUcontext peer), (peer)) {
    ENTER(cuCtxDisablePeerAccess, peer);
    RETURN(as_ctx(peer) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT);
}

/* Occupancy from the block size and shared memory, on the simulated device's
 * limits: 2048 threads, 32 blocks and 228 KiB of shared memory per SM. */
static int occupancy(const struct kernel *k, int block, size_t shared) {
    if (block <= 0 || block > 1024)
        return 0;
    int warps = (block + 31) / 32;
    int n = 64 / warps;
    if (n > 32)
        n = 32;
    (void)k;
    if (shared) {
        size_t by_shared = (228u << 10) / shared;
        if ((size_t)n > by_shared)
            n = (int)by_shared;
    }
    return n;
}

DRV(cuOccupancyMaxActiveBlocksPerMultiprocessor, (int *n, CUfunction f, int block, size_t shared),
    (n, f, block, shared)) {
    ENTER(cuOccupancyMaxActiveBlocksPerMultiprocessor, n, f, block, shared);
    struct kernel *k = as_kernel(f);
    if (!n)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!k)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    *n = occupancy(k, block, shared);
    RETURN(CUDA_SUCCESS);
}

DRV(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags,
    (int *n, CUfunction f, int block, size_t shared, unsigned int flags), (n, f, block, shared, flags)) {
    ENTER(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, n, f, block, shared, flags);
    struct kernel *k = as_kernel(f);
    if (!n)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!k)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    *n = occupancy(k, block, shared);
    RETURN(CUDA_SUCCESS);
}

GPUSIM_EXPORT int gpusim_occupancy(CUfunction f, int block, size_t shared) {
    struct kernel *k = as_kernel(f);
    return k ? occupancy(k, block, shared) : -1;
}

/* A host function in stream order; captured, it becomes a host node. */
static CUresult launch_host(CUstream hs, CUhostFn fn, void *data) {
    if (!fn)
        return CUDA_ERROR_INVALID_VALUE;
    if (!current_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    struct stream *s = resolve_stream(hs);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    if (s->capture) {
        struct node n = {.kind = NODE_HOST, .host_fn = fn, .host_data = data};
        return capture(s, &n);
    }
    return queue_host_fn(fn, data, stream_done_time(s));
}

DRV(cuLaunchHostFunc, (CUstream hs, CUhostFn fn, void *data), (hs, fn, data)) {
    ENTER(cuLaunchHostFunc, hs, fn, data);
    RETURN(launch_host(hs, fn, data));
}

/* A stream callback is a host function that is also told the stream and its
 * status (always success here). */
struct stream_callback {
    CUstreamCallback cb;
    CUstream stream;
    void *data;
};

static void call_stream_callback(void *p) {
    struct stream_callback *c = p;
    c->cb(c->stream, CUDA_SUCCESS, c->data);
    free(c);
}

DRV(cuStreamAddCallback, (CUstream hs, CUstreamCallback cb, void *data, unsigned int flags),
    (hs, cb, data, flags)) {
    ENTER(cuStreamAddCallback, hs, cb, data, flags);
    if (!cb || flags)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    struct stream *s = resolve_stream(hs);
    if (s && s->capture)
        RETURN(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    struct stream_callback *c = malloc(sizeof *c);
    if (!c)
        RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    *c = (struct stream_callback){cb, hs, data};
    CUresult r = launch_host(hs, call_stream_callback, c);
    if (r != CUDA_SUCCESS)
        free(c);
    RETURN(r);
}

/* User objects: reference counted, destroyed (their destructor called on the
 * host-function thread, as CUDA does) when the last reference goes. */
#define MAGIC_UOBJ 0x756f626au
struct user_object {
    uint32_t magic;
    _Atomic int refs;
    void *ptr;
    CUhostFn destroy;
};

DRV(cuUserObjectCreate, (CUuserObject *out, void *ptr, CUhostFn destroy, unsigned int refs, unsigned int flags),
    (out, ptr, destroy, refs, flags)) {
    ENTER(cuUserObjectCreate, out, ptr, destroy, refs, flags);
    if (!out || !destroy || !refs || flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    struct user_object *o = calloc(1, sizeof *o);
    if (!o)
        RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    o->magic = MAGIC_UOBJ;
    atomic_store(&o->refs, (int)refs);
    o->ptr = ptr;
    o->destroy = destroy;
    *out = (CUuserObject)o;
    RETURN(CUDA_SUCCESS);
}

static struct user_object *as_uobj(CUuserObject h) {
    struct user_object *o = (struct user_object *)h;
    return o && o->magic == MAGIC_UOBJ ? o : NULL;
}

static void uobj_release(struct user_object *o, unsigned count) {
    if (atomic_fetch_sub(&o->refs, (int)count) == (int)count) {
        o->magic = 0;
        queue_host_fn(o->destroy, o->ptr, 0);
        free(o);
    }
}

DRV(cuUserObjectRetain, (CUuserObject h, unsigned int count), (h, count)) {
    ENTER(cuUserObjectRetain, h, count);
    struct user_object *o = as_uobj(h);
    if (!o || !count)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    atomic_fetch_add(&o->refs, (int)count);
    RETURN(CUDA_SUCCESS);
}

DRV(cuUserObjectRelease, (CUuserObject h, unsigned int count), (h, count)) {
    ENTER(cuUserObjectRelease, h, count);
    struct user_object *o = as_uobj(h);
    if (!o || !count)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    uobj_release(o, count);
    RETURN(CUDA_SUCCESS);
}

DRV(cuGraphRetainUserObject, (CUgraph hg, CUuserObject h, unsigned int count, unsigned int flags),
    (hg, h, count, flags)) {
    ENTER(cuGraphRetainUserObject, hg, h, count, flags);
    struct graph *g = (struct graph *)hg;
    struct user_object *o = as_uobj(h);
    if (!g || g->magic != MAGIC_GRAPH || !o || !count)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    int slot = -1;
    for (int i = 0; i < 16 && slot < 0; i++)
        if (g->owned[i] == o || !g->owned[i])
            slot = i;
    if (slot < 0)
        RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    g->owned[slot] = o;
    g->owned_refs[slot] += count;
    if (!(flags & CU_GRAPH_USER_OBJECT_MOVE))
        atomic_fetch_add(&o->refs, (int)count);
    RETURN(CUDA_SUCCESS);
}

DRV(cuGraphReleaseUserObject, (CUgraph hg, CUuserObject h, unsigned int count), (hg, h, count)) {
    ENTER(cuGraphReleaseUserObject, hg, h, count);
    struct graph *g = (struct graph *)hg;
    struct user_object *o = as_uobj(h);
    if (!g || g->magic != MAGIC_GRAPH || !o || !count)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    for (int i = 0; i < 16; i++)
        if (g->owned[i] == o && g->owned_refs[i] >= count) {
            g->owned_refs[i] -= count;
            if (!g->owned_refs[i])
                g->owned[i] = NULL;
            uobj_release(o, count);
            RETURN(CUDA_SUCCESS);
        }
    RETURN(CUDA_ERROR_INVALID_VALUE);
}

static void graph_release_objects(struct graph *g) {
    for (int i = 0; i < 16; i++)
        if (g->owned[i]) {
            uobj_release(g->owned[i], g->owned_refs[i]);
            g->owned[i] = NULL;
            g->owned_refs[i] = 0;
        }
}

DRV(cuGraphConditionalHandleCreate, (CUgraphConditionalHandle *h, CUgraph g, CUcontext c, unsigned int v, unsigned int flags),
    (h, g, c, v, flags)) {
    ENTER(cuGraphConditionalHandleCreate, h, g, c, v, flags);
    RETURN(CUDA_ERROR_NOT_SUPPORTED);
}

DRV(cuGraphAddNode, (CUgraphNode *pn, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *edges, size_t n, CUgraphNodeParams *params),
    (pn, g, deps, edges, n, params)) {
    ENTER(cuGraphAddNode, pn, g, deps, edges, n, params);
    RETURN(CUDA_ERROR_NOT_SUPPORTED);
}

/* Libraries (context-independent modules): a library is a module; its kernels
 * are the simulated driver's kernel handles, which serve as CUkernel and
 * CUfunction alike. */
DRV(cuLibraryLoadData,
    (CUlibrary *lib, const void *code, CUjit_option *jo, void **jv, unsigned int nj, CUlibraryOption *lo, void **lv, unsigned int nl),
    (lib, code, jo, jv, nj, lo, lv, nl)) {
    ENTER(cuLibraryLoadData, lib, code, jo, jv, nj, lo, lv, nl);
    if (!lib || !code)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    RETURN(load_module_any((CUmodule *)lib, code));
}

DRV(cuLibraryGetKernel, (CUkernel *k, CUlibrary lib, const char *name), (k, lib, name)) {
    ENTER(cuLibraryGetKernel, k, lib, name);
    RETURN(module_function((CUfunction *)k, (CUmodule)lib, name));
}

DRV(cuLibraryUnload, (CUlibrary lib), (lib)) {
    ENTER(cuLibraryUnload, lib);
    struct module *m = (struct module *)lib;
    if (!m || m->magic != MAGIC_MODULE)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    m->magic = 0;
    RETURN(CUDA_SUCCESS);
}

DRV(cuKernelGetFunction, (CUfunction *f, CUkernel k), (f, k)) {
    ENTER(cuKernelGetFunction, f, k);
    if (!f)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!as_kernel(k))
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    *f = (CUfunction)k;
    RETURN(CUDA_SUCCESS);
}

DRV(cuKernelSetAttribute, (CUfunction_attribute a, int v, CUkernel k, CUdevice dev), (a, v, k, dev)) {
    ENTER(cuKernelSetAttribute, a, v, k, dev);
    struct kernel *kk = as_kernel(k);
    if (!kk)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (BAD_DEVICE(dev))
        RETURN(CUDA_ERROR_INVALID_DEVICE);
    if (a == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
        kk->max_dynamic_shared = v;
    RETURN(CUDA_SUCCESS);
}

DRV(cuModuleGetLoadingMode, (CUmoduleLoadingMode *mode), (mode)) {
    ENTER(cuModuleGetLoadingMode, mode);
    if (!mode)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    *mode = CU_MODULE_EAGER_LOADING;
    RETURN(CUDA_SUCCESS);
}

/* A 32-bit write to device memory in stream order: written at once (the work
 * before it never runs, so no one can tell). */
DRV(cuStreamWriteValue32, (CUstream hs, CUdeviceptr addr, cuuint32_t value, unsigned int flags),
    (hs, addr, value, flags)) {
    ENTER(cuStreamWriteValue32, hs, addr, value, flags);
    struct stream *s = resolve_stream(hs);
    if (!s)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    struct alloc a;
    if (!addr || addr % 4 || !mem_find((const void *)addr, &a) || addr + 4 > a.base + a.size)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    memcpy((void *)addr, &value, 4);
    RETURN(CUDA_SUCCESS);
}

DRV(cuLogsRegisterCallback, (CUlogsCallback cb, void *data, CUlogsCallbackHandle *out), (cb, data, out)) {
    ENTER(cuLogsRegisterCallback, cb, data, out);
    if (!cb)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    /* The simulated driver logs nothing, so the callback is never called. */
    if (out)
        *out = (CUlogsCallbackHandle)(uintptr_t)1;
    RETURN(CUDA_SUCCESS);
}

DRV(cuLogsUnregisterCallback, (CUlogsCallbackHandle h), (h)) {
    ENTER(cuLogsUnregisterCallback, h);
    RETURN(h ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
}

/* Green contexts, multicast objects and tensor maps are not simulated. */
DRV(cuCtxFromGreenCtx, (CUcontext *c, CUgreenCtx g), (c, g)) {
    ENTER(cuCtxFromGreenCtx, c, g);
    RETURN(CUDA_ERROR_NOT_SUPPORTED);
}
DRV(cuDevResourceGenerateDesc, (CUdevResourceDesc *d, CUdevResource *r, unsigned int n), (d, r, n)) {
    ENTER(cuDevResourceGenerateDesc, d, r, n);
    RETURN(CUDA_ERROR_NOT_SUPPORTED);
}
DRV(cuDevSmResourceSplitByCount,
    (CUdevResource *result, unsigned int *groups, const CUdevResource *input, CUdevResource *remaining,
     unsigned int flags, unsigned int min),
    (result, groups, input, remaining, flags, min)) {
    ENTER(cuDevSmResourceSplitByCount, result, groups, input, remaining, flags, min);
    RETURN(CUDA_ERROR_NOT_SUPPORTED);
}
DRV(cuDeviceGetDevResource, (CUdevice dev, CUdevResource *r, CUdevResourceType t), (dev, r, t)) {
    ENTER(cuDeviceGetDevResource, dev, r, t);
    RETURN(CUDA_ERROR_NOT_SUPPORTED);
}
DRV(cuGreenCtxCreate, (CUgreenCtx *g, CUdevResourceDesc d, CUdevice dev, unsigned int flags), (g, d, dev, flags)) {
    ENTER(cuGreenCtxCreate, g, d, dev, flags);
    RETURN(CUDA_ERROR_NOT_SUPPORTED);
}
DRV(cuGreenCtxDestroy, (CUgreenCtx g), (g)) {
    ENTER(cuGreenCtxDestroy, g);
    RETURN(CUDA_ERROR_NOT_SUPPORTED);
}
DRV(cuGreenCtxStreamCreate, (CUstream *s, CUgreenCtx g, unsigned int flags, int prio), (s, g, flags, prio)) {
    ENTER(cuGreenCtxStreamCreate, s, g, flags, prio);
    RETURN(CUDA_ERROR_NOT_SUPPORTED);
}
DRV(cuMulticastAddDevice, (CUmemGenericAllocationHandle h, CUdevice dev), (h, dev)) {
    ENTER(cuMulticastAddDevice, h, dev);
    RETURN(CUDA_ERROR_NOT_SUPPORTED);
}
DRV(cuMulticastBindMem,
    (CUmemGenericAllocationHandle mc, size_t mo, CUmemGenericAllocationHandle mem, size_t off, size_t size,
     unsigned long long flags),
    (mc, mo, mem, off, size, flags)) {
    ENTER(cuMulticastBindMem, mc, mo, mem, off, size, flags);
    RETURN(CUDA_ERROR_NOT_SUPPORTED);
}
DRV(cuMulticastCreate, (CUmemGenericAllocationHandle *h, const CUmulticastObjectProp *p), (h, p)) {
    ENTER(cuMulticastCreate, h, p);
    RETURN(CUDA_ERROR_NOT_SUPPORTED);
}
DRV(cuMulticastUnbind, (CUmemGenericAllocationHandle h, CUdevice dev, size_t off, size_t size), (h, dev, off, size)) {
    ENTER(cuMulticastUnbind, h, dev, off, size);
    RETURN(CUDA_ERROR_NOT_SUPPORTED);
}
DRV(cuTensorMapEncodeTiled,
    (CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank, void *addr, const cuuint64_t *dim,
     const cuuint64_t *strides, const cuuint32_t *box, const cuuint32_t *estrides, CUtensorMapInterleave il,
     CUtensorMapSwizzle sw, CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob),
    (map, type, rank, addr, dim, strides, box, estrides, il, sw, l2, oob)) {
    ENTER(cuTensorMapEncodeTiled, map, type, rank, addr, dim, strides, box, estrides, il, sw, l2, oob);
    RETURN(CUDA_ERROR_NOT_SUPPORTED);
}

/* The driver function named `symbol`, in the newest version this driver has
 * (cuda.h's versioned names: cuMemAlloc is cuMemAlloc_v2). */
GPUSIM_EXPORT void *gpusim_driver_symbol(const char *symbol) {
    static void *self;
    if (!self) {
        Dl_info info;
        if (!dladdr((void *)gpusim_driver_symbol, &info) || !(self = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD)))
            return NULL;
    }
    if (!symbol || strncmp(symbol, "cu", 2) != 0 || strlen(symbol) > 200)
        return NULL;
    char name[256];
    for (int v = 4; v >= 2; v--) {
        snprintf(name, sizeof name, "%s_v%d", symbol, v);
        void *f = dlsym(self, name);
        if (f)
            return f;
    }
    return dlsym(self, symbol);
}

DRV(cuGetProcAddress, (const char *symbol, void **pfn, int version, cuuint64_t flags, CUdriverProcAddressQueryResult *status),
    (symbol, pfn, version, flags, status)) {
    ENTER(cuGetProcAddress, symbol, pfn, version, flags, status);
    if (!symbol || !pfn)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    *pfn = gpusim_driver_symbol(symbol);
    if (status)
        *status = *pfn ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    RETURN(*pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND);
}

/* Errors ------------------------------------------------------------------------------ */

static const char *error_name(CUresult r) {
    switch (r) {
#define E(x) case x: return #x;
    E(CUDA_SUCCESS) E(CUDA_ERROR_INVALID_VALUE) E(CUDA_ERROR_OUT_OF_MEMORY)
    E(CUDA_ERROR_NOT_INITIALIZED) E(CUDA_ERROR_DEINITIALIZED) E(CUDA_ERROR_NO_DEVICE)
    E(CUDA_ERROR_INVALID_DEVICE) E(CUDA_ERROR_INVALID_IMAGE) E(CUDA_ERROR_INVALID_CONTEXT)
    E(CUDA_ERROR_FILE_NOT_FOUND) E(CUDA_ERROR_INVALID_HANDLE) E(CUDA_ERROR_ILLEGAL_STATE)
    E(CUDA_ERROR_NOT_FOUND) E(CUDA_ERROR_NOT_READY) E(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED)
    E(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) E(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED)
    E(CUDA_ERROR_NOT_SUPPORTED) E(CUDA_ERROR_UNKNOWN)
#undef E
    default: return NULL;
    }
}

GPUSIM_EXPORT CUresult CUDAAPI cuGetErrorName(CUresult r, const char **s) {
    if (!s)
        return CUDA_ERROR_INVALID_VALUE;
    *s = error_name(r);
    return *s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

GPUSIM_EXPORT CUresult CUDAAPI cuGetErrorString(CUresult r, const char **s) {
    if (!s)
        return CUDA_ERROR_INVALID_VALUE;
    const char *n = error_name(r);
    if (!n) {
        *s = NULL;
        return CUDA_ERROR_INVALID_VALUE;
    }
    static const struct { CUresult r; const char *text; } texts[] = {
        {CUDA_SUCCESS, "no error"},
        {CUDA_ERROR_INVALID_VALUE, "invalid argument"},
        {CUDA_ERROR_OUT_OF_MEMORY, "out of memory"},
        {CUDA_ERROR_NOT_INITIALIZED, "initialization error"},
        {CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"},
        {CUDA_ERROR_INVALID_CONTEXT, "invalid device context"},
        {CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"},
        {CUDA_ERROR_NOT_FOUND, "named symbol not found"},
        {CUDA_ERROR_NOT_READY, "device not ready"},
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        if (texts[i].r == r) {
            *s = texts[i].text;
            return CUDA_SUCCESS;
        }
    *s = n;
    return CUDA_SUCCESS;
}

GPUSIM_EXPORT CUresult CUDAAPI cuProfilerStart(void) { return CUDA_SUCCESS; }
GPUSIM_EXPORT CUresult CUDAAPI cuProfilerStop(void) { return CUDA_SUCCESS; }

/* For cuptiGetContextId, cuptiGetDeviceId and cuptiGetStreamId. */
GPUSIM_EXPORT int gpusim_context_info(void *h, uint32_t *id, uint32_t *device) {
    struct ctx *c = as_ctx((CUcontext)h);
    if (!c)
        return -1;
    if (id)
        *id = c->id;
    if (device)
        *device = c->dev->info.ordinal;
    return 0;
}

GPUSIM_EXPORT int gpusim_stream_id(void *ctx, void *h, uint32_t *id) {
    struct ctx *saved = tls_ctx;
    if (ctx && as_ctx((CUcontext)ctx))
        tls_ctx = (struct ctx *)ctx;
    struct stream *s = resolve_stream((CUstream)h);
    tls_ctx = saved;
    if (!s)
        return -1;
    *id = s->id;
    return 0;
}

GPUSIM_EXPORT int gpusim_graph_node_id(void *h, uint64_t *id) {
    struct node *n = h;
    if (!n || n->magic != MAGIC_NODE)
        return -1;
    *id = n->id;
    return 0;
}

GPUSIM_EXPORT int gpusim_graph_id(void *h, uint32_t *id) {
    struct graph *g = h;
    if (!g || g->magic != MAGIC_GRAPH)
        return -1;
    *id = g->id;
    return 0;
}

GPUSIM_EXPORT int gpusim_graph_exec_id(void *h, uint32_t *id) {
    struct graph_exec *x = h;
    if (!x || x->magic != MAGIC_EXEC)
        return -1;
    *id = x->id;
    return 0;
}

/* A marker for tools: this libcuda simulates. */
GPUSIM_EXPORT const char gpusim_driver[] = "gpusim: simulated CUDA driver, no GPU";
