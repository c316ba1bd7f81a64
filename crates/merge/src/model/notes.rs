//! The notes a recorder leaves in a trace, and the texts that start them.

use std::fmt;

/// How a [`Note`] starts when the trace was recorded on gpuperf's simulated CUDA
/// runtime (no GPU): outputs show such traces as "simulated GPU".
pub const SIMULATED_GPU_NOTE: &str = "simulated GPU";

/// What the simulated CUDA runtime puts in every device's name
/// (`sim/src/driver_sim.c`): a trace another tool recorded there, such as a
/// PyTorch profiler trace, is known as simulated by its devices.
#[cfg(feature = "render")]
pub(crate) const SIMULATED_DEVICE_MARK: &str = "(gpusim, not a real GPU)";

/// A message the recorder left in the trace, such as why it is empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// Process id.
    pub pid: u32,
    /// The message.
    pub text: String,
}

/// `pid N: text`, as summaries and the Chrome trace's metadata show it.
impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pid {}: {}", self.pid, self.text)
    }
}

/// The start of the NOTE the injection library writes when PC sampling ran in
/// kernel-serialized mode: sampled kernels ran one at a time, so kernel times
/// and overlaps in the trace are those of a serialized run.
pub const PC_SERIALIZED_NOTE: &str = "kernels serialized for PC sampling";

/// The start of the NOTE the injection library writes when PC sampling ran in
/// continuous mode: samples name no launch.
pub const PC_CONTINUOUS_NOTE: &str = "PC sampling in continuous mode";

/// The start of the NOTE that counts the launches PC sampling covered
/// ([`PcLaunches::note`](super::PcLaunches::note)).
pub const PC_LAUNCHES_NOTE: &str = "PC sampling windows:";

/// The start of the NOTE that counts the launches of PC sampling's windows
/// left unsampled to keep within its budget of the run's time.
pub const PC_BUDGET_NOTE: &str = "PC sampling budget:";

/// The start of the NOTE the injection library writes when it turned its
/// autograd reading off: the merge then links no backward launch of that
/// process.
pub const AUTOGRAD_OFF_NOTE: &str = "autograd ids not recorded";
