//! CPU stacks taken in process: modules, frames, the stacks and the calls they
//! belong to, and how native frames are named.

use super::strings::StringId;

/// A module (executable, shared library) as the injection library saw it loaded;
/// native frames of [`Stack`]s refer to it by [`Module::id`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module {
    /// Process id.
    pub pid: u32,
    /// Id within the process's trace.
    pub id: u32,
    /// The file as the loader named it.
    pub path: String,
    /// GNU build id, empty when the module has none.
    pub build_id: Vec<u8>,
    /// Load bias: absolute address = ELF virtual address + bias.
    pub bias: u64,
    /// Absolute start of its executable segments.
    pub text_start: u64,
    /// Absolute end of its executable segments.
    pub text_end: u64,
}

/// Names native frames.
pub trait Symbolize {
    /// Names each of `offsets` (ELF virtual addresses in `module`'s file): the
    /// function, and the functions inlined at that address, innermost first. An
    /// empty list means unknown; the frame is then shown as `file+0xoffset`.
    fn symbolize(&mut self, module: &Module, offsets: &[u64]) -> Vec<Vec<String>>;
}

/// Frames a complete stack starts with: the process's entry point, the thread
/// starts (`clone`, `clone3`, glibc's `start_thread`) and where a `makecontext`
/// coroutine starts (glibc's `__start_context`).
pub const ROOT_FRAMES: [&str; 7] = [
    "_start",
    "clone",
    "clone3",
    "__clone",
    "__clone3",
    "start_thread",
    "__start_context",
];

/// Why a stack taken in process ended. Only [`StackEnd::Root`] is a complete stack.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum StackEnd {
    /// The outermost frame is a root (`_start`, `clone`, `clone3`).
    Root,
    /// Code without unwind information (JIT code); the stack ends in `[unknown]`.
    NoUnwindInfo,
    /// Code in a module loaded after the module table was built.
    ModuleNotInTable,
    /// A read fell outside the thread's stack.
    StackReadFailed,
    /// The unwind information could not be applied.
    UnwindFailed,
    /// Deeper than the depth cap.
    DepthLimit,
    /// The unwinder was busy on every cache; nothing was captured.
    Busy,
    /// The native stack is complete but an outer interpreter's Python frames
    /// are missing (a subinterpreter called from another interpreter).
    PythonCut,
    /// A reason this build does not know (its code).
    Other(u8),
}

impl StackEnd {
    const CODES: [StackEnd; 8] = [
        Self::Root,
        Self::NoUnwindInfo,
        Self::ModuleNotInTable,
        Self::StackReadFailed,
        Self::UnwindFailed,
        Self::DepthLimit,
        Self::Busy,
        Self::PythonCut,
    ];

    /// The code stored in the GPU trace.
    pub fn code(self) -> u8 {
        match self {
            Self::Other(c) => c,
            s => Self::CODES.iter().position(|&k| k == s).unwrap_or(0) as u8,
        }
    }

    /// From the code stored in the GPU trace.
    pub(crate) fn from_code(c: u8) -> Self {
        Self::CODES
            .get(usize::from(c))
            .copied()
            .unwrap_or(Self::Other(c))
    }

    /// `true` unless the stack reached a root frame.
    pub fn is_truncated(self) -> bool {
        self != Self::Root
    }

    /// Short description for summaries.
    pub fn describe(self) -> String {
        match self {
            Self::Root => "complete".into(),
            Self::NoUnwindInfo => "code without unwind info (JIT)".into(),
            Self::ModuleNotInTable => "module loaded after the module table was read".into(),
            Self::StackReadFailed => "stack read outside the thread's stack".into(),
            Self::UnwindFailed => "unwind info could not be applied".into(),
            Self::DepthLimit => "deeper than the depth cap".into(),
            Self::Busy => "unwinder busy".into(),
            Self::PythonCut => "an outer interpreter's Python frames missing".into(),
            Self::Other(c) => format!("reason {c}"),
        }
    }
}

/// One frame of a [`Stack`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StackFrame {
    /// Native code: a module and the ELF virtual address to symbolize (for a
    /// return address, already moved back into the call instruction).
    Native {
        /// [`Module::id`].
        module: u32,
        /// ELF virtual address in the module's file.
        offset: u64,
    },
    /// A Python function, resolved in the process.
    Python {
        /// `module.qualified_name`.
        function: StringId,
        /// The source file.
        file: StringId,
        /// The line, if known.
        line: Option<u32>,
    },
    /// Code in no known module (JIT code): always the last frame.
    Unknown {
        /// Absolute address.
        address: u64,
    },
}

/// A distinct CPU stack taken in process by the injection library, innermost
/// frame first. The application's call into the CUDA API is the first frame;
/// frames of CUDA's own libraries and of the injection library are left out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stack {
    /// Process id.
    pub pid: u32,
    /// Id within the process's trace, from 1.
    pub id: u32,
    /// How the stack ended.
    pub end: StackEnd,
    /// The Python frame chain was deeper than the depth cap.
    pub python_truncated: bool,
    /// The frames, innermost first.
    pub frames: Vec<StackFrame>,
}

/// The in-process CPU stack of one API call.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CallStack {
    /// Process id.
    pub pid: u32,
    /// The API call's correlation id.
    pub correlation_id: u32,
    /// [`Stack::id`].
    pub stack: u32,
}

/// The frame between a forward op's stack and the backward work it caused
/// (`join::backward`; the PyTorch profiler reader makes the same shape).
#[cfg(feature = "render")]
pub(crate) const BACKWARD_FRAME: &str = "[backward]";
