//! GPU driver events (`gpuperf record --driver`).

/// What a GPU driver event records (`gpuperf record --driver`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum DriverKind {
    /// NVIDIA's `open` entry point.
    Open,
    /// NVIDIA's `ioctl` entry point, entry to return.
    Ioctl,
    /// NVIDIA's `mmap` entry point.
    Mmap,
    /// NVIDIA's interrupt handler.
    Irq,
    /// NVIDIA's interrupt bottom half, on its kernel thread.
    IrqBottomHalf,
    /// An Xid error (`nvidia:nvidia_dev_xid`).
    Xid,
    /// A job queued on a DRM scheduler ring.
    JobQueued,
    /// A job handed to the hardware.
    JobRun,
    /// A job finished by the hardware.
    JobDone,
    /// A job waiting on a dependency.
    JobWaitDep,
    /// A `dma_fence` made.
    FenceInit,
    /// A `dma_fence` signalled.
    FenceSignaled,
    /// A vertical blank of a display CRTC (`drm:drm_vblank_event`), in an
    /// interrupt or timer.
    Vblank,
    /// A process asked for an event at a vblank (`drm:drm_vblank_event_queued`).
    VblankQueued,
    /// A vblank event sent to the process that asked for it
    /// (`drm:drm_vblank_event_delivered`).
    VblankDelivered,
}

impl DriverKind {
    /// Every kind.
    pub const ALL: [DriverKind; 15] = [
        Self::Open,
        Self::Ioctl,
        Self::Mmap,
        Self::Irq,
        Self::IrqBottomHalf,
        Self::Xid,
        Self::JobQueued,
        Self::JobRun,
        Self::JobDone,
        Self::JobWaitDep,
        Self::FenceInit,
        Self::FenceSignaled,
        Self::Vblank,
        Self::VblankQueued,
        Self::VblankDelivered,
    ];

    /// Its name in the driver event file (as `gpuperf monitor --event` spells events).
    pub fn name(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Ioctl => "ioctl",
            Self::Mmap => "mmap",
            Self::Irq => "irq",
            Self::IrqBottomHalf => "irq_bh",
            Self::Xid => "xid",
            Self::JobQueued => "job_queue",
            Self::JobRun => "job_run",
            Self::JobDone => "job_done",
            Self::JobWaitDep => "job_wait_dep",
            Self::FenceInit => "fence_init",
            Self::FenceSignaled => "fence_signaled",
            Self::Vblank => "vblank",
            Self::VblankQueued => "vblank_queued",
            Self::VblankDelivered => "vblank_delivered",
        }
    }

    /// Its name in words, plural, as summaries count it (`jobs queued`).
    pub fn label(self) -> &'static str {
        match self {
            Self::Open => "opens",
            Self::Ioctl => "ioctls",
            Self::Mmap => "mmaps",
            Self::Irq => "interrupts",
            Self::IrqBottomHalf => "interrupt bottom halves",
            Self::Xid => "Xid errors",
            Self::JobQueued => "jobs queued",
            Self::JobRun => "jobs run",
            Self::JobDone => "jobs done",
            Self::JobWaitDep => "dependency waits",
            Self::FenceInit => "fences made",
            Self::FenceSignaled => "fences signalled",
            Self::Vblank => "vblanks",
            Self::VblankQueued => "vblank events queued",
            Self::VblankDelivered => "vblank events delivered",
        }
    }

    /// The kind named `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// One GPU driver event, on `CLOCK_MONOTONIC` like gpuperf's GPU traces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriverEvent {
    /// When (an ioctl's entry).
    pub ts_ns: u64,
    /// An ioctl's duration; otherwise 0.
    pub dur_ns: u64,
    /// A job's id, its finished fence's `context << 32 | seqno` (the same
    /// on all its events; older recordings hold a kernel address), a
    /// fence's, a vblank event's DRM file (the same on an event's queueing
    /// and delivery); otherwise 0.
    pub id: u64,
    /// An ioctl's return value; a vblank's own timestamp (`CLOCK_MONOTONIC`,
    /// as the DRM core computed it); a job queued or run: the hardware's jobs
    /// in flight (`hw_job_count`); an Xid or a fence signal: 1 when made in
    /// interrupt context (its task is then merely the one interrupted).
    pub ret: i64,
    /// The process (a job's submitter for all its events).
    pub pid: u32,
    /// The thread.
    pub tid: u32,
    /// What happened.
    pub kind: DriverKind,
    /// An ioctl's command, an Xid's number, a vblank's sequence number (for
    /// a queued event the one asked for); a job queued or run: its entity's
    /// queued jobs (`job_count`); otherwise 0.
    pub arg: u32,
    /// The thread's command name (a kernel thread's for interrupts).
    pub comm: String,
    /// A job's ring, an Xid's device, a vblank's CRTC (`crtc N`: an index on
    /// its device, which the tracepoints do not name).
    pub ring: String,
    /// An Xid's message; `high_prec` for a vblank whose timestamp is.
    pub msg: String,
}
