/* Simulated CUDA driver, libcuda.so.1 (no GPU): the simulated GPU. The cost model
 * (the only place durations are decided), streams and their ordering, kernels,
 * graphs and stream capture, and running the work: kernels never run, copies and
 * memsets really move bytes, and each operation gets simulated start and end times.
 * What the driver does and does not simulate: driver.c. */
#include "driver_internal.h"

/* ------------------------------------------------------------------ cost model
 * The only place durations are decided; sim/README.md#cost-model documents it.
 * All durations are multiplied by GPUSIM_TIME_SCALE (default 1). */
#define LAUNCH_LATENCY_NS 2000u  /* API call to earliest GPU start */
#define KERNEL_BASE_NS 1000u     /* an empty kernel */
#define THREADS_PER_NS 256u      /* grid x block threads retired per ns */
#define COPY_BASE_NS 1000u
#define MEMSET_BASE_NS 500u
/* QUEUE_DEPTH (pending operations per stream before a call blocks): driver_internal.h. */

double g_scale = 1.0;

static uint64_t scaled(uint64_t ns) { return g_scale == 1.0 ? ns : (uint64_t)((double)ns * g_scale); }

static uint64_t kernel_cost(uint64_t threads) {
    return scaled(KERNEL_BASE_NS + (threads + THREADS_PER_NS - 1) / THREADS_PER_NS);
}

/* Bytes per ns (= GB/s) by copy kind and host memory kind. */
uint64_t copy_cost(uint8_t copy_kind, uint8_t host_kind, uint64_t bytes) {
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
/* ------------------------------------------------------------------ streams */

struct stream *new_stream(struct ctx *c, unsigned flags, int priority, int legacy) {
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
struct stream *resolve_stream(CUstream h) {
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

void vhost_reaches(uint64_t t) {
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

uint64_t ready_time(struct stream *s) { return ready_on(s, 0); }

/* Where new work on `s` starts on the device clock. Called with the device lock. */
uint64_t device_start(struct stream *s) {
    uint64_t t = atomic_load(&g_vhost) + scaled(LAUNCH_LATENCY_NS), r = ready_on(s, 1);
    return r > t ? r : t;
}

/* Places `dur` ns of work on `s`: returns its start and end on the host clock.
 * A stream with QUEUE_DEPTH unfinished operations makes the caller wait, as a
 * full launch queue does on a GPU. */
void schedule(struct stream *s, uint64_t dur, uint64_t *start, uint64_t *end) {
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

uint64_t stream_done_time(struct stream *s) {
    pthread_mutex_lock(&s->ctx->dev->mu);
    uint64_t t = s->tail;
    pthread_mutex_unlock(&s->ctx->dev->mu);
    return t;
}

/* The host waited for the work queued on `s`: on the device clock, it is now at
 * that work's end. */
void waited_for_stream(struct stream *s) {
    pthread_mutex_lock(&s->ctx->dev->mu);
    uint64_t t = s->vtail;
    pthread_mutex_unlock(&s->ctx->dev->mu);
    vhost_reaches(t);
}

uint64_t ctx_done_time(struct ctx *c) {
    uint64_t t = 0;
    pthread_mutex_lock(&c->dev->mu);
    for (struct stream *x = c->dev->streams; x; x = x->next)
        if (x->ctx == c && x->tail > t)
            t = x->tail;
    pthread_mutex_unlock(&c->dev->mu);
    return t;
}

void waited_for_ctx(struct ctx *c) {
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
pthread_mutex_t g_kernel_mu = PTHREAD_MUTEX_INITIALIZER;
/* host stub -> kernel, open addressing; entries are never removed. The table is
 * mapped on first use, so that its untouched pages cost nothing. */
static struct kernel *_Atomic *_Atomic g_by_host;

static size_t host_slot(const void *p) { return ((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ull % HOST_SLOTS; }

/* Called with g_kernel_mu held. */
struct kernel *new_kernel(const char *name, const void *host_fun, void *module) {
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

struct kernel *as_kernel(const void *p) {
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
void report_graph_node(uint32_t cbid, struct graph *g, struct node *n,
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
struct node *graph_add(struct graph *g, const struct node *n) {
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
CUresult capture(struct stream *s, const struct node *n) {
    struct node *made = graph_add(s->capture, n);
    if (!made)
        return CUDA_ERROR_OUT_OF_MEMORY;
    report_graph_node(CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, s->capture, made, NULL, NULL, NULL);
    return CUDA_SUCCESS;
}

void graph_free_nodes(struct graph *g) {
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

void run_kernel(struct stream *s, const struct node *n, const struct gpusim_api *call,
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
uint64_t run_copy(struct stream *s, const struct node *n, const struct gpusim_api *call,
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

uint64_t run_memset(struct stream *s, const struct node *n, const struct gpusim_api *call,
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

void sleep_until(uint64_t t);

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

CUresult queue_host_fn(CUhostFn fn, void *data, uint64_t ready) {
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
void wait_host_fns(void) {
    if (tls_host_worker)
        return;
    pthread_mutex_lock(&g_host_mu);
    while (g_host_pending)
        pthread_cond_wait(&g_host_idle_cv, &g_host_mu);
    pthread_mutex_unlock(&g_host_mu);
}

void run_host(struct stream *s, const struct node *n) {
    uint64_t ready = stream_done_time(s);
    queue_host_fn(n->host_fn, n->host_data, ready);
}

/* A kernel launch's work, checked as cuLaunchKernel checks it: for a launch or a
 * kernel node. */
CUresult kernel_node(CUfunction f, const uint32_t grid[3], const uint32_t block[3],
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

CUresult launch(CUfunction f, const uint32_t grid[3], const uint32_t block[3],
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
CUresult copy(void *dst, const void *src, size_t bytes, CUstream hs, int async,
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

CUresult memset_(CUdeviceptr dst, uint32_t value, unsigned elem, size_t count, CUstream hs,
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

