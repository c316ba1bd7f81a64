//! The trace data model shared by every reader and writer.
//!
//! All timestamps are nanoseconds. Records read from gpuperf's own files are on
//! `CLOCK_MONOTONIC` (the clock of `bpf_ktime_get_ns()`); records read from the
//! reference tooling's CUPTI log are on `CLOCK_REALTIME` ([`Clock`]).
//!
//! # Modules
//!
//! - `strings`: interned strings ([`StringId`], [`StringTable`]).
//! - `records`: the records of a GPU trace ([`Record`] and what it holds).
//! - `stack`: CPU stacks taken in process, their frames and modules.
//! - `notes`: the notes a recorder leaves, and the texts that start them.
//! - `names`: CUDA API names and which calls launch, copy or set memory.
//! - `driver`: GPU driver events.

mod driver;
mod names;
mod notes;
mod records;
mod stack;
mod strings;

pub use self::driver::{DriverEvent, DriverKind};
pub use self::names::{api_base_name, api_stem, is_copy_api, is_launch_api, is_memset_api};
#[cfg(feature = "render")]
pub(crate) use self::notes::SIMULATED_DEVICE_MARK;
pub use self::notes::{
    AUTOGRAD_OFF_NOTE, Note, PC_BUDGET_NOTE, PC_CONTINUOUS_NOTE, PC_LAUNCHES_NOTE,
    PC_SERIALIZED_NOTE, SIMULATED_GPU_NOTE,
};
pub use self::records::{
    Activity, ActivityKind, ApiCall, ApiDomain, Autograd, AutogradTag, Clock, Device, DropSource,
    Dropped, GraphNode, MemcpyKind, NvtxKind, NvtxRange, Origin, Overhead, PcLaunches, PcSample,
    PeerDevices, Process, ProcessOrigin, ProcessPcLaunches, Record, SyncWait, ThreadName,
    not_issued_base,
};
#[cfg(feature = "render")]
pub(crate) use self::stack::BACKWARD_FRAME;
pub use self::stack::{CallStack, Module, ROOT_FRAMES, Stack, StackEnd, StackFrame, Symbolize};
pub use self::strings::{StringId, StringTable};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_names_lose_version_suffix_only() {
        assert_eq!(api_base_name("cudaLaunchKernel_v7000"), "cudaLaunchKernel");
        assert_eq!(api_base_name("cuMemcpyHtoD_v2"), "cuMemcpyHtoD");
        assert_eq!(api_base_name("cuLaunchKernel"), "cuLaunchKernel");
        assert_eq!(api_base_name("foo_var"), "foo_var");
        assert_eq!(api_base_name("_v12"), "_v12");
        assert_eq!(api_base_name("x_v"), "x_v");
    }

    #[test]
    fn launch_apis_are_recognised() {
        for n in [
            "cudaLaunchKernel_v7000",
            "cudaLaunchKernelExC_v11060",
            "cudaLaunchCooperativeKernel_v9000",
            "cuLaunchKernel",
            "cuLaunchKernelEx",
            "cudaGraphLaunch_v10000",
            "cudaLaunchKernel_ptsz_v7000",
            "__cudaLaunchKernel_v13000",
            "__cudaLaunchKernel_ptsz_v13000",
            "cudaLaunchKernel_ptsz_v7000",
        ] {
            assert!(is_launch_api(n), "{n}");
        }
        for n in [
            "cudaMemcpy_v3020",
            "cuMemAlloc_v2",
            "cudaGraphInstantiate",
            "cudaLaunchHostFunc_v10000",
            "cuLaunchHostFunc",
        ] {
            assert!(!is_launch_api(n), "{n}");
        }
    }

    #[test]
    fn memcpy_kind_round_trips() {
        for v in 0..=10u8 {
            let k = MemcpyKind::from_u8(v);
            assert_eq!(k as u8, v);
            assert_eq!(MemcpyKind::from_name(k.name()), Some(k));
        }
        assert_eq!(MemcpyKind::from_u8(99), MemcpyKind::Unknown);
    }

    #[test]
    fn strings_intern_once() {
        let mut t = StringTable::new();
        let a = t.intern("a");
        assert_eq!(t.intern("b").index(), 1);
        assert_eq!(t.intern("a"), a);
        assert_eq!(t.get(a), "a");
        assert_eq!(t.len(), 2);
    }
}
