/* Simulated CUDA driver, libcuda.so.1 (no GPU): more of the driver API (for
 * PyTorch, Triton and NVIDIA's samples), memory pools, and error names; what
 * cannot be simulated (IPC, green contexts, multicast, tensor maps) fails as
 * documented. What the driver does and does not simulate: driver.c. */
#include "driver_internal.h"

/* More of the driver API, for PyTorch, Triton and NVIDIA's samples -------------- */

/* The graph that holds node `h`, and its index there. */
struct graph *node_graph(struct node *h, size_t *index) {
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

void graph_release_objects(struct graph *g) {
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

/* The profiler API: no profiler runs here, so the calls only report their
 * driver API callbacks (CUPTI_DRIVER_TRACE_CBID_cuProfilerStart/Stop), which
 * is how CUPTI clients learn of them; cuda.h gives them no parameters. */
typedef struct { int none; } cuProfilerStart_params;
typedef struct { int none; } cuProfilerStop_params;
DRV(cuProfilerStart, (void), ()) {
    ENTER(cuProfilerStart, 0);
    RETURN(CUDA_SUCCESS);
}
DRV(cuProfilerStop, (void), ()) {
    ENTER(cuProfilerStop, 0);
    RETURN(CUDA_SUCCESS);
}

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
