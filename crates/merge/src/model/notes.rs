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

/// The start of the NOTE that counts the launches PC sampling covered.
pub const PC_LAUNCHES_NOTE: &str = "PC sampling windows:";

/// Launches inside and outside PC sampling's windows, as the injection library
/// counted them; its NOTE ([`PC_LAUNCHES_NOTE`]) is [`PcLaunches::note`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PcLaunches {
    /// Launches made while sampling was on in their context.
    pub sampled: u64,
    /// The others: outside a window, or in a context without sampling.
    pub unsampled: u64,
}

impl PcLaunches {
    /// The note's text; `window` says which launches were asked for.
    pub fn note(&self, window: &str) -> String {
        format!(
            "{PC_LAUNCHES_NOTE} {} of {} launches sampled (window {window}); the {} others \
             have no PC samples, and no count is scaled up for them",
            self.sampled,
            self.sampled + self.unsampled,
            self.unsampled
        )
    }

    /// Reads a note [`PcLaunches::note`] wrote.
    pub fn parse(text: &str) -> Option<Self> {
        let rest = text.strip_prefix(PC_LAUNCHES_NOTE)?.trim_start();
        let (sampled, rest) = rest.split_once(" of ")?;
        let (total, _) = rest.split_once(' ')?;
        let (sampled, total): (u64, u64) = (sampled.parse().ok()?, total.parse().ok()?);
        Some(Self {
            sampled,
            unsampled: total.checked_sub(sampled)?,
        })
    }
}

/// The start of the NOTE the injection library writes when it turned its
/// autograd reading off: the merge then links no backward launch of that
/// process.
pub const AUTOGRAD_OFF_NOTE: &str = "autograd ids not recorded";
