//! Backward GPU work under the forward Python line that made it.
//!
//! PyTorch's autograd runs backward nodes on its own threads, where no Python
//! frame encloses their launches. Every reader that knows which forward op
//! made a backward node charges the node's launches to the same shape:
//!
//! ```text
//! <forward op's stack, its Python frames outermost first>;[backward];<the backward launch's own stack>
//! ```
//!
//! The PyTorch profiler reader (`read::kineto`) links ops by the trace's
//! `fwdbwd` flows or sequence numbers. gpuperf's own recordings carry, per
//! launch, the autograd ids the injection library read from libtorch
//! ([`AutogradTag`]): a backward launch of node `(thread T, seq S)` is charged
//! to the first forward launch on RecordFunction thread `T` whose thread's next
//! sequence number was `S + 1`, i.e. the first launch after the node was made,
//! which is the forward op's own first kernel (autograd makes the node before
//! the op runs). The forward stack is cut after its innermost Python frame:
//! what the user wrote, not the forward kernel's native path.

use std::collections::BTreeMap;
use std::fmt;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::model::{AutogradTag, BACKWARD_FRAME};

pub use crate::model::AUTOGRAD_OFF_NOTE;

/// A backward launch's stack under its forward op's: `forward;[backward];own`.
pub(crate) fn under_forward(forward: &str, own: &str) -> String {
    if forward.is_empty() {
        return format!("{BACKWARD_FRAME};{own}");
    }
    format!("{forward};{BACKWARD_FRAME};{own}")
}

/// Why a backward launch stayed on autograd's thread.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Unlinked {
    /// The node has no forward op (`AccumulateGrad`: no sequence number).
    NoForwardOp,
    /// No forward launch read the node's next sequence number: the forward op
    /// launched nothing, or before gpuperf looked at libtorch.
    NoForwardLaunch,
    /// The process's recorder turned its autograd reading off.
    Off,
}

impl Unlinked {
    fn describe(self) -> &'static str {
        match self {
            Self::NoForwardOp => "made by a node without a forward op (AccumulateGrad)",
            Self::NoForwardLaunch => "whose forward op launched nothing gpuperf tagged",
            Self::Off => "of processes whose autograd reading was turned off",
        }
    }
}

/// How backward launches were charged.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackwardStats {
    /// Backward launches charged under their forward op's stack.
    pub linked: u64,
    /// Backward launches left on autograd's thread, by why.
    pub unlinked: BTreeMap<Unlinked, u64>,
}

impl BackwardStats {
    /// Whether any launch was tagged backward.
    pub fn is_empty(&self) -> bool {
        self.linked == 0 && self.unlinked.is_empty()
    }
}

impl fmt::Display for BackwardStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} backward launches under their forward line",
            self.linked
        )?;
        if !self.unlinked.is_empty() {
            let why: Vec<String> = self
                .unlinked
                .iter()
                .map(|(w, n)| format!("{n} {}", w.describe()))
                .collect();
            write!(f, ", not: {}", why.join(", "))?;
        }
        Ok(())
    }
}

/// One launch as [`link`] sees it.
#[derive(Copy, Clone, Debug)]
pub struct Launch {
    /// Process id.
    pub pid: u32,
    /// Entry time.
    pub start_ns: u64,
    /// Its autograd ids, if any.
    pub tag: Option<AutogradTag>,
}

/// A backward launch's index and the forward launch's it is charged to, or
/// why none.
pub type Link = (usize, Result<usize, Unlinked>);

/// For each backward launch, the index of the forward launch it is charged
/// to, or why none.
pub fn link(launches: &[Launch], off: &FxHashSet<u32>) -> (Vec<Link>, BackwardStats) {
    // (pid, thread, next seq) → the first forward launch that read it.
    let mut first: FxHashMap<(u32, u64, u64), usize> = FxHashMap::default();
    for (i, l) in launches.iter().enumerate() {
        if let Some(AutogradTag::Forward { thread, next_seq }) = l.tag {
            first
                .entry((l.pid, thread, next_seq))
                .and_modify(|f| {
                    if (launches[*f].start_ns, *f) > (l.start_ns, i) {
                        *f = i;
                    }
                })
                .or_insert(i);
        }
    }
    let mut stats = BackwardStats::default();
    let mut out = Vec::new();
    for (i, l) in launches.iter().enumerate() {
        let Some(AutogradTag::Backward { thread, seq }) = l.tag else {
            continue;
        };
        let found = if off.contains(&l.pid) {
            Err(Unlinked::Off)
        } else if let Some(seq) = seq {
            first
                .get(&(l.pid, thread, seq + 1))
                .copied()
                .ok_or(Unlinked::NoForwardLaunch)
        } else {
            Err(Unlinked::NoForwardOp)
        };
        match found {
            Ok(_) => stats.linked += 1,
            Err(why) => *stats.unlinked.entry(why).or_default() += 1,
        }
        out.push((i, found));
    }
    (out, stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fwd(start_ns: u64, thread: u64, next_seq: u64) -> Launch {
        Launch {
            pid: 1,
            start_ns,
            tag: Some(AutogradTag::Forward { thread, next_seq }),
        }
    }

    fn bwd(start_ns: u64, thread: u64, seq: Option<u64>) -> Launch {
        Launch {
            pid: 1,
            start_ns,
            tag: Some(AutogradTag::Backward { thread, seq }),
        }
    }

    #[test]
    fn a_backward_node_goes_to_the_first_launch_after_its_forward_node_on_its_thread() {
        let launches = [
            fwd(10, 1, 5),       // 0: node 4's op
            fwd(12, 1, 5),       // 1: its second kernel
            fwd(14, 2, 5),       // 2: another thread, same number
            fwd(20, 1, 6),       // 3: node 5's op
            bwd(30, 1, Some(5)), // 4 → 3
            bwd(31, 1, Some(4)), // 5 → 0
            bwd(32, 2, Some(4)), // 6 → 2
            bwd(33, 1, Some(9)), // 7: no forward launch
            bwd(34, 1, None),    // 8: AccumulateGrad
            Launch {
                pid: 1,
                start_ns: 40,
                tag: None,
            },
        ];
        let (links, stats) = link(&launches, &FxHashSet::default());
        assert_eq!(
            links,
            [
                (4, Ok(3)),
                (5, Ok(0)),
                (6, Ok(2)),
                (7, Err(Unlinked::NoForwardLaunch)),
                (8, Err(Unlinked::NoForwardOp)),
            ]
        );
        assert_eq!(stats.linked, 3);
        let text = stats.to_string();
        assert!(
            text.contains("3 backward launches under their forward line"),
            "{text}"
        );
        assert!(
            text.contains("1 made by a node without a forward op"),
            "{text}"
        );
        // Turned off in the process: nothing links.
        let (links, stats) = link(&launches, &[1].into_iter().collect());
        assert!(links.iter().all(|(_, l)| *l == Err(Unlinked::Off)));
        assert_eq!(stats.linked, 0);
    }

    #[test]
    fn the_shape_is_forward_then_backward_then_own() {
        assert_eq!(under_forward("a;b", "c;d"), "a;b;[backward];c;d");
        assert_eq!(under_forward("", "c"), "[backward];c");
    }
}
