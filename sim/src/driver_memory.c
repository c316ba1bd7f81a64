/* Simulated CUDA driver, libcuda.so.1 (no GPU): the driver API for memory (device,
 * managed, pinned and registered host memory), copies and memsets. See
 * driver_internal.h for what the other driver_*.c files hold. */
#include "driver_internal.h"

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
