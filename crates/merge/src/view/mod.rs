//! What the outputs show of a stack: the one owner of the view every writer
//! applies (folded, SVG, timelines, pprof, report, idle, diff).
//!
//! The recording keeps complete stacks; the view only changes what is shown:
//!
//! - **Interpreter frames** ([`Frames`]). Between two Python frames sit the
//!   interpreter's own C frames (`_PyEval_EvalFrameDefault`, `PyObject_Call`,
//!   `_PyFunction_Vectorcall`, `python3.11+0x584b23`, …). As py-spy does, the
//!   default view shows each Python frame in their place: the native frames of
//!   extensions and libraries (PyTorch's dispatcher, cuBLAS) stay where they are
//!   called, and the root frames (`_start`, a thread start) stay, so that a
//!   complete stack still reads complete; glibc's start-up frames between
//!   `_start` and the interpreter's hidden `main` go too.
//! - **Names** ([`Names`]). C++ names lose their return type, template arguments
//!   (`<…>`) and parameter lists, as Nsight Systems shortens kernel names; the
//!   full names stay available to the SVG's tooltips and the timeline's args.
//!   nvcc's host stubs, `__device_stub__Z6matvecPKfS0_Pfi(…)`, are demangled in
//!   both views (`__device_stub__matvec`).
//!
//! An interpreter frame is recognised by its module where the stack was taken in
//! process (the Python executable or a `libpython` library: see
//! [`is_interpreter_module`]), and otherwise by its text: an unsymbolised frame
//! of such a module (`python3.11+0x584b23`), or a name of CPython's evaluation
//! loop and call machinery (`is_interpreter_name`).
//!
//! ```
//! use gpuperf_merge::view::View;
//!
//! let raw = "_start;main;Py_RunMain;_PyEval_EvalFrameDefault;train (t.py:9);\
//!            _PyFunction_Vectorcall;python3.11+0x584b23;step (t.py:3);\
//!            void at::native::gemm<float, 4>(int, float*);cudaLaunchKernel";
//! let view = View::concise();
//! assert_eq!(
//!     view.stack(raw, &|_| false),
//!     "_start;main;train (t.py:9);step (t.py:3);at::native::gemm<…>;cudaLaunchKernel"
//! );
//! assert_eq!(View::complete().stack(raw, &|_| false), raw);
//! ```

use std::borrow::Cow;

use rustc_hash::FxHashMap;

use crate::model::ROOT_FRAMES;

mod demangle;
pub use demangle::demangle;

/// Which frames a stack shows.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Frames {
    /// Every frame the recorder took.
    #[default]
    All,
    /// Python frames in place of the interpreter's own frames.
    Python,
}

/// How C++ names are spelled.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Names {
    /// As c++filt spells them.
    #[default]
    Full,
    /// Without return types, template arguments and parameter lists.
    Short,
}

/// What the outputs show of each stack and name.
///
/// Default is [`View::complete`], the recorded data unchanged; the command line
/// shows [`View::concise`] unless asked otherwise.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct View {
    /// Which frames. Default is [`Frames::All`].
    pub frames: Frames,
    /// Which names. Default is [`Names::Full`].
    pub names: Names,
}

/// A label longer than this (after shortening) keeps its start and end and
/// loses its middle, so that no frame fills a screen.
pub(crate) const MAX_LABEL: usize = 240;

impl View {
    /// Every frame, full names: the recorded data.
    pub fn complete() -> Self {
        Self {
            frames: Frames::All,
            names: Names::Full,
        }
    }

    /// Python frames without the interpreter's, short names.
    pub fn concise() -> Self {
        Self {
            frames: Frames::Python,
            names: Names::Short,
        }
    }

    /// Whether the view changes nothing.
    pub fn is_complete(&self) -> bool {
        *self == Self::complete()
    }

    /// A folded stack (root first) as the view shows it. `in_interpreter` says
    /// whether a frame name was seen in an interpreter module (in-process
    /// stacks know their modules); names are also recognised by their text.
    pub fn stack(&self, folded: &str, in_interpreter: &dyn Fn(&str) -> bool) -> String {
        if self.is_complete() {
            return folded.to_owned();
        }
        let mut out = String::with_capacity(folded.len());
        let python = self.frames == Frames::Python && folded.split(';').any(is_python_frame);
        for f in folded.split(';') {
            if self.frames == Frames::Python
                && !ROOT_FRAMES.contains(&f)
                && (in_interpreter(f) || is_interpreter_name(f) || (python && C_START.contains(&f)))
            {
                continue;
            }
            if !out.is_empty() {
                out.push(';');
            }
            out.push_str(&self.name(f));
        }
        if out.is_empty() {
            // A stack of interpreter frames only: keep its leaf.
            return folded.rsplit(';').next().unwrap_or(folded).to_owned();
        }
        out
    }

    /// A frame or kernel name (demangled already) as the view shows it; nvcc's
    /// host stubs are demangled unless the view is [`View::complete`].
    pub fn name<'a>(&self, name: &'a str) -> Cow<'a, str> {
        if self.is_complete() {
            return Cow::Borrowed(name);
        }
        let name = demangle_stub(name);
        match self.names {
            Names::Full => name,
            Names::Short => match short_name(&name) {
                Cow::Borrowed(_) => name,
                Cow::Owned(s) => Cow::Owned(s),
            },
        }
    }
}

/// Full names of the labels a view shortened: label → full name, for tooltips.
/// A label that stands for several full names keeps the first one seen.
#[derive(Clone, Debug, Default)]
pub struct FullNames {
    map: FxHashMap<String, String>,
}

impl FullNames {
    /// Notes that `label` was shown for `full` (nothing when they are equal).
    pub fn note(&mut self, label: &str, full: &str) {
        if label != full && !self.map.contains_key(label) {
            self.map.insert(label.to_owned(), full.to_owned());
        }
    }

    /// Notes every frame of a folded stack and its view.
    pub(crate) fn note_stack(&mut self, view: &View, folded: &str) {
        if view.names == Names::Full {
            return;
        }
        for f in folded.split(';') {
            let label = view.name(f);
            self.note(&label, f);
        }
    }

    /// The full name behind `label`, when it was shortened.
    pub fn get(&self, label: &str) -> Option<&str> {
        self.map.get(label).map(String::as_str)
    }

    /// Adds `other`'s names.
    pub fn extend(&mut self, other: &FullNames) {
        for (k, v) in &other.map {
            self.map.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }

    /// (label, full name) pairs, sorted by label.
    pub fn pairs(&self) -> Vec<(&str, &str)> {
        let mut v: Vec<(&str, &str)> = self
            .map
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        v.sort_unstable();
        v
    }

    /// Whether no label was shortened.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// Whether a module (its path) is the Python interpreter itself: a `python`
/// executable (`python3.11`, `python3`, `python`) or a `libpython` library.
pub fn is_interpreter_module(path: &str) -> bool {
    let file = path.rsplit('/').next().unwrap_or(path);
    if let Some(rest) = file.strip_prefix("libpython") {
        return rest.starts_with(|c: char| c.is_ascii_digit());
    }
    let Some(rest) = file.strip_prefix("python") else {
        return false;
    };
    // `python`, `python3`, `python3.11`, `python3.13t`, `python3.11d`.
    rest.chars()
        .all(|c| c.is_ascii_digit() || c == '.' || c == 't' || c == 'd' || c == 'm')
}

/// glibc's start-up frames between `_start` and a program's `main`: with the
/// interpreter's `main` hidden, a stack with Python frames goes from `_start`
/// straight to its first Python frame.
const C_START: [&str; 3] = [
    "__libc_start_main",
    "__libc_start_main_impl",
    "__libc_start_call_main",
];

/// Name prefixes of CPython's evaluation loop and call machinery, exported or
/// static, as symbol tables name them.
const INTERPRETER_PREFIXES: [&str; 30] = [
    "_Py",
    "Py_",
    "PyEval_",
    "PyObject_",
    "PyVectorcall_",
    "PyCFunction_",
    "PyRun_",
    "PyNumber_",
    "PyIter_",
    "PySequence_",
    "PyMapping_",
    "PyImport_",
    "pymain_",
    "pyrun_",
    "method_vectorcall",
    "cfunction_call",
    "cfunction_vectorcall",
    "slot_tp_",
    "slot_nb_",
    "slot_sq_",
    "slot_mp_",
    "vectorcall_method",
    "vectorcall_unbound",
    "wrapperdescr_call",
    "wrapper_call",
    "method_call",
    "partial_call",
    "partial_vectorcall",
    "object_vacall",
    "run_eval_code_obj",
];

/// Whole names of CPython's static call helpers that share no prefix above.
const INTERPRETER_NAMES: [&str; 6] = [
    "call_function",
    "do_call_core",
    "run_mod",
    "type_call",
    "builtin_exec",
    "function_code_fastcall",
];

/// Whether a frame's text names the interpreter's own code: an unsymbolised
/// frame of the interpreter's module (`python3.11+0x584b23`,
/// `libpython3.12.so.1.0+0x1f00`) or a function of CPython's evaluation loop
/// and call machinery (`_PyEval_EvalFrameDefault`, `PyObject_Call`, …, with
/// compiler suffixes such as `.cold` or `.lto_priv.0`).
pub(crate) fn is_interpreter_name(frame: &str) -> bool {
    if let Some((file, off)) = frame.rsplit_once("+0x")
        && !off.is_empty()
        && off.chars().all(|c| c.is_ascii_hexdigit())
    {
        return is_interpreter_module(file);
    }
    let base = frame.split('.').next().unwrap_or(frame);
    INTERPRETER_PREFIXES.iter().any(|p| base.starts_with(p)) || INTERPRETER_NAMES.contains(&base)
}

/// `__device_stub__Z6matvecPKfS0_Pfi(float const*, …)`, nvcc's host stub of a
/// kernel, whose name holds the kernel's mangled name without its leading `_`:
/// that name demangled, `__device_stub__matvec(float const*, …)`. Other names
/// pass through.
pub(crate) fn demangle_stub(name: &str) -> Cow<'_, str> {
    const STUB: &str = "__device_stub__";
    let Some(rest) = name.strip_prefix(STUB) else {
        return Cow::Borrowed(name);
    };
    if !rest.starts_with('Z') {
        return Cow::Borrowed(name);
    }
    let mangled_end = rest.find('(').unwrap_or(rest.len());
    let inner = format!("_{}", &rest[..mangled_end]);
    let d = demangle(&inner);
    if d == inner {
        return Cow::Borrowed(name);
    }
    Cow::Owned(format!("{STUB}{d}"))
}

/// Qualifiers that may follow a member function's parameter list.
const QUALIFIERS: [&str; 5] = ["const", "volatile", "noexcept", "&&", "&"];

/// A demangled C++ name without its return type, template arguments (`<…>`)
/// and parameter lists, as Nsight Systems shortens kernel names:
/// `void at::native::vectorized_elementwise_kernel<4, …>(int, …)` reads
/// `at::native::vectorized_elementwise_kernel<…>`. Lambdas keep their number
/// (`{lambda#1}`), `(anonymous namespace)` stays, and `[clone .isra.0]`
/// suffixes go. Names that are not C++ (Python frames, `file+0x…`, markers in
/// brackets) pass through; a result longer than [`MAX_LABEL`] loses its middle.
pub(crate) fn short_name(name: &str) -> Cow<'_, str> {
    if let Some(op) = emit_nvtx_op(name) {
        return Cow::Owned(op.to_owned());
    }
    if !looks_like_cpp(name) {
        return cap(Cow::Borrowed(name));
    }
    let name = match name.find(" [clone ") {
        Some(i) => &name[..i],
        None => name,
    };
    let b = name.as_bytes();
    let mut out = String::with_capacity(name.len().min(256));
    let (mut angle, mut paren) = (0usize, 0usize);
    let mut i = 0;
    while i < b.len() {
        let rest = &name[i..];
        if angle == 0 && paren == 0 {
            if rest.starts_with("(anonymous namespace)") {
                out.push_str("(anonymous namespace)");
                i += "(anonymous namespace)".len();
                continue;
            }
            if rest.starts_with("operator") && !prev_is_ident(b, i) {
                i += copy_operator(rest, &mut out);
                continue;
            }
            if b[i] == b' ' {
                let next = rest[1..].trim_start();
                if let Some(q) = QUALIFIERS.iter().find(|q| next.starts_with(**q)) {
                    i += 1 + (rest.len() - 1 - next.len()) + q.len();
                    continue;
                }
                // What came before was a return type.
                out.clear();
                i += 1;
                continue;
            }
        }
        match b[i] {
            b'<' if paren == 0 => {
                if angle == 0 {
                    out.push_str("<…>");
                }
                angle += 1;
            }
            b'>' if paren == 0 && angle > 0 => angle -= 1,
            b'(' => paren += 1,
            b')' if paren > 0 => paren -= 1,
            _ if angle == 0 && paren == 0 => {
                let c = rest.chars().next().expect("i is on a char boundary");
                out.push(c);
                i += c.len_utf8();
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    let out = out.trim();
    if out.is_empty() {
        return cap(Cow::Borrowed(name));
    }
    cap(Cow::Owned(out.to_owned()))
}

/// Whether `name` reads as a demangled C++ name: a scope (`::`), template
/// arguments or a parameter list, and not a Python frame, an unsymbolised
/// frame or a bracketed marker.
/// An NVTX frame of PyTorch's `emit_nvtx` without the ids it adds to each
/// op's range (`[nvtx] aten::addmm, seq = 3, op_id = 12, sizes = […]` reads
/// `[nvtx] aten::addmm`): unique per call, they kept the same op from ever
/// merging in a flamegraph.
fn emit_nvtx_op(name: &str) -> Option<&str> {
    if !name.starts_with("[nvtx") {
        return None;
    }
    let label = name.find("] ")? + 2;
    let end = [", seq = ", ", op_id = "]
        .iter()
        .filter_map(|tail| name[label..].find(tail))
        .min()?;
    Some(&name[..label + end])
}

fn looks_like_cpp(name: &str) -> bool {
    if name.starts_with('[') || name.contains(".py") || name.contains("+0x") {
        return false;
    }
    name.contains("::") || name.contains('<') || name.contains('(')
}

fn prev_is_ident(b: &[u8], i: usize) -> bool {
    i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')
}

/// Copies `operator…` at the start of `rest` (`operator()`, `operator<<`,
/// `operator new`, `operator bool`) and says how many bytes it took.
fn copy_operator(rest: &str, out: &mut String) -> usize {
    const SYMBOLS: &str = "+-*/%^&|~!=<>,[]";
    let mut n = "operator".len();
    if rest[n..].starts_with("()") {
        n += 2;
    } else if rest[n..].starts_with(|c: char| SYMBOLS.contains(c)) {
        n += rest[n..]
            .find(|c: char| !SYMBOLS.contains(c))
            .unwrap_or(rest.len() - n);
    } else if rest[n..].starts_with(' ') {
        // `operator new`, `operator delete[]`, or a conversion `operator bool`.
        let word = rest[n + 1..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '[' || c == ']'))
            .unwrap_or(rest.len() - n - 1);
        n += 1 + word;
    }
    out.push_str(&rest[..n]);
    n
}

/// `s`, or its start and end around `…` when it is longer than [`MAX_LABEL`].
fn cap(s: Cow<'_, str>) -> Cow<'_, str> {
    if s.chars().count() <= MAX_LABEL {
        return s;
    }
    Cow::Owned(elide_middle(&s, MAX_LABEL))
}

/// `s` in at most `max` characters: its start and end around `…`.
pub(crate) fn elide_middle(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max {
        return s.to_owned();
    }
    let keep = max.saturating_sub(1);
    let head = keep / 2;
    let tail = keep - head;
    let start: String = s.chars().take(head).collect();
    let end: String = s.chars().skip(n - tail).collect();
    format!("{start}…{end}")
}

/// Whether a frame is a Python line: `module.fn (file.py:12)` as gpuperf's
/// recordings name them, or `file.py(12): fn` as PyTorch's profiler does.
pub(crate) fn is_python_frame(frame: &str) -> bool {
    frame.contains(".py:") || frame.contains(".py(")
}

/// The innermost Python frame of a folded stack (root first), if any.
pub(crate) fn innermost_python(folded: &str) -> Option<&str> {
    folded.rsplit(';').find(|f| is_python_frame(f))
}

/// Separates frames in [`fit_stack`]'s text, read "called from".
pub(crate) const CALLED_FROM: &str = " ← ";

/// A folded stack (root first) in at most `width` characters, for a terminal:
/// the leaf first (with its caller when the leaf is a CUDA API call), then the
/// innermost Python line, then the outer Python lines while they fit; native
/// frames between them, and PyTorch's `Module._call_impl` wrappers, are
/// elided (`…`). A stack without Python frames shows
/// its frames from the leaf outwards while they fit.
///
/// ```
/// use gpuperf_merge::view::fit_stack;
///
/// let s = "_start;main (t.py:9);step (t.py:3);at::mm;at::native::gemm;cudaLaunchKernel";
/// assert_eq!(
///     fit_stack(s, 200),
///     "at::native::gemm;cudaLaunchKernel ← … ← step (t.py:3) ← main (t.py:9) ← …"
/// );
/// ```
pub fn fit_stack(folded: &str, width: usize) -> String {
    let frames: Vec<&str> = folded.split(';').collect();
    let n = frames.len();
    let api_leaf = n >= 2 && is_api_name(frames[n - 1]);
    let leaf_start = if api_leaf { n - 2 } else { n - 1 };
    // Leaf frames are capped so that the Python line still fits beside them.
    let leaf = frames[leaf_start..]
        .iter()
        .map(|f| elide_middle(f, width / 3))
        .collect::<Vec<_>>()
        .join(";");
    let mut parts: Vec<String> = vec![leaf];
    let outer = &frames[..leaf_start];
    let python: Vec<usize> = (0..outer.len())
        .rev()
        .filter(|&i| is_python_frame(outer[i]) && !is_call_wrapper(outer[i]))
        .collect();
    let mut shown_to = leaf_start; // frames at and after this index are shown
    if python.is_empty() {
        for i in (0..outer.len()).rev() {
            parts.push(elide_middle(outer[i], width / 3));
            shown_to = i;
        }
    } else {
        for &i in &python {
            if i + 1 < shown_to {
                parts.push("…".to_owned());
            }
            parts.push(elide_middle(outer[i], width / 2));
            shown_to = i;
        }
    }
    if shown_to > 0 {
        parts.push("…".to_owned());
    }
    // Drop outer parts until the text fits, keeping the leaf and one Python line.
    let fits = |p: &[String]| p.join(CALLED_FROM).chars().count() <= width;
    while !fits(&parts) && parts.len() > 2 {
        parts.pop();
        if parts.last().is_some_and(|p| p == "…") {
            parts.pop();
        }
        parts.push("…".to_owned());
        if fits(&parts) {
            break;
        }
        parts.pop();
    }
    elide_middle(&parts.join(CALLED_FROM), width)
}

/// PyTorch's `nn.Module.__call__` wrappers: one pair above every module's
/// `forward`, they tell stacks apart no better than `…` and take the room of
/// the lines that do.
fn is_call_wrapper(frame: &str) -> bool {
    ["Module._call_impl (", "Module._wrapped_call_impl ("]
        .iter()
        .any(|w| frame.contains(w))
}

/// Whether a frame is a CUDA API call (`cudaLaunchKernel`, `cuLaunchKernel`).
fn is_api_name(frame: &str) -> bool {
    (frame.starts_with("cuda") || frame.starts_with("cu"))
        && frame.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && frame
            .chars()
            .nth(2)
            .is_some_and(|c| c.is_ascii_uppercase() || frame.starts_with("cuda"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpreter_modules_and_names() {
        for m in [
            "/usr/bin/python3.11",
            "python3",
            "/opt/venv/bin/python",
            "/usr/lib/libpython3.12.so.1.0",
            "python3.13t",
        ] {
            assert!(is_interpreter_module(m), "{m}");
        }
        for m in [
            "/usr/lib/python3.11/site-packages/torch/lib/libtorch_python.so",
            "_C.cpython-311-x86_64-linux-gnu.so",
            "python_helper",
            "libpythonista.so",
        ] {
            assert!(!is_interpreter_module(m), "{m}");
        }
        for f in [
            "python3.11+0x584b23",
            "libpython3.12.so.1.0+0x1f00",
            "_PyEval_EvalFrameDefault",
            "_PyEval_EvalFrameDefault.cold",
            "PyObject_Call",
            "_PyFunction_Vectorcall",
            "method_vectorcall_VARARGS_KEYWORDS",
            "slot_tp_call",
            "cfunction_call",
            "Py_RunMain",
        ] {
            assert!(is_interpreter_name(f), "{f}");
        }
        for f in [
            "libtorch_python.so+0x1234",
            "torch::autograd::THPVariable_add(_object*, _object*, _object*)",
            "PyArray_NewFromDescr",
            "forward (linear.py:125)",
            "cudaLaunchKernel",
            "_start",
        ] {
            assert!(!is_interpreter_name(f), "{f}");
        }
    }

    #[test]
    fn the_python_view_drops_interpreter_frames_and_keeps_roots_and_extensions() {
        let v = View {
            frames: Frames::Python,
            names: Names::Full,
        };
        let raw = "_start;__libc_start_main;main;Py_BytesMain;_PyEval_EvalFrameDefault;\
                   <module> (t.py:1);PyObject_Call;static_helper;f (t.py:2);\
                   THPVariable_mm;at::mm;cudaLaunchKernel";
        let in_module = |f: &str| f == "static_helper" || f == "main";
        assert_eq!(
            v.stack(raw, &in_module),
            "_start;<module> (t.py:1);f (t.py:2);THPVariable_mm;at::mm;cudaLaunchKernel"
        );
        // Without Python frames, glibc's start-up frames stay.
        assert_eq!(
            v.stack(
                "_start;__libc_start_main;main;run;cudaLaunchKernel",
                &in_module
            ),
            "_start;__libc_start_main;run;cudaLaunchKernel"
        );
    }

    #[test]
    fn emit_nvtx_ranges_read_as_their_op_without_its_ids() {
        for (full, short) in [
            (
                "[nvtx] aten::addmm, seq = 3, op_id = 12, sizes = [[8, 4], [4, 4]]",
                "[nvtx] aten::addmm",
            ),
            (
                "[nvtx] MmBackward0, seq = 0, op_id = 20",
                "[nvtx] MmBackward0",
            ),
            ("[nvtx] aten::fill_, op_id = 11", "[nvtx] aten::fill_"),
            ("[nvtx lib] step, op_id = 1", "[nvtx lib] step"),
        ] {
            assert_eq!(short_name(full), short, "{full}");
            assert_eq!(View::concise().name(full), short, "{full}");
            assert_eq!(View::complete().name(full), full, "{full}");
        }
        // A range of the user's own, and the full names, stay as written.
        assert_eq!(short_name("[nvtx] train_step"), "[nvtx] train_step");
        assert!(matches!(short_name("[nvtx] train_step"), Cow::Borrowed(_)));
    }

    #[test]
    fn short_names_elide_templates_parameters_and_return_types() {
        let cases = [
            (
                "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>, \
                 std::array<char*, 1ul>, false>(int, at::native::FillFunctor<int>, std::array<char*, 1ul>)",
                "at::native::vectorized_elementwise_kernel<…>",
            ),
            (
                "at::native::add_kernel(at::TensorIteratorBase&, c10::Scalar const&)::{lambda()#1}::operator()() const [clone .isra.0]",
                "at::native::add_kernel::{lambda#1}::operator()",
            ),
            (
                "void at::native::(anonymous namespace)::index_select_out_cuda_impl<float>(at::Tensor&, long)",
                "at::native::(anonymous namespace)::index_select_out_cuda_impl<…>",
            ),
            (
                "c10::impl::wrap_kernel_functor_unboxed_<c10::impl::detail::WrapFunctionIntoFunctor_<\
                 c10::CompileTimeFunctionPointer<at::Tensor (at::Tensor const&), &at::f(at::Tensor const&)>, \
                 at::Tensor, c10::guts::typelist::typelist<at::Tensor const&> >, at::Tensor (at::Tensor const&)>\
                 ::call(c10::OperatorKernel*, c10::DispatchKeySet, at::Tensor const&)",
                "c10::impl::wrap_kernel_functor_unboxed_<…>::call",
            ),
            ("attentionQKT(float*, float*, int)", "attentionQKT"),
            (
                "std::vector<int, std::allocator<int> >::operator[](unsigned long)",
                "std::vector<…>::operator[]",
            ),
            ("bool operator<<(a, b)", "operator<<"),
            ("unsigned int at::f<int>(int)", "at::f<…>"),
            (
                "forward (modeling_gpt2.py:123)",
                "forward (modeling_gpt2.py:123)",
            ),
            ("python3.11 [pid 7]", "python3.11 [pid 7]"),
            ("[GPU_Memcpy HtoD]", "[GPU_Memcpy HtoD]"),
            ("cudaLaunchKernel", "cudaLaunchKernel"),
        ];
        for (full, short) in cases {
            assert_eq!(short_name(full), short, "{full}");
        }
    }

    #[test]
    fn stubs_are_demangled_in_both_views() {
        let stub = "__device_stub__Z6matvecPKfS0_Pfi(float const*, float const*, float*, int)";
        let python_full = View {
            frames: Frames::Python,
            names: Names::Full,
        };
        assert_eq!(
            python_full.name(stub),
            "__device_stub__matvec(float const*, float const*, float*, int)"
        );
        assert_eq!(View::complete().name(stub), stub);
        assert_eq!(View::concise().name(stub), "__device_stub__matvec");
        assert_eq!(
            View::concise().name("__device_stub__plain"),
            "__device_stub__plain"
        );
    }

    #[test]
    fn fitted_stacks_show_the_leaf_and_the_python_line_first() {
        let deep = format!(
            "_start;{}outer (a.py:1);{}inner (b.py:2);{}at::native::kernel_impl;cudaLaunchKernel",
            "native_root;".repeat(50),
            "x::y;".repeat(40),
            "c10::Dispatcher::call;".repeat(40)
        );
        let s = fit_stack(&deep, 120);
        assert!(s.chars().count() <= 120, "{s}");
        assert!(
            s.starts_with("at::native::kernel_impl;cudaLaunchKernel ← … ← inner (b.py:2) ← "),
            "{s}"
        );
        // Two stacks that differ only in their Python line read apart.
        let other = deep.replace("inner (b.py:2)", "inner (b.py:7)");
        assert_ne!(fit_stack(&other, 120), s);
        let no_python = "_start;main;run;gemm;cudaLaunchKernel";
        assert_eq!(
            fit_stack(no_python, 200),
            "gemm;cudaLaunchKernel ← run ← main ← _start"
        );
        assert_eq!(
            fit_stack("[GPU_Idle: host sync]", 200),
            "[GPU_Idle: host sync]"
        );
        let long_leaf = format!("f (a.py:1);{}", "k".repeat(500));
        assert!(fit_stack(&long_leaf, 200).chars().count() <= 200);
    }

    #[test]
    fn labels_are_capped() {
        let long = format!("f{}", "x".repeat(1000));
        let s = short_name(&long);
        assert_eq!(s.chars().count(), MAX_LABEL);
        assert!(s.starts_with("fxx") && s.contains('…'));
    }
}
