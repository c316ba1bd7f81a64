/* Simulated CUDA driver, libcuda.so.1 (no GPU): what its source files share. The
 * driver is built from driver_sim.c (clock, state, initialization, the tool
 * interface, contexts, memory), driver_work.c (the cost model, streams, kernels,
 * graphs and the simulated GPU work), and the driver API in driver.c (devices,
 * contexts), driver_memory.c (memory, copies, memsets), driver_streams.c
 * (streams, events), driver_graphs.c (modules, launches, graphs) and
 * driver_more.c (the rest of the API, memory pools, errors). Not a public
 * header: the symbols below are hidden inside libcuda.so.1. */
#ifndef GPUSIM_DRIVER_INTERNAL_H
#define GPUSIM_DRIVER_INTERNAL_H

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

#define XSTR(x) STR_(x)
#define STR_(x) #x
#define CAT(a, b) CAT_(a, b)
#define CAT_(a, b) a##b

#define now_ns gpusim_now_ns

/* Pending operations per stream before a call blocks (sim/README.md#cost-model). */
#define QUEUE_DEPTH 1024u

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

/* ------------------------------------------------------------------ memory */

enum { BACKING_NONE, BACKING_MMAP, BACKING_VMM };

struct alloc {
    uintptr_t base;
    size_t size;
    uint8_t kind; /* CUPTI_ACTIVITY_MEMORY_KIND_* */
    uint8_t backing; /* BACKING_*: NONE for registered host memory */
    uint32_t device;
    void *handle;    /* BACKING_VMM: the physical allocation mapped here */
};

#define BAD_DEVICE(d) ((d) < 0 || (d) >= GPUSIM_DEVICES)

/* ------------------------------------------------------------------ shared state and helpers */

/* Defined in one of the files above, used in others. */
extern double g_scale;
extern struct device g_dev[GPUSIM_DEVICES];
extern pthread_mutex_t g_mu;
extern struct ctx *g_ctxs;
extern _Atomic uint64_t g_next_node;
extern const struct gpusim_tool *_Atomic g_tool;
extern __thread struct ctx *tls_ctx;
extern __thread struct ctx *tls_ctx_stack[16];
extern __thread int tls_ctx_depth;
extern __thread struct stream *tls_ptds[GPUSIM_DEVICES];
extern pthread_mutex_t g_mem_mu;
extern struct alloc *g_allocs;
extern pthread_mutex_t g_kernel_mu;
extern _Atomic uint32_t g_next_ctx, g_next_stream, g_next_event, g_next_graph;

void sleep_until(uint64_t t);
uint64_t copy_cost(uint8_t copy_kind, uint8_t host_kind, uint64_t bytes);
void report_op(struct gpusim_op *op, const struct gpusim_api *call);
void report_sync(uint32_t type, uint64_t start, const struct gpusim_api *call,
                 struct ctx *c, struct stream *s, struct event *e);
void report_resource(uint32_t cbid, struct ctx *c, struct stream *s);
struct stream *new_stream(struct ctx *c, unsigned flags, int priority, int legacy);
void ctx_activate(struct ctx *c);
struct ctx *as_ctx(CUcontext h);
struct ctx *current_ctx(void);
size_t alloc_index(uintptr_t p);
int mem_add(void *p, size_t size, uint8_t kind, uint32_t device, int backing);
int mem_remove(void *p, uint8_t kind, struct alloc *out);
int mem_find(const void *p, struct alloc *out);
uint8_t mem_kind(const void *p, uint32_t *device);
void *lazy_map(size_t size);
void lazy_unmap(void *p, size_t size);
void zero_bytes(uint8_t *p, size_t n);
int is_device_kind(uint8_t k);
struct stream *resolve_stream(CUstream h);
void vhost_reaches(uint64_t t);
uint64_t ready_time(struct stream *s);
uint64_t device_start(struct stream *s);
void schedule(struct stream *s, uint64_t dur, uint64_t *start, uint64_t *end);
uint64_t stream_done_time(struct stream *s);
void waited_for_stream(struct stream *s);
uint64_t ctx_done_time(struct ctx *c);
void waited_for_ctx(struct ctx *c);
struct kernel *new_kernel(const char *name, const void *host_fun, void *module);
struct kernel *as_kernel(const void *p);
void report_graph_node(uint32_t cbid, struct graph *g, struct node *n,
                       struct graph *original_graph, struct node *original,
                       struct graph_exec *x);
struct node *graph_add(struct graph *g, const struct node *n);
CUresult capture(struct stream *s, const struct node *n);
void graph_release_objects(struct graph *g);
void graph_free_nodes(struct graph *g);
void run_kernel(struct stream *s, const struct node *n, const struct gpusim_api *call,
                uint32_t graph_id, uint64_t node_id);
uint64_t run_copy(struct stream *s, const struct node *n, const struct gpusim_api *call,
                  uint32_t graph_id, uint64_t node_id, int async);
uint64_t run_memset(struct stream *s, const struct node *n, const struct gpusim_api *call,
                    uint32_t graph_id, uint64_t node_id, int async);
CUresult queue_host_fn(CUhostFn fn, void *data, uint64_t ready);
void wait_host_fns(void);
void run_host(struct stream *s, const struct node *n);
CUresult kernel_node(CUfunction f, const uint32_t grid[3], const uint32_t block[3],
                     unsigned shared, uint8_t launch_type, struct node *n);
CUresult launch(CUfunction f, const uint32_t grid[3], const uint32_t block[3],
                unsigned shared, CUstream hs, uint8_t launch_type,
                const struct gpusim_api *call);
CUresult copy(void *dst, const void *src, size_t bytes, CUstream hs, int async,
              const struct gpusim_api *call);
CUresult memset_(CUdeviceptr dst, uint32_t value, unsigned elem, size_t count, CUstream hs,
                 int async, const struct gpusim_api *call);
CUresult device_alloc(CUdeviceptr *p, size_t n, uint8_t kind);
CUresult device_free(CUdeviceptr p);
CUresult load_module_any(CUmodule *pm, const void *image);
CUresult module_function(CUfunction *pf, CUmodule h, const char *name);
struct graph *node_graph(struct node *h, size_t *index);
GPUSIM_EXPORT const char *gpusim_function_name(CUfunction f);

#endif
