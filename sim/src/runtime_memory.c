/* Simulated CUDA runtime, libcudart.so.13 (no GPU): the runtime API for memory,
 * copies and memsets. See runtime_internal.h for the other runtime_*.c files. */
#include "runtime_internal.h"

/* ------------------------------------------------------------------ memory */

GPUSIM_EXPORT cudaError_t cudaMalloc(void **devPtr, size_t size) {
    ENTER(cudaMalloc, devPtr, size);
    RETURN(rt(DRV(cuMemAlloc)((CUdeviceptr *)devPtr, size)));
}

GPUSIM_EXPORT cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags) {
    ENTER(cudaMallocManaged, devPtr, size, flags);
    RETURN(rt(DRV(cuMemAllocManaged)((CUdeviceptr *)devPtr, size, flags)));
}

GPUSIM_EXPORT cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t stream) {
    ENTER(cudaMallocAsync, devPtr, size, stream);
    RETURN(rt(DRV(cuMemAllocAsync)((CUdeviceptr *)devPtr, size, (CUstream)stream)));
}

GPUSIM_EXPORT cudaError_t cudaFree(void *devPtr) {
    ENTER(cudaFree, devPtr);
    /* cudaFree(0) is the usual way to create the context, done above. */
    RETURN(devPtr ? rt(DRV(cuMemFree)((CUdeviceptr)devPtr)) : cudaSuccess);
}

GPUSIM_EXPORT cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t stream) {
    ENTER(cudaFreeAsync, devPtr, stream);
    RETURN(rt(DRV(cuMemFreeAsync)((CUdeviceptr)devPtr, (CUstream)stream)));
}

GPUSIM_EXPORT cudaError_t cudaMallocHost(void **ptr, size_t size) {
    ENTER(cudaMallocHost, ptr, size);
    RETURN(rt(DRV(cuMemAllocHost)(ptr, size)));
}

GPUSIM_EXPORT cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags) {
    ENTER(cudaHostAlloc, pHost, size, flags);
    RETURN(rt(DRV(cuMemHostAlloc)(pHost, size, flags)));
}

GPUSIM_EXPORT cudaError_t cudaFreeHost(void *ptr) {
    ENTER(cudaFreeHost, ptr);
    RETURN(rt(DRV(cuMemFreeHost)(ptr)));
}

GPUSIM_EXPORT cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags) {
    ENTER(cudaHostRegister, ptr, size, flags);
    RETURN(rt(DRV(cuMemHostRegister)(ptr, size, flags)));
}

GPUSIM_EXPORT cudaError_t cudaHostUnregister(void *ptr) {
    ENTER(cudaHostUnregister, ptr);
    RETURN(rt(DRV(cuMemHostUnregister)(ptr)));
}

GPUSIM_EXPORT cudaError_t cudaMemGetInfo(size_t *free_, size_t *total) {
    ENTER(cudaMemGetInfo, free_, total);
    RETURN(rt(DRV(cuMemGetInfo)(free_, total)));
}

/* The driver call a runtime copy makes depends on its direction, as in NVIDIA's
 * runtime; the simulated driver itself classifies copies by their pointers. */
GPUSIM_EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) {
    ENTER(cudaMemcpy, dst, src, count, kind);
    CUresult r;
    switch (kind) {
    case cudaMemcpyHostToDevice: r = DRV(cuMemcpyHtoD)((CUdeviceptr)dst, src, count); break;
    case cudaMemcpyDeviceToHost: r = DRV(cuMemcpyDtoH)(dst, (CUdeviceptr)src, count); break;
    case cudaMemcpyDeviceToDevice: r = DRV(cuMemcpyDtoD)((CUdeviceptr)dst, (CUdeviceptr)src, count); break;
    case cudaMemcpyHostToHost:
    case cudaMemcpyDefault: r = DRV(cuMemcpy)((CUdeviceptr)dst, (CUdeviceptr)src, count); break;
    default: r = CUDA_ERROR_INVALID_VALUE; break;
    }
    RETURN(rt(r));
}

GPUSIM_EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
                                          enum cudaMemcpyKind kind, cudaStream_t stream) {
    ENTER(cudaMemcpyAsync, dst, src, count, kind, stream);
    CUstream s = (CUstream)stream;
    CUresult r;
    switch (kind) {
    case cudaMemcpyHostToDevice: r = DRV(cuMemcpyHtoDAsync)((CUdeviceptr)dst, src, count, s); break;
    case cudaMemcpyDeviceToHost: r = DRV(cuMemcpyDtoHAsync)(dst, (CUdeviceptr)src, count, s); break;
    case cudaMemcpyDeviceToDevice: r = DRV(cuMemcpyDtoDAsync)((CUdeviceptr)dst, (CUdeviceptr)src, count, s); break;
    case cudaMemcpyHostToHost:
    case cudaMemcpyDefault: r = DRV(cuMemcpyAsync)((CUdeviceptr)dst, (CUdeviceptr)src, count, s); break;
    default: r = CUDA_ERROR_INVALID_VALUE; break;
    }
    RETURN(rt(r));
}

static CUDA_MEMCPY2D copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                            size_t height, enum cudaMemcpyKind kind) {
    int src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    int dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    CUDA_MEMCPY2D c = {
        .srcMemoryType = src_dev ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST,
        .srcHost = src,
        .srcDevice = (CUdeviceptr)src,
        .srcPitch = spitch,
        .dstMemoryType = dst_dev ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST,
        .dstHost = dst,
        .dstDevice = (CUdeviceptr)dst,
        .dstPitch = dpitch,
        .WidthInBytes = width,
        .Height = height,
    };
    return c;
}

GPUSIM_EXPORT cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch,
                                       size_t width, size_t height, enum cudaMemcpyKind kind) {
    ENTER(cudaMemcpy2D, dst, dpitch, src, spitch, width, height, kind);
    CUDA_MEMCPY2D c = copy2d(dst, dpitch, src, spitch, width, height, kind);
    RETURN(rt(DRV(cuMemcpy2D)(&c)));
}

GPUSIM_EXPORT cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                                            size_t width, size_t height, enum cudaMemcpyKind kind,
                                            cudaStream_t stream) {
    ENTER(cudaMemcpy2DAsync, dst, dpitch, src, spitch, width, height, kind, stream);
    CUDA_MEMCPY2D c = copy2d(dst, dpitch, src, spitch, width, height, kind);
    RETURN(rt(DRV(cuMemcpy2DAsync)(&c, (CUstream)stream)));
}

GPUSIM_EXPORT cudaError_t cudaMemcpyPeer(void *dst, int dstDevice, const void *src, int srcDevice,
                                         size_t count) {
    ENTER(cudaMemcpyPeer, dst, dstDevice, src, srcDevice, count);
    CUcontext dc = gpusim_runtime_context(dstDevice), sc = gpusim_runtime_context(srcDevice);
    if (!dc || !sc)
        RETURN(cudaErrorInvalidDevice);
    RETURN(rt(DRV(cuMemcpyPeer)((CUdeviceptr)dst, dc, (CUdeviceptr)src, sc, count)));
}

GPUSIM_EXPORT cudaError_t cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src,
                                              int srcDevice, size_t count, cudaStream_t stream) {
    ENTER(cudaMemcpyPeerAsync, dst, dstDevice, src, srcDevice, count, stream);
    CUcontext dc = gpusim_runtime_context(dstDevice), sc = gpusim_runtime_context(srcDevice);
    if (!dc || !sc)
        RETURN(cudaErrorInvalidDevice);
    RETURN(rt(DRV(cuMemcpyPeerAsync)((CUdeviceptr)dst, dc, (CUdeviceptr)src, sc, count,
                                       (CUstream)stream)));
}

GPUSIM_EXPORT cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src, size_t count,
                                             size_t offset, enum cudaMemcpyKind kind) {
    ENTER(cudaMemcpyToSymbol, symbol, src, count, offset, kind);
    struct var *v = find_var(symbol);
    if (!v)
        RETURN(cudaErrorInvalidSymbol);
    if (offset + count > v->size)
        RETURN(cudaErrorInvalidValue);
    RETURN(rt(DRV(cuMemcpy)((CUdeviceptr)((char *)v->dev + offset), (CUdeviceptr)src, count)));
}

GPUSIM_EXPORT cudaError_t cudaMemcpyFromSymbol(void *dst, const void *symbol, size_t count,
                                               size_t offset, enum cudaMemcpyKind kind) {
    ENTER(cudaMemcpyFromSymbol, dst, symbol, count, offset, kind);
    struct var *v = find_var(symbol);
    if (!v)
        RETURN(cudaErrorInvalidSymbol);
    if (offset + count > v->size)
        RETURN(cudaErrorInvalidValue);
    RETURN(rt(DRV(cuMemcpy)((CUdeviceptr)dst, (CUdeviceptr)((char *)v->dev + offset), count)));
}

GPUSIM_EXPORT cudaError_t cudaGetSymbolAddress(void **devPtr, const void *symbol) {
    ENTER(cudaGetSymbolAddress, devPtr, symbol);
    struct var *v = find_var(symbol);
    if (!v || !devPtr)
        RETURN(cudaErrorInvalidSymbol);
    *devPtr = v->dev;
    RETURN(cudaSuccess);
}

GPUSIM_EXPORT cudaError_t cudaMemset(void *devPtr, int value, size_t count) {
    ENTER(cudaMemset, devPtr, value, count);
    RETURN(rt(DRV(cuMemsetD8)((CUdeviceptr)devPtr, (unsigned char)value, count)));
}

GPUSIM_EXPORT cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream) {
    ENTER(cudaMemsetAsync, devPtr, value, count, stream);
    RETURN(rt(DRV(cuMemsetD8Async)((CUdeviceptr)devPtr, (unsigned char)value, count, (CUstream)stream)));
}
