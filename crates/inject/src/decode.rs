//! Decoding of CUPTI activity records.
//!
//! Each record arrives as the bytes from its start to the end of the buffer's valid
//! data. Fields are read at the offsets of cudarc's CUDA 13.0 structs
//! (`CUpti_ActivityKernel10`, `Memcpy6`, `MemcpyPtoP4`, `Memset4`, `Synchronization2`,
//! `Overhead3`, `Device5`, `Context2`). Every field read here sits in the prefix that these share
//! with the versions CUDA 12.0 to 12.9 write (`Kernel8`/`Kernel9`, `Memcpy5`,
//! `Memset3`, ...): later versions only append fields. So one decoder serves both
//! majors, and a field that would lie past the record's end is never read.

use std::ffi::c_char;
use std::mem::offset_of;

use gpuperf_merge::model::PeerDevices;

use crate::sys::{
    CUpti_ActivityContext2 as Context, CUpti_ActivityDevice5 as Device,
    CUpti_ActivityKernel10 as Kernel, CUpti_ActivityKind as K, CUpti_ActivityMemcpy6 as Memcpy,
    CUpti_ActivityMemcpyPtoP4 as PeerCopy, CUpti_ActivityMemset4 as Memset,
    CUpti_ActivityOverhead3 as Overhead, CUpti_ActivitySynchronization2 as Sync,
};

/// Where a record happened on the GPU.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Place {
    /// GPU start.
    pub start_ns: u64,
    /// GPU end.
    pub end_ns: u64,
    /// Correlation id of the API call that caused it.
    pub correlation_id: u32,
    /// Device ordinal; `u32::MAX` when the record does not say.
    pub device: u32,
    /// Context id.
    pub context: u32,
    /// Stream id.
    pub stream: u32,
    /// Graph id, 0 outside graphs.
    pub graph_id: u32,
    /// Graph node id, 0 outside graphs.
    pub graph_node_id: u64,
}

impl Decoded {
    /// Moves every known time by `by` ns: records on CUPTI's default clock
    /// onto CLOCK_MONOTONIC. An end of 0 (work still running) stays 0.
    pub fn shift(&mut self, by: i64) {
        let mv = |t: &mut u64| {
            if *t != 0 {
                *t = t.saturating_add_signed(by);
            }
        };
        match self {
            Decoded::Kernel { place, .. }
            | Decoded::Memcpy { place, .. }
            | Decoded::Memset { place, .. }
            | Decoded::Sync { place, .. } => {
                mv(&mut place.start_ns);
                mv(&mut place.end_ns);
            }
            Decoded::Overhead {
                start_ns, end_ns, ..
            } => {
                mv(start_ns);
                mv(end_ns);
            }
            _ => {}
        }
    }
}

/// One decoded activity record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decoded {
    /// `CONCURRENT_KERNEL` (or `KERNEL`).
    Kernel {
        /// Timing and placement.
        place: Place,
        /// Grid size.
        grid: [u32; 3],
        /// Block size.
        block: [u32; 3],
        /// The kernel name in CUPTI's buffer, valid only while the buffer is.
        name: *const c_char,
    },
    /// `MEMCPY`, or `MEMCPY2` for a copy between two devices.
    Memcpy {
        /// Timing and placement; the correlation id is the runtime call's when there was one.
        place: Place,
        /// `CUpti_ActivityMemcpyKind`.
        copy_kind: u8,
        /// Bytes copied.
        bytes: u64,
        /// Source and destination devices of a `MEMCPY2` record.
        peer: Option<PeerDevices>,
    },
    /// `MEMSET`.
    Memset {
        /// Timing and placement.
        place: Place,
        /// Value set.
        value: u32,
        /// Bytes set.
        bytes: u64,
    },
    /// `SYNCHRONIZATION`; the device comes from the context.
    Sync {
        /// Timing and placement.
        place: Place,
        /// `CUpti_ActivitySynchronizationType`.
        sync_type: u32,
    },
    /// `OVERHEAD`.
    Overhead {
        /// `CUpti_ActivityOverheadKind`.
        kind: u32,
        /// The API call the overhead delayed (a lazily loaded kernel's first
        /// launch), 0 for none. Only `Overhead3` (CUDA 12.4 on) has the field:
        /// callers zero it for older CUPTIs, whose record ends before it.
        correlation_id: u32,
        /// Start.
        start_ns: u64,
        /// End.
        end_ns: u64,
    },
    /// `DEVICE`.
    Device {
        /// Ordinal.
        id: u32,
        /// Compute capability.
        cc: (u32, u32),
        /// Name in CUPTI's buffer.
        name: *const c_char,
    },
    /// `CONTEXT`.
    Context {
        /// Context id.
        context: u32,
        /// Its device.
        device: u32,
    },
    /// A kind gpuperf does not enable.
    Other {
        /// `CUpti_ActivityKind`.
        kind: u32,
    },
}

impl Decoded {
    /// GPU start and end, for the kinds that have them.
    pub fn span(&self) -> Option<(u64, u64)> {
        match self {
            Self::Kernel { place, .. }
            | Self::Memcpy { place, .. }
            | Self::Memset { place, .. }
            | Self::Sync { place, .. } => Some((place.start_ns, place.end_ns)),
            Self::Overhead {
                start_ns, end_ns, ..
            } => Some((*start_ns, *end_ns)),
            Self::Device { .. } | Self::Context { .. } | Self::Other { .. } => None,
        }
    }

    /// The API call the work came from: `Some(0)` for work of no call (an
    /// overhead with none), `None` for records that describe no work.
    pub fn correlation_id(&self) -> Option<u32> {
        match self {
            Self::Kernel { place, .. }
            | Self::Memcpy { place, .. }
            | Self::Memset { place, .. }
            | Self::Sync { place, .. } => Some(place.correlation_id),
            Self::Overhead { correlation_id, .. } => Some(*correlation_id),
            Self::Device { .. } | Self::Context { .. } | Self::Other { .. } => None,
        }
    }

    /// Whether a timed record lacks a valid start or end: CUPTI returns a record
    /// whose work has not finished with `end = 0` from a forced flush, and never
    /// again afterwards.
    pub fn incomplete(&self) -> bool {
        self.span()
            .is_some_and(|(start, end)| start == 0 || end == 0 || end < start)
    }
}

fn u8_at(r: &[u8], off: usize) -> Option<u8> {
    r.get(off).copied()
}

fn u32_at(r: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes(r.get(off..off + 4)?.try_into().ok()?))
}

fn u64_at(r: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_le_bytes(r.get(off..off + 8)?.try_into().ok()?))
}

fn ptr_at(r: &[u8], off: usize) -> Option<*const c_char> {
    // Pointers are kept as integers until a caller that knows the buffer is alive
    // turns them back; see `Decoded::Kernel::name`.
    Some(usize::try_from(u64_at(r, off)?).ok()? as *const c_char)
}

/// Grid and block sizes are `int` in CUPTI; negative values become 0.
fn dim_at(r: &[u8], off: usize) -> Option<u32> {
    Some(u32::try_from(u32_at(r, off)? as i32).unwrap_or(0))
}

/// The record's `CUpti_ActivityKind`, `None` for fewer than 4 bytes.
pub fn kind(rec: &[u8]) -> Option<u32> {
    u32_at(rec, 0)
}

/// Decodes one record; `None` when it is shorter than the fields gpuperf reads.
pub fn decode(rec: &[u8]) -> Option<Decoded> {
    let kind = kind(rec)?;
    Some(match kind {
        k if k == K::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL as u32
            || k == K::CUPTI_ACTIVITY_KIND_KERNEL as u32 =>
        {
            Decoded::Kernel {
                place: Place {
                    start_ns: u64_at(rec, offset_of!(Kernel, start))?,
                    end_ns: u64_at(rec, offset_of!(Kernel, end))?,
                    correlation_id: u32_at(rec, offset_of!(Kernel, correlationId))?,
                    device: u32_at(rec, offset_of!(Kernel, deviceId))?,
                    context: u32_at(rec, offset_of!(Kernel, contextId))?,
                    stream: u32_at(rec, offset_of!(Kernel, streamId))?,
                    graph_id: u32_at(rec, offset_of!(Kernel, graphId))?,
                    graph_node_id: u64_at(rec, offset_of!(Kernel, graphNodeId))?,
                },
                grid: [
                    dim_at(rec, offset_of!(Kernel, gridX))?,
                    dim_at(rec, offset_of!(Kernel, gridY))?,
                    dim_at(rec, offset_of!(Kernel, gridZ))?,
                ],
                block: [
                    dim_at(rec, offset_of!(Kernel, blockX))?,
                    dim_at(rec, offset_of!(Kernel, blockY))?,
                    dim_at(rec, offset_of!(Kernel, blockZ))?,
                ],
                name: ptr_at(rec, offset_of!(Kernel, name))?,
            }
        }
        k if k == K::CUPTI_ACTIVITY_KIND_MEMCPY as u32 => {
            // A copy made through the runtime carries the runtime call's id apart
            // from the driver's; the runtime call is the one the CPU side saw.
            let driver = u32_at(rec, offset_of!(Memcpy, correlationId))?;
            let runtime = u32_at(rec, offset_of!(Memcpy, runtimeCorrelationId))?;
            Decoded::Memcpy {
                place: Place {
                    start_ns: u64_at(rec, offset_of!(Memcpy, start))?,
                    end_ns: u64_at(rec, offset_of!(Memcpy, end))?,
                    correlation_id: if runtime != 0 { runtime } else { driver },
                    device: u32_at(rec, offset_of!(Memcpy, deviceId))?,
                    context: u32_at(rec, offset_of!(Memcpy, contextId))?,
                    stream: u32_at(rec, offset_of!(Memcpy, streamId))?,
                    graph_id: u32_at(rec, offset_of!(Memcpy, graphId))?,
                    graph_node_id: u64_at(rec, offset_of!(Memcpy, graphNodeId))?,
                },
                copy_kind: u8_at(rec, offset_of!(Memcpy, copyKind))?,
                bytes: u64_at(rec, offset_of!(Memcpy, bytes))?,
                peer: None,
            }
        }
        // `MemcpyPtoP4` is the layout of CUDA 12.0 to 13.x alike. It has no
        // runtime correlation id; a driver id is mapped to the runtime call's
        // through the nested-call aliases.
        k if k == K::CUPTI_ACTIVITY_KIND_MEMCPY2 as u32 => Decoded::Memcpy {
            place: Place {
                start_ns: u64_at(rec, offset_of!(PeerCopy, start))?,
                end_ns: u64_at(rec, offset_of!(PeerCopy, end))?,
                correlation_id: u32_at(rec, offset_of!(PeerCopy, correlationId))?,
                device: u32_at(rec, offset_of!(PeerCopy, deviceId))?,
                context: u32_at(rec, offset_of!(PeerCopy, contextId))?,
                stream: u32_at(rec, offset_of!(PeerCopy, streamId))?,
                graph_id: u32_at(rec, offset_of!(PeerCopy, graphId))?,
                graph_node_id: u64_at(rec, offset_of!(PeerCopy, graphNodeId))?,
            },
            copy_kind: u8_at(rec, offset_of!(PeerCopy, copyKind))?,
            bytes: u64_at(rec, offset_of!(PeerCopy, bytes))?,
            peer: Some(PeerDevices {
                src: u32_at(rec, offset_of!(PeerCopy, srcDeviceId))?,
                dst: u32_at(rec, offset_of!(PeerCopy, dstDeviceId))?,
            }),
        },
        k if k == K::CUPTI_ACTIVITY_KIND_MEMSET as u32 => Decoded::Memset {
            place: Place {
                start_ns: u64_at(rec, offset_of!(Memset, start))?,
                end_ns: u64_at(rec, offset_of!(Memset, end))?,
                correlation_id: u32_at(rec, offset_of!(Memset, correlationId))?,
                device: u32_at(rec, offset_of!(Memset, deviceId))?,
                context: u32_at(rec, offset_of!(Memset, contextId))?,
                stream: u32_at(rec, offset_of!(Memset, streamId))?,
                graph_id: u32_at(rec, offset_of!(Memset, graphId))?,
                graph_node_id: u64_at(rec, offset_of!(Memset, graphNodeId))?,
            },
            value: u32_at(rec, offset_of!(Memset, value))?,
            bytes: u64_at(rec, offset_of!(Memset, bytes))?,
        },
        k if k == K::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION as u32 => Decoded::Sync {
            place: Place {
                start_ns: u64_at(rec, offset_of!(Sync, start))?,
                end_ns: u64_at(rec, offset_of!(Sync, end))?,
                correlation_id: u32_at(rec, offset_of!(Sync, correlationId))?,
                device: u32::MAX,
                context: u32_at(rec, offset_of!(Sync, contextId))?,
                // CUPTI_SYNCHRONIZATION_INVALID_VALUE (a context or event sync)
                // is 0xffffffff, which is also the model's "no stream".
                stream: u32_at(rec, offset_of!(Sync, streamId))?,
                graph_id: 0,
                graph_node_id: 0,
            },
            sync_type: u32_at(rec, offset_of!(Sync, type_))?,
        },
        k if k == K::CUPTI_ACTIVITY_KIND_OVERHEAD as u32 => Decoded::Overhead {
            kind: u32_at(rec, offset_of!(Overhead, overheadKind))?,
            correlation_id: u32_at(rec, offset_of!(Overhead, correlationId)).unwrap_or(0),
            start_ns: u64_at(rec, offset_of!(Overhead, start))?,
            end_ns: u64_at(rec, offset_of!(Overhead, end))?,
        },
        k if k == K::CUPTI_ACTIVITY_KIND_DEVICE as u32 => Decoded::Device {
            id: u32_at(rec, offset_of!(Device, id))?,
            cc: (
                u32_at(rec, offset_of!(Device, computeCapabilityMajor))?,
                u32_at(rec, offset_of!(Device, computeCapabilityMinor))?,
            ),
            name: ptr_at(rec, offset_of!(Device, name))?,
        },
        k if k == K::CUPTI_ACTIVITY_KIND_CONTEXT as u32 => Decoded::Context {
            context: u32_at(rec, offset_of!(Context, contextId))?,
            device: u32_at(rec, offset_of!(Context, deviceId))?,
        },
        kind => Decoded::Other { kind },
    })
}

/// Name of a `CUpti_ActivityOverheadKind`, as CUPTI's headers spell it.
pub fn overhead_name(kind: u32) -> &'static str {
    match kind {
        1 => "DRIVER_COMPILER",
        0x10000 => "CUPTI_BUFFER_FLUSH",
        0x20000 => "CUPTI_INSTRUMENTATION",
        0x30000 => "CUPTI_RESOURCE",
        0x40000 => "RUNTIME_TRIGGERED_MODULE_LOADING",
        0x50000 => "LAZY_FUNCTION_LOADING",
        0x60000 => "COMMAND_BUFFER_FULL",
        0x70000 => "ACTIVITY_BUFFER_REQUEST",
        0x80000 => "UVM_ACTIVITY_INIT",
        _ => "UNKNOWN",
    }
}

/// The activity kinds gpuperf enables, by name for messages.
pub const ENABLED_KINDS: [(K, &str); 8] = [
    (
        K::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
        "CONCURRENT_KERNEL",
    ),
    (K::CUPTI_ACTIVITY_KIND_MEMCPY, "MEMCPY"),
    (K::CUPTI_ACTIVITY_KIND_MEMCPY2, "MEMCPY2"),
    (K::CUPTI_ACTIVITY_KIND_MEMSET, "MEMSET"),
    (K::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, "SYNCHRONIZATION"),
    (K::CUPTI_ACTIVITY_KIND_OVERHEAD, "OVERHEAD"),
    (K::CUPTI_ACTIVITY_KIND_DEVICE, "DEVICE"),
    (K::CUPTI_ACTIVITY_KIND_CONTEXT, "CONTEXT"),
];
