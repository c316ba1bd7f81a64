/* Simulated CUDA driver, libcuda.so.1 (no GPU): its clock, state, initialization
 * (what cuInit does), the interface to the attached tool (libcupti), contexts and
 * the memory map. What the driver does and does not simulate: driver.c. */
#include "driver_internal.h"
#include "nvdev.h"

/* ------------------------------------------------------------------ clock */

GPUSIM_EXPORT uint64_t gpusim_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Blocks the calling thread until CLOCK_MONOTONIC reaches `t`: a wait for the
 * simulated GPU takes as long on the wall clock as the work it waits for. */
void sleep_until(uint64_t t) {
    struct timespec ts = {(time_t)(t / 1000000000ull), (long)(t % 1000000000ull)};
    while (now_ns() < t) {
        if (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0 && errno != EINTR)
            break;
    }
}

/* ------------------------------------------------------------------ state */

struct device g_dev[GPUSIM_DEVICES];
pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER; /* contexts, modules, graphs */
struct ctx *g_ctxs;
_Atomic uint32_t g_next_ctx = 1, g_next_stream = 13, g_next_event = 1, g_next_graph = 1;
_Atomic uint64_t g_next_node = 1;
static _Atomic uint32_t g_next_corr = 1;
const struct gpusim_tool *_Atomic g_tool;

__thread struct ctx *tls_ctx;
__thread struct ctx *tls_ctx_stack[16];
__thread int tls_ctx_depth;
static __thread uint32_t tls_runtime_corr;
__thread struct stream *tls_ptds[GPUSIM_DEVICES];

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

void report_op(struct gpusim_op *op, const struct gpusim_api *call) {
    const struct gpusim_tool *t = atomic_load_explicit(&g_tool, memory_order_acquire);
    if (!t)
        return;
    op->correlation_id = call->correlation_id;
    op->runtime_correlation_id = call->outer;
    t->op(op);
}

void report_sync(uint32_t type, uint64_t start, const struct gpusim_api *call,
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

void report_resource(uint32_t cbid, struct ctx *c, struct stream *s) {
    const struct gpusim_tool *t = atomic_load_explicit(&g_tool, memory_order_acquire);
    if (t)
        t->resource(cbid, c, c->id, c->dev->info.ordinal, s, s ? s->id : 0);
}

/* ------------------------------------------------------------------ API macros */

/* ------------------------------------------------------------------ contexts */

void ctx_activate(struct ctx *c) {
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

struct ctx *as_ctx(CUcontext h) {
    struct ctx *c = (struct ctx *)h;
    return c && c->magic == MAGIC_CTX && c->live ? c : NULL;
}

struct ctx *current_ctx(void) {
    struct ctx *c = tls_ctx;
    return c && c->live ? c : NULL;
}

/* ------------------------------------------------------------------ memory */

/* Device, pinned and managed memory are anonymous mappings made with
 * MAP_NORESERVE: their pages take host memory only once written (copies and
 * memsets write them; kernels never run), so no program on the simulation can
 * take the host down, however much it allocates. Each device has a fixed size
 * (DEVICE_MEMORY), and an allocation beyond what is free fails as on a GPU. */

pthread_mutex_t g_mem_mu = PTHREAD_MUTEX_INITIALIZER;
struct alloc *g_allocs;
static size_t g_nallocs, g_cap_allocs;

size_t alloc_index(uintptr_t p) {
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
int mem_add(void *p, size_t size, uint8_t kind, uint32_t device, int backing) {
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
int mem_remove(void *p, uint8_t kind, struct alloc *out) {
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
int mem_find(const void *p, struct alloc *out) {
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
uint8_t mem_kind(const void *p, uint32_t *device) {
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
void *lazy_map(size_t size) {
    void *p = mmap(NULL, page_round(size), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void lazy_unmap(void *p, size_t size) { munmap(p, page_round(size)); }

/* Sets n bytes at p to zero; whole pages are handed back instead of written. */
void zero_bytes(uint8_t *p, size_t n) {
    uintptr_t a = ((uintptr_t)p + 4095) & ~(uintptr_t)4095, b = ((uintptr_t)p + n) & ~(uintptr_t)4095;
    if (n < (64u << 10) || b <= a || madvise((void *)a, b - a, MADV_DONTNEED) != 0) {
        memset(p, 0, n);
        return;
    }
    memset(p, 0, a - (uintptr_t)p);
    memset((void *)b, 0, (uintptr_t)p + n - b);
}

int is_device_kind(uint8_t k) {
    return k == CUPTI_ACTIVITY_MEMORY_KIND_DEVICE || k == CUPTI_ACTIVITY_MEMORY_KIND_MANAGED;
}

