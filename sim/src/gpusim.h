/* Simulated CUDA (no GPU, no real NVIDIA interface): the private interface between
 * the simulated libcuda.so.1 (the "GPU" and driver), libcudart.so.13 and
 * libcupti.so.13. It stands in for the driver's internal export tables, which
 * nobody outside NVIDIA can implement; programs never see it.
 *
 * Who does what:
 * - libcuda owns devices, contexts, streams, events, memory, graphs, the
 *   simulated clock and the correlation ids. It loads CUDA_INJECTION64_PATH on the
 *   first call, and reports every API call and every piece of GPU work to the one
 *   attached tool (libcupti) through `struct gpusim_tool`.
 * - libcudart implements the runtime API on libcuda's `gpusim_*` entry points
 *   (never on the public cu* symbols, so a CPU profiler's probe on cuLaunchKernel
 *   does not fire inside cudaLaunchKernel, as with NVIDIA's libraries).
 * - libcupti turns those reports into CUPTI callbacks and activity records. */
#ifndef GPUSIM_H
#define GPUSIM_H

#include <stddef.h>
#include <stdint.h>

#define GPUSIM_EXPORT __attribute__((visibility("default")))

/* CUPTI's callback domains, with CUPTI's numbers. */
#define GPUSIM_DOMAIN_DRIVER 1
#define GPUSIM_DOMAIN_RUNTIME 2
#define GPUSIM_DOMAIN_RESOURCE 3
#define GPUSIM_MAX_CBID 1024

#define GPUSIM_DEVICES 2

/* One API call, from its enter to its exit. */
struct gpusim_api {
    int domain;
    uint32_t cbid;
    const char *name;      /* the function's name without version suffix */
    const void *params;    /* the <function>_params struct of CUPTI's generated headers */
    void *ret;             /* CUresult* or cudaError_t* */
    const char *symbol;    /* kernel name for launches */
    void *context;         /* CUcontext current at the call */
    uint32_t context_id;
    uint32_t correlation_id;
    uint64_t correlation_data; /* CUPTI's per-call scratch word */
    uint64_t start_ns;     /* CLOCK_MONOTONIC at enter, set by the tool when it needs it, else 0 */
    uint32_t outer;        /* correlation id of the enclosing runtime call (runtime calls) */
    int traced;            /* enter was reported, so exit is */
};

enum gpusim_op_kind {
    GPUSIM_OP_KERNEL = 1,
    GPUSIM_OP_MEMCPY = 2,
    GPUSIM_OP_MEMCPY_PEER = 3,
    GPUSIM_OP_MEMSET = 4,
};

/* One piece of GPU work with its simulated times (CLOCK_MONOTONIC ns). */
struct gpusim_op {
    int kind;
    uint64_t start_ns, end_ns;
    uint32_t correlation_id;         /* the API call that issued it */
    uint32_t runtime_correlation_id; /* the runtime call around it, 0 for a direct driver call */
    uint32_t device, context, stream;
    uint32_t graph_id;
    uint64_t graph_node_id;
    /* kernels */
    const char *name;
    int32_t grid[3], block[3];
    int32_t dynamic_shared, static_shared;
    uint16_t registers;
    uint8_t launch_type; /* CUpti_ActivityLaunchType */
    int64_t grid_id;
    /* copies and memsets */
    uint64_t bytes;
    uint8_t copy_kind, src_kind, dst_kind; /* CUpti_ActivityMemcpyKind, CUpti_ActivityMemoryKind */
    uint8_t async;
    uint32_t src_device, dst_device, src_context, dst_context;
    uint32_t value;
    uint16_t memory_kind;
};

/* A host thread that waited for the GPU (a SYNCHRONIZATION record). */
struct gpusim_sync {
    uint32_t type; /* CUpti_ActivitySynchronizationType */
    uint64_t start_ns, end_ns;
    uint32_t correlation_id, context, stream, event;
};

struct gpusim_device_info {
    uint32_t ordinal;
    const char *name;
    int cc_major, cc_minor;
    uint64_t global_memory;
    uint32_t multiprocessors, l2_cache, shared_per_block, shared_per_sm, regs_per_block,
        regs_per_sm, max_threads_per_block, max_blocks_per_sm, max_warps_per_sm, clock_khz,
        copy_engines, constant_memory;
    uint64_t memory_bandwidth; /* bytes/s */
    unsigned char uuid[16];
};

/* A graph node made (CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED) or copied into an
 * instantiated graph (CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED): the fields of
 * CUPTI's CUpti_GraphData that the driver fills. */
struct gpusim_graph_event {
    void *context;
    void *graph;          /* CUgraph holding `node` */
    void *original_graph; /* clones: the graph `node` was copied from */
    void *node;           /* CUgraphNode */
    void *original_node;  /* clones: the node it was copied from */
    int node_type;        /* CUgraphNodeType */
    void *graph_exec;     /* clones: the CUgraphExec being made */
};

/* What libcupti gives the driver. Every hook is called on the thread that made
 * the CUDA call, with no driver lock held. */
struct gpusim_tool {
    void (*api_enter)(struct gpusim_api *call);
    void (*api_exit)(struct gpusim_api *call);
    void (*op)(const struct gpusim_op *op);
    void (*sync)(const struct gpusim_sync *sync);
    /* CUPTI_CBID_RESOURCE_*: contexts and streams created or being destroyed. */
    void (*resource)(uint32_t cbid, void *context, uint32_t context_id, uint32_t device,
                     void *stream, uint32_t stream_id);
    /* CUPTI_CBID_RESOURCE_GRAPHNODE_*, inside the call that makes the node. */
    void (*graph_node)(uint32_t cbid, const struct gpusim_graph_event *event);
};

/* Exported by libcuda. */
GPUSIM_EXPORT int gpusim_attach_tool(const struct gpusim_tool *tool); /* 0, or -1 if taken */
GPUSIM_EXPORT void gpusim_detach_tool(const struct gpusim_tool *tool);
GPUSIM_EXPORT uint64_t gpusim_now_ns(void); /* CLOCK_MONOTONIC */
GPUSIM_EXPORT const struct gpusim_device_info *gpusim_device_info(int ordinal);
/* Live contexts, for the CONTEXT and DEVICE records of a tool that enables them late. */
GPUSIM_EXPORT int gpusim_contexts(uint32_t *ids, uint32_t *devices, uint16_t *null_streams,
                                  int max);

GPUSIM_EXPORT int gpusim_context_info(void *context, uint32_t *id, uint32_t *device);
GPUSIM_EXPORT int gpusim_stream_id(void *context, void *stream, uint32_t *id);
/* For cuptiGetGraphNodeId, cuptiGetGraphId and cuptiGetGraphExecId: 0, or -1 for
 * a handle that is not a live node, graph or instantiated graph. */
GPUSIM_EXPORT int gpusim_graph_node_id(void *node, uint64_t *id);
GPUSIM_EXPORT int gpusim_graph_id(void *graph, uint32_t *id);
GPUSIM_EXPORT int gpusim_graph_exec_id(void *graph_exec, uint32_t *id);

/* Runtime-side bookkeeping of API calls (libcudart calls these around each
 * runtime function; driver functions do it themselves). */
GPUSIM_EXPORT void gpusim_api_begin(struct gpusim_api *call, int domain, uint32_t cbid,
                                    const char *name, const void *params, void *ret,
                                    const char *symbol);
GPUSIM_EXPORT void gpusim_api_end(struct gpusim_api *call);
/* Runs cuInit's work once: the CUDA_INJECTION64_PATH library is loaded here. */
GPUSIM_EXPORT int gpusim_init(void);
GPUSIM_EXPORT int gpusim_initialized(void);
/* Simulated: the runtime's teardown at exit (GPUSIM_TEARDOWN_AT_EXIT=1): destroys
 * every live context as cuCtxDestroy does; gpusim_torn_down() is 1 afterwards. */
GPUSIM_EXPORT void gpusim_teardown_contexts(void);
GPUSIM_EXPORT int gpusim_torn_down(void);

#endif
