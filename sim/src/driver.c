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
 * This file holds the driver API for devices and contexts; driver_internal.h
 * says what each of the other driver_*.c files holds. */
#include <stdlib.h>
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
    /* Simulated: GPUSIM_DRIVER_VERSION=N makes this an older (or newer) driver,
     * encoded as cuda.h documents (1000 * major + 10 * minor: 12080 = 12.8). */
    const char *e = getenv("GPUSIM_DRIVER_VERSION");
    *v = e && atoi(e) > 0 ? atoi(e) : 13000;
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
    /* Simulated: GPUSIM_DRIVER_VERSION=N makes this an older (or newer) driver,
     * encoded as cuda.h documents (1000 * major + 10 * minor: 12080 = 12.8). */
    const char *e = getenv("GPUSIM_DRIVER_VERSION");
    *v = e && atoi(e) > 0 ? atoi(e) : 13000;
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
