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
 * implemented once, in the "cost model" section of driver_work.c.
 *
 * This file holds the driver API for devices, contexts, memory, copies, streams
 * and events; driver_internal.h says what each of the other driver_*.c files
 * holds. */
#include "driver_internal.h"

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

CUresult device_alloc(CUdeviceptr *p, size_t n, uint8_t kind) {
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

CUresult device_free(CUdeviceptr p) {
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

