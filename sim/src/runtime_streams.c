/* Simulated CUDA runtime, libcudart.so.13 (no GPU): the runtime API for streams,
 * events and graphs. See runtime_internal.h for the other runtime_*.c files. */
#include "runtime_internal.h"

/* ------------------------------------------------------------------ streams */

GPUSIM_EXPORT cudaError_t cudaStreamCreate(cudaStream_t *pStream) {
    ENTER(cudaStreamCreate, pStream);
    RETURN(rt(DRV(cuStreamCreate)((CUstream *)pStream, 0)));
}

GPUSIM_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags) {
    ENTER(cudaStreamCreateWithFlags, pStream, flags);
    RETURN(rt(DRV(cuStreamCreate)((CUstream *)pStream, flags)));
}

GPUSIM_EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags,
                                                       int priority) {
    ENTER(cudaStreamCreateWithPriority, pStream, flags, priority);
    RETURN(rt(DRV(cuStreamCreateWithPriority)((CUstream *)pStream, flags, priority)));
}

GPUSIM_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    ENTER(cudaStreamDestroy, stream);
    RETURN(rt(DRV(cuStreamDestroy)((CUstream)stream)));
}

GPUSIM_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    ENTER(cudaStreamSynchronize, stream);
    RETURN(rt(DRV(cuStreamSynchronize)((CUstream)stream)));
}

GPUSIM_EXPORT cudaError_t cudaStreamQuery(cudaStream_t stream) {
    ENTER(cudaStreamQuery, stream);
    RETURN(rt(DRV(cuStreamQuery)((CUstream)stream)));
}

GPUSIM_EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
    ENTER(cudaStreamWaitEvent, stream, event, flags);
    RETURN(rt(DRV(cuStreamWaitEvent)((CUstream)stream, (CUevent)event, flags)));
}

GPUSIM_EXPORT cudaError_t cudaStreamGetPriority(cudaStream_t stream, int *priority) {
    ENTER(cudaStreamGetPriority, stream, priority);
    RETURN(rt(DRV(cuStreamGetPriority)((CUstream)stream, priority)));
}

GPUSIM_EXPORT cudaError_t cudaStreamGetFlags(cudaStream_t stream, unsigned int *flags) {
    ENTER(cudaStreamGetFlags, stream, flags);
    RETURN(rt(DRV(cuStreamGetFlags)((CUstream)stream, flags)));
}

GPUSIM_EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
    ENTER(cudaStreamBeginCapture, stream, mode);
    RETURN(rt(DRV(cuStreamBeginCapture)((CUstream)stream, (CUstreamCaptureMode)mode)));
}

GPUSIM_EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph) {
    ENTER(cudaStreamEndCapture, stream, pGraph);
    RETURN(rt(DRV(cuStreamEndCapture)((CUstream)stream, (CUgraph *)pGraph)));
}

GPUSIM_EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t stream,
                                                enum cudaStreamCaptureStatus *pCaptureStatus) {
    ENTER(cudaStreamIsCapturing, stream, pCaptureStatus);
    RETURN(rt(DRV(cuStreamIsCapturing)((CUstream)stream, (CUstreamCaptureStatus *)pCaptureStatus)));
}

/* ------------------------------------------------------------------ events */

GPUSIM_EXPORT cudaError_t cudaEventCreate(cudaEvent_t *event) {
    ENTER(cudaEventCreate, event);
    RETURN(rt(DRV(cuEventCreate)((CUevent *)event, 0)));
}

GPUSIM_EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
    ENTER(cudaEventCreateWithFlags, event, flags);
    RETURN(rt(DRV(cuEventCreate)((CUevent *)event, flags)));
}

GPUSIM_EXPORT cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    ENTER(cudaEventRecord, event, stream);
    RETURN(rt(DRV(cuEventRecord)((CUevent)event, (CUstream)stream)));
}

GPUSIM_EXPORT cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream,
                                                   unsigned int flags) {
    ENTER(cudaEventRecordWithFlags, event, stream, flags);
    RETURN(rt(DRV(cuEventRecordWithFlags)((CUevent)event, (CUstream)stream, flags)));
}

GPUSIM_EXPORT cudaError_t cudaEventQuery(cudaEvent_t event) {
    ENTER(cudaEventQuery, event);
    RETURN(rt(DRV(cuEventQuery)((CUevent)event)));
}

GPUSIM_EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    ENTER(cudaEventSynchronize, event);
    RETURN(rt(DRV(cuEventSynchronize)((CUevent)event)));
}

GPUSIM_EXPORT cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
    ENTER(cudaEventElapsedTime, ms, start, end);
    RETURN(rt(DRV(cuEventElapsedTime)(ms, (CUevent)start, (CUevent)end)));
}

GPUSIM_EXPORT cudaError_t cudaEventDestroy(cudaEvent_t event) {
    ENTER(cudaEventDestroy, event);
    RETURN(rt(DRV(cuEventDestroy)((CUevent)event)));
}

/* ------------------------------------------------------------------ graphs */

GPUSIM_EXPORT cudaError_t cudaGraphCreate(cudaGraph_t *pGraph, unsigned int flags) {
    ENTER(cudaGraphCreate, pGraph, flags);
    RETURN(rt(DRV(cuGraphCreate)((CUgraph *)pGraph, flags)));
}

/* The node runs in the current device's primary context; kernel arguments are
 * not kept (kernels never run). */
GPUSIM_EXPORT cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                                 const cudaGraphNode_t *pDependencies,
                                                 size_t numDependencies,
                                                 const struct cudaKernelNodeParams *pNodeParams) {
    CUfunction f = pNodeParams ? gpusim_resolve_function(pNodeParams->func) : NULL;
    ENTER_SYM(cudaGraphAddKernelNode, gpusim_function_name(f), pGraphNode, graph, pDependencies,
              numDependencies, pNodeParams);
    if (!pNodeParams)
        RETURN(cudaErrorInvalidValue);
    if (!f)
        RETURN(cudaErrorInvalidDeviceFunction);
    CUDA_KERNEL_NODE_PARAMS p = {
        .func = f,
        .gridDimX = pNodeParams->gridDim.x,
        .gridDimY = pNodeParams->gridDim.y,
        .gridDimZ = pNodeParams->gridDim.z,
        .blockDimX = pNodeParams->blockDim.x,
        .blockDimY = pNodeParams->blockDim.y,
        .blockDimZ = pNodeParams->blockDim.z,
        .sharedMemBytes = pNodeParams->sharedMemBytes,
        .kernelParams = pNodeParams->kernelParams,
        .extra = pNodeParams->extra,
    };
    RETURN(rt(DRV(cuGraphAddKernelNode)((CUgraphNode *)pGraphNode, (CUgraph)graph,
                                        (const CUgraphNode *)pDependencies, numDependencies, &p)));
}

GPUSIM_EXPORT cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                               unsigned long long flags) {
    ENTER(cudaGraphInstantiate, pGraphExec, graph, flags);
    RETURN(rt(DRV(cuGraphInstantiateWithFlags)((CUgraphExec *)pGraphExec, (CUgraph)graph, flags)));
}

GPUSIM_EXPORT cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec,
                                                        cudaGraph_t graph, unsigned long long flags) {
    ENTER(cudaGraphInstantiateWithFlags, pGraphExec, graph, flags);
    RETURN(rt(DRV(cuGraphInstantiateWithFlags)((CUgraphExec *)pGraphExec, (CUgraph)graph, flags)));
}

GPUSIM_EXPORT cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
    ENTER(cudaGraphLaunch, graphExec, stream);
    RETURN(rt(DRV(cuGraphLaunch)((CUgraphExec)graphExec, (CUstream)stream)));
}

GPUSIM_EXPORT cudaError_t cudaGraphUpload(cudaGraphExec_t graphExec, cudaStream_t stream) {
    ENTER(cudaGraphUpload, graphExec, stream);
    RETURN(rt(DRV(cuGraphUpload)((CUgraphExec)graphExec, (CUstream)stream)));
}

GPUSIM_EXPORT cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec) {
    ENTER(cudaGraphExecDestroy, graphExec);
    RETURN(rt(DRV(cuGraphExecDestroy)((CUgraphExec)graphExec)));
}

GPUSIM_EXPORT cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    ENTER(cudaGraphDestroy, graph);
    RETURN(rt(DRV(cuGraphDestroy)((CUgraph)graph)));
}
