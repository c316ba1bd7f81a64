//! Stack unwinding for gpuperf: complete native stacks without frame pointers, plus
//! CPython frames, taken in process by the injection library or from a copied stack
//! by the eBPF profiler.
//!
//! The shape follows framehop, which does the `.eh_frame` work: the caller supplies
//! the module list (or lets [`LocalUnwinder`] read it with `dl_iterate_phdr`) and a
//! way to read the stack; the unwinder returns frames as (module, offset) and
//! nothing else. Symbols come later, from the module's path and build id (blazesym),
//! so a process that has exited is symbolized like a live one.
//!
//! ```text
//!             in process (inject)                 out of process (profiler)
//!  modules    dl_iterate_phdr, sections in place   /proc/PID/maps + files (mmap)
//!  registers  current_regs!() at the call site     copied by BPF at the probe
//!  stack      own stack, bounded by its mapping    a copied window from sp
//!                     \                                  /
//!           walk (no allocation): per address, a cached rule from its FDE;
//!           rsp/rbp-based CFA rules run here, the rest (expressions) by framehop;
//!           a module's code without an FDE: frame-pointer step or bounded scan
//!                                      │
//!                 [Frame::Native{module, offset}…, Frame::Python…, Frame::Unknown]
//!                      + StackEnd (Root = complete; everything else truncated)
//! ```
//!
//! # Example
//!
//! ```
//! use gpuperf_unwind::{Frame, LocalUnwinder, Options, StackEnd, MAX_FRAMES};
//!
//! let unwinder = LocalUnwinder::new(Options::default());
//! let mut frames = [Frame::default(); MAX_FRAMES];
//! let captured = unwinder.capture(0, &mut frames);
//! assert!(captured.len > 0);
//! let modules = unwinder.modules();
//! if let Frame::Native { module, offset, .. } = frames[0] {
//!     println!("{}+{offset:#x}", modules[module.0 as usize].path.display());
//! }
//! println!("complete: {}", captured.end == StackEnd::Root);
//! ```
//!
//! # Threading and errors
//!
//! [`LocalUnwinder::capture`] may run on any thread at once, inside callbacks of
//! other libraries and in signal handlers: it never allocates, takes no lock of
//! its own, makes no cancellation point and never panics. It runs on a stack of
//! its unwind cache, not the caller's; when every cache is in use it yields the
//! CPU a bounded number of times. Memory other than the thread's own stack is
//! read only when the same capture proved it live (the thread's Python frames
//! and what they hold, see [`python`]) or probed it readable; no page is
//! trusted across captures.
//! How a stack ended is data ([`StackEnd`]), and every truncation is counted
//! ([`StatsSnapshot`]). Building module tables reads files and returns [`Error`].

#![cfg(all(target_arch = "x86_64", target_os = "linux"))]

mod coverage;
mod error;
pub mod fallible;
mod frame;
mod loader;
mod local;
mod module;
pub mod python;
mod remote;
mod rule;
mod scan;
mod scratch;
mod stack;
mod table;
mod trail;
mod walk;

pub use coverage::{Coverage, coverage};
pub use error::{Error, Result};
pub use frame::{Captured, CodeId, Frame, MAX_FRAMES, ModuleId, StackEnd, StatsSnapshot};
pub use local::{LocalUnwinder, MIN_STACK_LEFT, Options, WHOLE_ON_CALLER_STACK};
pub use module::ModuleInfo;
pub use remote::{Mapping, RemoteUnwinder, StackCopy, parse_maps};
pub use rule::UnwindCache;
pub use trail::Trail;
pub use walk::Regs;
