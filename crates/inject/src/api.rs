//! Which CUDA API calls gpuperf records, chosen by name so that every version
//! suffix and per-thread-stream (`_ptsz`) variant CUPTI knows is covered.

use gpuperf_merge::model::{api_stem, is_copy_api, is_launch_api, is_memset_api};

/// What a CUDA API call does, as far as gpuperf cares.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Class {
    /// Not recorded.
    Ignored,
    /// Launches kernels: `cudaLaunchKernel`, `cuLaunchKernelEx`, `cudaGraphLaunch`, ...
    Launch,
    /// Copies memory.
    Memcpy,
    /// Sets memory.
    Memset,
    /// Waits for the GPU.
    Sync,
    /// Allocates or frees memory (`cudaMalloc`, `cuMemFree`, ...): recorded
    /// so that the driver time they take (they map and unmap memory through
    /// the kernel driver) lies in a CUDA call, but no stack is taken (see
    /// [`Class::takes_stack`]).
    Alloc,
    /// `cudaDeviceReset`: destroys the context, so buffers are flushed first.
    Reset,
    /// Copies a graph's nodes (instantiate, clone, exec-update): not recorded,
    /// but while one runs the copies it reports take no stack (they have their
    /// originals').
    GraphCopy,
    /// Destroys a graph, an instantiated graph or a node: not recorded, but
    /// the node teardowns it reports are applied together at its end.
    GraphTeardown,
    /// Makes a stream wait for an event on the GPU (`cuStreamWaitEvent`):
    /// recorded without a stack. The host does not wait: the call returns at
    /// once, so it is no [`Class::Sync`].
    StreamWait,
    /// `cudaProfilerStart`/`cuProfilerStart`: opens a `cudaProfilerApi`
    /// capture window (`capture`). Not recorded; enabled only for that window.
    ProfilerStart,
    /// `cudaProfilerStop`/`cuProfilerStop`: closes it.
    ProfilerStop,
    /// A runtime call gpuperf does not record. Its callbacks are enabled all
    /// the same, so that the driver calls it makes are known to be nested in
    /// it and are not recorded as calls of the program's own.
    Scope,
}

impl Class {
    /// Whether the call causes GPU work, so the CPU profiler wants its stack.
    pub fn fires_marker(self) -> bool {
        matches!(self, Self::Launch | Self::Memcpy | Self::Memset)
    }

    /// Whether the call's CPU stack is taken in process: the calls that cause
    /// GPU work, and the waits for it, so that idle and waiting time is charged
    /// to the code that waited.
    ///
    /// Allocations take none: the join reads a stacked call that is no launch,
    /// copy or memset as a wait for the GPU, which `cudaMalloc` is not, and an
    /// unwind per allocation would be added to calls that programs with their
    /// own allocator (PyTorch's) make in bursts.
    pub fn takes_stack(self) -> bool {
        self.fires_marker() || self == Self::Sync
    }

    /// Whether an API record is written for the call.
    pub fn recorded(self) -> bool {
        !matches!(
            self,
            Self::Ignored
                | Self::GraphCopy
                | Self::GraphTeardown
                | Self::Scope
                | Self::ProfilerStart
                | Self::ProfilerStop
        )
    }
}

/// Runtime calls that are neither recorded nor enabled as a [`Class::Scope`]:
/// queries that programs make around every launch (PyTorch checks the last
/// error and the device each time), whose callbacks would double the cost of a
/// launch, and that make no driver call gpuperf records.
fn is_hot_query(stem: &str) -> bool {
    matches!(
        stem,
        "cudaGetLastError"
            | "cudaPeekAtLastError"
            | "cudaGetDevice"
            | "cudaSetDevice"
            | "cudaGetDeviceCount"
            | "cudaGetDeviceProperties"
            | "cudaDeviceGetAttribute"
            | "cudaDriverGetVersion"
            | "cudaRuntimeGetVersion"
            | "cudaStreamQuery"
            | "cudaEventQuery"
            | "cudaEventRecord"
            | "cudaEventRecordWithFlags"
            | "cudaStreamIsCapturing"
            | "cudaStreamGetCaptureInfo"
            | "cudaThreadExchangeStreamCaptureMode"
            | "cudaStreamGetPriority"
            | "cudaStreamGetFlags"
            | "cudaStreamGetDevice"
            | "cudaPointerGetAttributes"
            | "cudaFuncGetAttributes"
            | "cudaGetFuncBySymbol"
            | "cudaDeviceCanAccessPeer"
            // Text for an error code: no driver call (PyTorch's cuDNN path
            // asks for it around each attention call).
            | "cudaGetErrorString"
            | "cudaGetErrorName"
            // nvcc's `<<<>>>` stubs around every launch of a kernel.
            | "cudaPushCallConfiguration"
            | "cudaPopCallConfiguration"
    )
}

/// Classifies a CUPTI callback name such as `cudaLaunchKernel_ptsz_v7000`.
pub fn classify(name: &str) -> Class {
    if is_launch_api(name) {
        return Class::Launch;
    }
    if is_copy_api(name) {
        return Class::Memcpy;
    }
    if is_memset_api(name) {
        return Class::Memset;
    }
    match api_stem(name) {
        "cudaDeviceSynchronize"
        | "cudaStreamSynchronize"
        | "cudaEventSynchronize"
        | "cudaThreadSynchronize"
        | "cuCtxSynchronize"
        | "cuStreamSynchronize"
        | "cuEventSynchronize" => Class::Sync,
        "cuStreamWaitEvent" => Class::StreamWait,
        "cudaProfilerStart" | "cuProfilerStart" => Class::ProfilerStart,
        "cudaProfilerStop" | "cuProfilerStop" => Class::ProfilerStop,
        "cudaDeviceReset" | "cudaThreadExit" => Class::Reset,
        name if is_alloc_api(name) => Class::Alloc,
        "cudaGraphInstantiate"
        | "cudaGraphInstantiateWithFlags"
        | "cudaGraphInstantiateWithParams"
        | "cudaGraphClone"
        | "cudaGraphExecUpdate"
        | "cuGraphInstantiate"
        | "cuGraphInstantiateWithFlags"
        | "cuGraphInstantiateWithParams"
        | "cuGraphClone"
        | "cuGraphExecUpdate" => Class::GraphCopy,
        "cudaGraphDestroy"
        | "cudaGraphExecDestroy"
        | "cudaGraphDestroyNode"
        | "cuGraphDestroy"
        | "cuGraphExecDestroy"
        | "cuGraphDestroyNode" => Class::GraphTeardown,
        stem if stem.starts_with("cuda") && !is_hot_query(stem) => Class::Scope,
        _ => Class::Ignored,
    }
}

/// Whether a call (its stem) allocates, frees, pins or maps memory.
fn is_alloc_api(stem: &str) -> bool {
    matches!(
        stem,
        // Runtime API.
        "cudaMalloc"
            | "cudaFree"
            | "cudaMallocHost"
            | "cudaFreeHost"
            | "cudaHostAlloc"
            | "cudaMallocManaged"
            | "cudaMallocAsync"
            | "cudaMallocFromPoolAsync"
            | "cudaFreeAsync"
            | "cudaMallocPitch"
            | "cudaMalloc3D"
            | "cudaMallocArray"
            | "cudaMalloc3DArray"
            | "cudaMallocMipmappedArray"
            | "cudaFreeArray"
            | "cudaFreeMipmappedArray"
            | "cudaHostRegister"
            | "cudaHostUnregister"
            // Driver API.
            | "cuMemAlloc"
            | "cuMemAllocPitch"
            | "cuMemAllocHost"
            | "cuMemHostAlloc"
            | "cuMemAllocManaged"
            | "cuMemAllocAsync"
            | "cuMemAllocFromPoolAsync"
            | "cuMemFree"
            | "cuMemFreeHost"
            | "cuMemFreeAsync"
            | "cuMemHostRegister"
            | "cuMemHostUnregister"
            | "cuArrayCreate"
            | "cuArray3DCreate"
            | "cuArrayDestroy"
            | "cuMipmappedArrayCreate"
            | "cuMipmappedArrayDestroy"
            | "cuMemCreate"
            | "cuMemRelease"
            | "cuMemMap"
            | "cuMemUnmap"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiler_api_calls_of_both_apis_open_and_close_windows_unrecorded() {
        for (n, c) in [
            ("cudaProfilerStart_v4000", Class::ProfilerStart),
            ("cuProfilerStart", Class::ProfilerStart),
            ("cudaProfilerStop_v4000", Class::ProfilerStop),
            ("cuProfilerStop", Class::ProfilerStop),
        ] {
            assert_eq!(classify(n), c, "{n}");
            assert!(!c.recorded() && !c.takes_stack());
        }
    }

    #[test]
    fn graph_copies_are_known_and_not_recorded() {
        for n in [
            "cudaGraphInstantiate_v10000",
            "cudaGraphInstantiateWithFlags_v11040",
            "cudaGraphInstantiateWithParams_ptsz_v12000",
            "cudaGraphClone_v10000",
            "cudaGraphExecUpdate_v10020",
            "cuGraphInstantiateWithParams",
            "cuGraphExecUpdate_v2",
        ] {
            assert_eq!(classify(n), Class::GraphCopy, "{n}");
            assert!(!classify(n).recorded());
        }
        for n in [
            "cudaGraphDestroy_v10000",
            "cudaGraphExecDestroy_v10000",
            "cudaGraphDestroyNode_v10000",
            "cuGraphExecDestroy",
            "cuGraphDestroy",
        ] {
            assert_eq!(classify(n), Class::GraphTeardown, "{n}");
            assert!(!classify(n).recorded());
        }
    }

    #[test]
    fn launch_calls_of_both_apis_and_all_variants() {
        for n in [
            "cudaLaunchKernel_v7000",
            "cudaLaunchKernel_ptsz_v7000",
            "cudaLaunchKernelExC_v11060",
            "cudaLaunchCooperativeKernel_v9000",
            "cudaLaunchCooperativeKernelMultiDevice_v9000",
            "cudaGraphLaunch_v10000",
            "cudaGraphLaunch_ptsz_v10000",
            "__cudaLaunchKernel_v13000",
            "__cudaLaunchKernel_ptsz_v13000",
            "cuLaunchKernel",
            "cuLaunchKernel_ptsz",
            "cuLaunchKernelEx",
            "cuLaunchCooperativeKernel",
            "cuGraphLaunch",
            "cuGraphLaunch_ptsz",
        ] {
            assert_eq!(classify(n), Class::Launch, "{n}");
        }
    }

    #[test]
    fn copies_sets_syncs_and_reset() {
        assert_eq!(classify("cudaMemcpyAsync_ptsz_v7000"), Class::Memcpy);
        assert_eq!(classify("cuMemcpyHtoDAsync_v2"), Class::Memcpy);
        assert_eq!(classify("cudaMemcpy2DToArray_v3020"), Class::Memcpy);
        assert_eq!(classify("cudaMemsetAsync_v3020"), Class::Memset);
        assert_eq!(classify("cuMemsetD32_v2"), Class::Memset);
        assert_eq!(classify("cudaStreamSynchronize_v3020"), Class::Sync);
        assert_eq!(classify("cuCtxSynchronize"), Class::Sync);
        assert_eq!(classify("cudaDeviceReset_v3020"), Class::Reset);
    }

    #[test]
    fn everything_else_is_left_alone() {
        for n in [
            "cuLaunchHostFunc",
            "cuMemAllocator",
            "cudaGetLastError_v3020",
            "cudaGetDevice_v3020",
            "cudaEventRecord_ptsz_v3020",
            "cuCtxGetCurrent",
            "__cudaPushCallConfiguration_v13000",
            "__cudaPopCallConfiguration_v13000",
            "cudaGetErrorString_v3020",
            "",
        ] {
            assert_eq!(classify(n), Class::Ignored, "{n}");
        }
        // Other runtime calls are not recorded, but their driver calls are
        // known as nested.
        for n in [
            "cudaLaunchHostFunc_v10000",
            "cudaLaunchHostFunc_ptsz_v10000",
            "cudaMallocHostFunc_v3020",
            "cudaMemGetInfo_v3020",
            "cudaStreamCreate_v3020",
        ] {
            assert_eq!(classify(n), Class::Scope, "{n}");
            assert!(!Class::Scope.recorded() && !Class::Scope.takes_stack());
        }
        assert!(!Class::Sync.fires_marker());
        assert!(Class::Memcpy.fires_marker());
    }

    #[test]
    fn allocations_of_both_apis_are_recorded_without_a_stack() {
        for n in [
            "cudaMalloc_v3020",
            "cudaFree_v3020",
            "cudaMallocHost_v3020",
            "cudaFreeHost_v3020",
            "cudaHostAlloc_v3020",
            "cudaMallocManaged_v6000",
            "cudaMallocAsync_v11020",
            "cudaMallocAsync_ptsz_v11020",
            "cudaFreeAsync_v11020",
            "cudaMallocFromPoolAsync_v11020",
            "cudaMallocPitch_v3020",
            "cudaMalloc3D_v3020",
            "cudaMallocArray_v3020",
            "cudaFreeArray_v3020",
            "cudaHostRegister_v4000",
            "cuMemAlloc",
            "cuMemAlloc_v2",
            "cuMemAllocPitch_v2",
            "cuMemAllocHost_v2",
            "cuMemHostAlloc",
            "cuMemAllocManaged",
            "cuMemAllocAsync",
            "cuMemAllocAsync_ptsz",
            "cuMemAllocFromPoolAsync",
            "cuMemFree_v2",
            "cuMemFreeHost",
            "cuMemFreeAsync_ptsz",
            "cuMemHostRegister_v2",
            "cuArrayCreate_v2",
            "cuMemCreate",
            "cuMemMap",
        ] {
            let c = classify(n);
            assert_eq!(c, Class::Alloc, "{n}");
            assert!(c.recorded() && !c.takes_stack() && !c.fires_marker(), "{n}");
        }
        // Queries about memory are no allocations.
        for n in [
            "cudaMemGetInfo_v3020",
            "cuMemGetInfo_v2",
            "cuMemGetAddressRange_v2",
        ] {
            assert!(!classify(n).recorded(), "{n}");
        }
    }

    #[test]
    fn sync_calls_take_a_stack_but_fire_no_marker() {
        for n in [
            "cudaDeviceSynchronize_v3020",
            "cudaStreamSynchronize_ptsz_v7000",
            "cudaEventSynchronize_v3020",
            "cuCtxSynchronize",
            "cuStreamSynchronize",
            "cuEventSynchronize",
        ] {
            let c = classify(n);
            assert!(c.takes_stack() && !c.fires_marker(), "{n}");
        }
        assert!(Class::Launch.takes_stack());
        // A stream's wait for an event is queued; the host goes on at once.
        for n in [
            "cudaStreamWaitEvent_v3020",
            "cudaStreamWaitEvent_ptsz_v7000",
            "cuStreamWaitEvent",
        ] {
            let c = classify(n);
            assert!(c != Class::Sync && !c.takes_stack(), "{n}");
        }
        for c in [Class::Ignored, Class::Reset, Class::GraphCopy] {
            assert!(!c.takes_stack(), "{c:?}");
        }
    }
}
