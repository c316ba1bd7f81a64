//! PyTorch autograd ids for each launch, read from libtorch in process, so that
//! the merge can charge a backward kernel to the forward Python line that made
//! its autograd node (`gpuperf_merge::join::backward`), with no change to the
//! user's script.
//!
//! ```text
//!  init, then flush thread: libtorch_cpu.so loaded? ─▶ torch version → Node
//!                layout, dlsym(peek, currentThreadId)
//!  flush thread: libtorch's .symtab → the evaluated node's TLS accessor
//!  launch (API enter, on the app thread):
//!    node = *tls_current_evaluating_node()   (no refcount touched)
//!    node ≠ null ─▶ Backward { node.thread_id_, node.sequence_nr_ }
//!    else peek() > 0 ─▶ Forward { RecordFunction::currentThreadId(), peek() }
//! ```
//!
//! PyTorch's generated autograd code makes an op's node (taking the thread's
//! next sequence number) before the op runs its kernels, so the kernels of the
//! forward op whose node is `(T, S)` launch with `peek() == S + 1` on thread
//! `T`. The node's fields are private state: their offsets are known per torch
//! version ([`layout_for`]) and checked as the program runs (a backward node's
//! thread must be one seen launching forward work, its number below that
//! thread's next one, and no two nodes may carry the same ids); when too many
//! reads disagree, or torch is unknown, the
//! feature turns itself off and says so in the log and in a NOTE
//! ([`AUTOGRAD_OFF_NOTE`]), which makes the merge ignore every tag of the
//! process. Nothing else of the recording changes.
//!
//! The checks catch a layout that reads the wrong kind of value (a reference
//! count as a number, flags as a thread) but not every plausible one: in a
//! short training script, offsets one field late (`topological_nr_`, small
//! and repeating, and a word of the node's mutex, which reads 1, the main
//! thread's id, while the engine holds it, at addresses the allocator hands
//! back step after step) pass them. The version table is the guard there.
//!
//! `GPUPERF_AUTOGRAD=0` turns it off; `GPUPERF_AUTOGRAD=SEQ,TID` gives the
//! byte offsets of `Node::sequence_nr_` and `Node::thread_id_` for a torch
//! this build does not know (still checked as the program runs).

mod symtab;

use std::ffi::{CStr, OsString, c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

pub use gpuperf_merge::model::AUTOGRAD_OFF_NOTE;
use gpuperf_merge::model::{AutogradTag, Record};

/// The variable that turns the feature off or names a layout.
pub const VAR: &str = gpuperf_merge::recording::env::AUTOGRAD;

const SEARCHING: u8 = 0;
const ON: u8 = 1;
const OFF: u8 = 2;

/// Forward threads remembered for the checks; more are not checked.
const THREADS: usize = 64;
/// Backward nodes remembered for the uniqueness check (direct-mapped).
const NODES: usize = 256;
/// Disagreeing backward reads that turn the feature off, once they are also
/// more than a quarter of all (two nodes read with one node's ids turn it off
/// at once).
const MAX_DISAGREEING: u64 = 8;

/// A launch's autograd ids; `kind` 0 none, 1 forward, 2 backward, as the
/// trace's `AUTOGRAD` record numbers them.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Tag {
    /// 0 none, 1 forward, 2 backward.
    pub kind: u8,
    /// Forward: RecordFunction's thread id; backward: the node's.
    pub thread: u64,
    /// Forward: the thread's next sequence number; backward: the node's.
    pub seq: u64,
}

/// The trace record of a launch's tag (`kind` 1 or 2).
pub fn record(pid: u32, correlation_id: u32, t: Tag) -> Record {
    let tag = if t.kind == 2 {
        AutogradTag::Backward {
            thread: t.thread,
            // libtorch's `UINT64_MAX`: a node without a forward op.
            seq: (t.seq != u64::MAX).then_some(t.seq),
        }
    } else {
        AutogradTag::Forward {
            thread: t.thread,
            next_seq: t.seq,
        }
    };
    Record::Autograd(gpuperf_merge::model::Autograd {
        pid,
        correlation_id,
        tag,
    })
}

/// Byte offsets of the fields read from a `torch::autograd::Node`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// `sequence_nr_`.
    pub seq: usize,
    /// `thread_id_`.
    pub thread: usize,
}

/// Offsets past this are refused: every `Node` is larger (it holds a mutex and
/// vectors after `thread_id_`), so reads stay inside the object.
const MAX_OFFSET: usize = 96;

/// The layout of `Node` in a torch version, or why it is not known.
///
/// torch 2.14 (`torch/csrc/autograd/node.h`): `struct Node :
/// c10::intrusive_ptr_target` (a vtable pointer, then one 8-byte
/// `combined_refcount_`), then `sequence_nr_` (16), `topological_nr_` (24),
/// two bools (32, 33) and `thread_id_` (40).
///
/// torch 2.11 (`torch/csrc/autograd/function.h`): `struct Node :
/// std::enable_shared_from_this<Node>` (a vtable pointer, then a 16-byte
/// `weak_ptr`), then `sequence_nr_` (24), `topological_nr_` (32), one bool
/// (40) and `thread_id_` (48). The evaluated node's thread-local there is a
/// `shared_ptr<Node>`, whose first word is the node as well.
pub fn layout_for(version: &str, forced: Option<Layout>) -> Result<Layout, String> {
    if let Some(l) = forced {
        return Ok(l);
    }
    let minor = version.split(['+', 'a']).next().unwrap_or(version);
    let mut parts = minor.split('.');
    match (parts.next(), parts.next()) {
        (Some("2"), Some("14")) => Ok(Layout {
            seq: 16,
            thread: 40,
        }),
        (Some("2"), Some("11")) => Ok(Layout {
            seq: 24,
            thread: 48,
        }),
        _ => Err(format!(
            "torch {version}: the layout of its autograd nodes is not known to this build \
             ({VAR}=SEQ,TID names one)"
        )),
    }
}

/// What `GPUPERF_AUTOGRAD` asks: `None` off, `Some(None)` automatic,
/// `Some(Some(layout))` a given layout; and a warning for a bad value.
pub fn from_env(value: Option<OsString>) -> (Option<Option<Layout>>, Option<String>) {
    let Some(v) = value else {
        return (Some(None), None);
    };
    let v = v.to_string_lossy();
    match v.trim() {
        "0" => (None, None),
        "" | "1" => (Some(None), None),
        s => {
            let offsets: Option<Vec<usize>> = s.split(',').map(|n| n.trim().parse().ok()).collect();
            match offsets.as_deref() {
                Some(&[seq, thread])
                    if [seq, thread]
                        .iter()
                        .all(|&o| o % 8 == 0 && (8..=MAX_OFFSET).contains(&o)) =>
                {
                    (Some(Some(Layout { seq, thread })), None)
                }
                _ => (
                    Some(None),
                    Some(format!(
                        "{VAR}={s} ignored: expected 0, 1, or two byte offsets SEQ,TID \
                         (multiples of 8 from 8 to {MAX_OFFSET})"
                    )),
                ),
            }
        }
    }
}

type U64Fn = unsafe extern "C" fn() -> u64;
type SlotFn = unsafe extern "C" fn() -> *const *const u8;

/// libtorch's functions and the node layout, once found.
struct Fns {
    peek: U64Fn,
    thread_id: U64Fn,
    layout: Layout,
}

/// The autograd reader of a process.
pub struct Autograd {
    state: AtomicU8,
    forced: Option<Layout>,
    fns: OnceLock<Fns>,
    /// libtorch's accessor of the evaluated node (a [`SlotFn`]), 0 until found.
    node_slot: AtomicUsize,
    /// libtorch, between finding its exports and its accessor.
    lib: Mutex<Option<Libtorch>>,
    /// (RecordFunction thread id, the highest next sequence number seen).
    threads: [(AtomicU64, AtomicU64); THREADS],
    /// Recent backward nodes: a hash of (thread, seq) in the high half, the
    /// low half of the node's address in the low half (see `unique`).
    nodes: [AtomicU64; NODES],
    forward: AtomicU64,
    backward: AtomicU64,
    disagreeing: AtomicU64,
    /// Of those, nodes read with the ids of another node.
    repeated: AtomicU64,
    /// Launches made while libtorch was not yet looked at.
    before_ready: AtomicU64,
    /// Set when the checks turned the feature off; cleared by [`Autograd::take_off_note`].
    off_note: AtomicU8,
}

impl Autograd {
    /// A reader that looks for libtorch from the flush thread; `forced` is
    /// the layout `GPUPERF_AUTOGRAD` names.
    pub fn new(forced: Option<Layout>) -> Autograd {
        Autograd {
            state: AtomicU8::new(SEARCHING),
            forced,
            fns: OnceLock::new(),
            node_slot: AtomicUsize::new(0),
            lib: Mutex::new(None),
            threads: std::array::from_fn(|_| (AtomicU64::new(0), AtomicU64::new(0))),
            nodes: std::array::from_fn(|_| AtomicU64::new(0)),
            forward: AtomicU64::new(0),
            backward: AtomicU64::new(0),
            disagreeing: AtomicU64::new(0),
            repeated: AtomicU64::new(0),
            before_ready: AtomicU64::new(0),
            off_note: AtomicU8::new(0),
        }
    }

    /// The calling thread's autograd ids, at a launch. Runs in CUPTI's API
    /// callback: three calls into libtorch that read its thread-locals, and
    /// two reads of the node autograd is evaluating, if any.
    pub fn tag(&self) -> Tag {
        match self.state.load(Acquire) {
            ON => {}
            SEARCHING => {
                self.before_ready.fetch_add(1, Relaxed);
                return Tag::default();
            }
            _ => return Tag::default(),
        }
        let Some(f) = self.fns.get() else {
            return Tag::default();
        };
        let slot = self.node_slot.load(Acquire);
        let node = if slot == 0 {
            std::ptr::null()
        } else {
            // SAFETY: a non-zero `node_slot` is libtorch's accessor of its
            // thread-local `intrusive_ptr<Node>` of the node being evaluated
            // (checked to lie in libtorch's code when found), of type
            // `intrusive_ptr<Node>& ()`; it returns the slot's address and, on
            // a thread's first call, registers the slot's destructor. It takes
            // no lock and touches no refcount.
            unsafe { *std::mem::transmute::<usize, SlotFn>(slot)() }
        };
        if !node.is_null() {
            // SAFETY: a non-null slot holds a reference to the node the
            // engine evaluates on this thread, alive while its function (our
            // caller) runs. Both offsets are 8-aligned and below every Node's
            // size (`MAX_OFFSET`); the fields are written at construction.
            let (seq, thread) = unsafe {
                (
                    (*node.add(f.layout.seq).cast::<AtomicU64>()).load(Relaxed),
                    (*node.add(f.layout.thread).cast::<AtomicU64>()).load(Relaxed),
                )
            };
            if self.agrees(thread, seq) && self.unique(thread, seq, node as usize) {
                self.backward.fetch_add(1, Relaxed);
                return Tag {
                    kind: 2,
                    thread,
                    seq,
                };
            }
            return Tag::default();
        }
        // SAFETY: `peek` reads the calling thread's sequence counter.
        let next = unsafe { (f.peek)() };
        if next == 0 {
            // No node made on this thread: nothing can link here.
            return Tag::default();
        }
        // SAFETY: `currentThreadId` reads the calling thread's id, which the
        // thread's first node already assigned (Node's constructor asks it).
        let thread = unsafe { (f.thread_id)() };
        self.saw_forward(thread, next);
        self.forward.fetch_add(1, Relaxed);
        Tag {
            kind: 1,
            thread,
            seq: next,
        }
    }

    fn saw_forward(&self, thread: u64, next: u64) {
        for (t, max) in &self.threads {
            let cur = t.load(Relaxed);
            if cur == thread
                || (cur == 0 && t.compare_exchange(0, thread, Relaxed, Relaxed).is_ok())
            {
                max.fetch_max(next, Relaxed);
                return;
            }
            if t.load(Relaxed) == thread {
                max.fetch_max(next, Relaxed);
                return;
            }
        }
    }

    /// Whether a backward node's ids agree with the forward launches seen; too
    /// many that do not turn the feature off.
    fn agrees(&self, thread: u64, seq: u64) -> bool {
        // Nodes without a forward op (`AccumulateGrad`) number themselves so.
        if seq == u64::MAX {
            return true;
        }
        let mut full = true;
        for (t, max) in &self.threads {
            match t.load(Relaxed) {
                0 => {
                    full = false;
                    break;
                }
                x if x == thread => {
                    if seq < max.load(Relaxed) {
                        return true;
                    }
                    full = false;
                    break;
                }
                _ => {}
            }
        }
        if full {
            return true;
        }
        self.disagree(false);
        false
    }

    /// Whether no other node was read with the same ids: autograd numbers
    /// each node it makes on a thread once, so two nodes with one (thread,
    /// seq) mean the fields read are not those (a wrong layout reading, say,
    /// `topological_nr_`, which repeats from step to step).
    fn unique(&self, thread: u64, seq: u64, node: usize) -> bool {
        if seq == u64::MAX {
            return true;
        }
        let h = (thread ^ seq.rotate_left(17)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let key = (h >> 32) << 32;
        let entry = key | (node as u64 & 0xffff_ffff);
        // The high bits: those of a product depend on every input bit.
        let slot = &self.nodes[(h >> 56) as usize % NODES];
        let old = slot.swap(entry, Relaxed);
        if old == 0 || old >> 32 != key >> 32 || old == entry {
            return true;
        }
        // Proof rather than doubt: two of them turn the reading off.
        let repeated = self.repeated.fetch_add(1, Relaxed) + 1;
        self.disagree(repeated >= 2);
        false
    }

    fn disagree(&self, proven: bool) {
        let bad = self.disagreeing.fetch_add(1, Relaxed) + 1;
        if proven || (bad >= MAX_DISAGREEING && bad * 4 > bad + self.backward.load(Relaxed)) {
            self.state.store(OFF, Release);
            self.off_note.store(1, Relaxed);
        }
    }

    /// The NOTE to write once the checks turned the feature off.
    pub fn take_off_note(&self) -> Option<String> {
        (self.off_note.swap(0, Relaxed) == 1).then(|| {
            format!(
                "{AUTOGRAD_OFF_NOTE}: {} of {} backward nodes read disagree with the forward \
                 launches seen ({} carry another node's ids; wrong Node layout for this \
                 torch?); backward kernels stay on autograd's thread",
                self.disagreeing.load(Relaxed),
                self.disagreeing.load(Relaxed) + self.backward.load(Relaxed),
                self.repeated.load(Relaxed),
            )
        })
    }

    /// Finds libtorch's exported functions, once it is loaded: all that
    /// forward launches need. Cheap (no symbol table read): the recorder calls
    /// it at initialization, so that no forward launch goes untagged, and
    /// from the flush thread until found. Returns the log line and whether it
    /// turned the feature off (then the line is also the NOTE to write).
    pub fn discover_exports(&self) -> Option<(String, bool)> {
        if self.state.load(Acquire) != SEARCHING {
            return None;
        }
        let t0 = Instant::now();
        let lib = find_libtorch()?;
        let result = self.exports(&lib);
        let line = match &result {
            Ok((version, layout)) => format!(
                "autograd: torch {version} in `{}`: launches tagged with autograd's ids \
                 (Node: sequence_nr at {}, thread_id at {}); exports found in {} µs",
                lib.path.display(),
                layout.seq,
                layout.thread,
                t0.elapsed().as_micros()
            ),
            Err(why) => {
                format!("{AUTOGRAD_OFF_NOTE}: {why}; backward kernels stay on autograd's thread")
            }
        };
        let off = result.is_err();
        if off {
            self.state.store(OFF, Release);
        } else {
            *self.lib.lock().unwrap_or_else(|e| e.into_inner()) = Some(lib);
            self.state.store(ON, Release);
        }
        Some((line, off))
    }

    /// Finds libtorch, then (the costly part: libtorch's `.symtab`) the
    /// accessor of the node being evaluated, which backward launches need;
    /// from the flush thread, never on a launch. Returns the log lines as
    /// [`Autograd::discover_exports`] does, the last one's flag.
    pub fn discover(&self) -> Vec<(String, bool)> {
        let mut lines: Vec<(String, bool)> = self.discover_exports().into_iter().collect();
        let Some(lib) = self.lib.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return lines;
        };
        let t0 = Instant::now();
        match node_accessor(&lib) {
            Ok(f) => {
                self.node_slot.store(f, Release);
                lines.push((
                    format!(
                        "autograd: the evaluated node's accessor found in libtorch's .symtab \
                         in {} µs on the flush thread: backward launches tagged from now on",
                        t0.elapsed().as_micros()
                    ),
                    false,
                ));
            }
            Err(why) => {
                self.state.store(OFF, Release);
                lines.push((
                    format!(
                        "{AUTOGRAD_OFF_NOTE}: {why}; backward kernels stay on autograd's thread"
                    ),
                    true,
                ));
            }
        }
        lines
    }

    fn exports(&self, lib: &Libtorch) -> Result<(String, Layout), String> {
        let version = torch_version(&lib.path)?;
        let layout = layout_for(&version, self.forced)?;
        // SAFETY: the library is loaded (RTLD_NOLOAD opens no other); its
        // initializers ran when the program loaded it.
        let handle = unsafe {
            libloading::os::unix::Library::open(
                Some(&lib.path),
                libc::RTLD_NOLOAD | libc::RTLD_LAZY,
            )
        }
        .map_err(|e| format!("cannot open the loaded `{}`: {e}", lib.path.display()))?;
        // SAFETY: both are `uint64_t f()` in torch's headers (ATen/SequenceNumber.h,
        // ATen/record_function.h).
        let (peek, thread_id) = unsafe {
            (
                *handle
                    .get::<U64Fn>(b"_ZN2at15sequence_number4peekEv\0")
                    .map_err(|e| format!("no at::sequence_number::peek: {e}"))?,
                *handle
                    .get::<U64Fn>(b"_ZN2at14RecordFunction15currentThreadIdEv\0")
                    .map_err(|e| format!("no at::RecordFunction::currentThreadId: {e}"))?,
            )
        };
        // The handle only counted a reference: the library stays loaded.
        drop(handle);
        let _ = self.fns.set(Fns {
            peek,
            thread_id,
            layout,
        });
        Ok((version, layout))
    }

    /// The calling thread's slot of the node being evaluated, once found: for
    /// the benchmark, which plays a backward node by writing it there.
    #[doc(hidden)]
    pub fn evaluating_node_slot(&self) -> Option<*mut *const u8> {
        let slot = self.node_slot.load(Acquire);
        // SAFETY: see `tag`.
        (slot != 0).then(|| unsafe { std::mem::transmute::<usize, SlotFn>(slot)() }.cast_mut())
    }

    /// One line for the log at exit.
    pub fn summary(&self) -> String {
        let state = match self.state.load(Relaxed) {
            SEARCHING => "libtorch never loaded",
            ON => "on",
            _ => "off",
        };
        format!(
            "autograd ({state}): {} forward and {} backward launches tagged, {} backward \
             nodes read that disagreed ({} with another node's ids), {} launches before \
             libtorch was looked at",
            self.forward.load(Relaxed),
            self.backward.load(Relaxed),
            self.disagreeing.load(Relaxed),
            self.repeated.load(Relaxed),
            self.before_ready.load(Relaxed),
        )
    }
}

/// The address of libtorch's accessor of its thread-local evaluated node, a
/// local symbol found in its `.symtab`, checked to point into its code.
fn node_accessor(lib: &Libtorch) -> Result<usize, String> {
    let at = symtab::local_object(
        &lib.path,
        b"_ZN5torch8autogradL27tls_current_evaluating_nodeE",
        8,
    )?;
    let addr = lib.bias.wrapping_add(at as usize);
    if !lib.data.iter().any(|&(s, e)| addr >= s && addr + 8 <= e) {
        return Err("the accessor of the evaluated node is outside libtorch's data".into());
    }
    // SAFETY: `addr` lies in a loaded segment of libtorch (checked above);
    // the pointer there was relocated when the library loaded.
    let f = unsafe { (addr as *const usize).read() };
    if !lib.text.iter().any(|&(s, e)| f >= s && f < e) {
        return Err(format!(
            "the accessor of the evaluated node points outside libtorch's code ({f:#x})"
        ));
    }
    Ok(f)
}

/// libtorch_cpu as loaded in this process.
struct Libtorch {
    path: PathBuf,
    bias: usize,
    /// Executable and other loaded segments, absolute.
    text: Vec<(usize, usize)>,
    data: Vec<(usize, usize)>,
}

fn find_libtorch() -> Option<Libtorch> {
    unsafe extern "C" fn visit(
        info: *mut libc::dl_phdr_info,
        _: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: the loader passes a valid `dl_phdr_info` while it holds its
        // lock; `data` is the `Option<Libtorch>` of `find_libtorch`.
        let (info, out) = unsafe { (&*info, &mut *data.cast::<Option<Libtorch>>()) };
        if info.dlpi_name.is_null() {
            return 0;
        }
        // SAFETY: the loader's names are NUL-terminated.
        let name = unsafe { CStr::from_ptr(info.dlpi_name) }.to_bytes();
        if !name.ends_with(b"/libtorch_cpu.so") {
            return 0;
        }
        let bias = info.dlpi_addr as usize;
        let (mut text, mut data) = (Vec::new(), Vec::new());
        for i in 0..usize::from(info.dlpi_phnum) {
            // SAFETY: `dlpi_phdr` points to `dlpi_phnum` program headers.
            let ph = unsafe { &*info.dlpi_phdr.add(i) };
            if ph.p_type != libc::PT_LOAD {
                continue;
            }
            let range = (
                bias + ph.p_vaddr as usize,
                bias + (ph.p_vaddr + ph.p_memsz) as usize,
            );
            if ph.p_flags & libc::PF_X != 0 {
                text.push(range);
            } else {
                data.push(range);
            }
        }
        use std::os::unix::ffi::OsStrExt as _;
        *out = Some(Libtorch {
            path: Path::new(std::ffi::OsStr::from_bytes(name)).to_owned(),
            bias,
            text,
            data,
        });
        1
    }
    let mut out: Option<Libtorch> = None;
    // SAFETY: `visit` matches the callback type and only writes `out`.
    unsafe { libc::dl_iterate_phdr(Some(visit), (&mut out as *mut Option<Libtorch>).cast()) };
    out
}

/// torch's version from `version.py` in the package that holds `lib/libtorch_cpu.so`.
fn torch_version(lib: &Path) -> Result<String, String> {
    let file = lib
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("version.py"))
        .ok_or("no torch package around libtorch_cpu.so")?;
    let text = std::fs::read_to_string(&file)
        .map_err(|e| format!("cannot read torch's version from `{}`: {e}", file.display()))?;
    text.lines()
        .find_map(|l| {
            let v = l.strip_prefix("__version__")?.trim_start();
            let v = v.strip_prefix('=')?.trim();
            Some(v.trim_matches(['\'', '"']).to_owned())
        })
        .ok_or_else(|| format!("no __version__ in `{}`", file.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_known_torch_versions_have_a_layout_and_a_forced_one_wins() {
        assert_eq!(
            layout_for("2.14.1+cu130", None),
            Ok(Layout {
                seq: 16,
                thread: 40
            })
        );
        assert_eq!(
            layout_for("2.14.0a0+git123", None),
            Ok(Layout {
                seq: 16,
                thread: 40
            })
        );
        assert_eq!(
            layout_for("2.11.0+cu130", None),
            Ok(Layout {
                seq: 24,
                thread: 48
            })
        );
        // 2.12 and 2.13 were never checked: off, with the reason.
        let e = layout_for("2.12.0+cu130", None).unwrap_err();
        assert!(e.contains("torch 2.12.0+cu130") && e.contains(VAR), "{e}");
        assert!(layout_for("3.0.0", None).is_err());
        let forced = Layout {
            seq: 24,
            thread: 48,
        };
        assert_eq!(layout_for("2.11.0", Some(forced)), Ok(forced));
    }

    #[test]
    fn the_variable_turns_it_off_or_names_a_checked_layout() {
        let v = |s: &str| from_env(Some(s.into()));
        assert_eq!(from_env(None), (Some(None), None));
        assert_eq!(v("0"), (None, None));
        assert_eq!(
            v("24,48"),
            (
                Some(Some(Layout {
                    seq: 24,
                    thread: 48
                })),
                None
            )
        );
        for bad in ["20,40", "0,40", "16,4096", "16", "x"] {
            let (on, warn) = v(bad);
            assert_eq!(on, Some(None), "{bad}");
            assert!(warn.unwrap().contains("ignored"), "{bad}");
        }
    }

    #[test]
    fn backward_reads_that_disagree_turn_it_off_once_with_a_note() {
        let a = Autograd::new(None);
        a.state.store(ON, Relaxed);
        a.saw_forward(1, 10);
        // Agreeing: a known thread, a number below its next one.
        assert!(a.agrees(1, 9));
        assert!(a.agrees(7, u64::MAX));
        a.backward.store(2, Relaxed);
        for _ in 0..MAX_DISAGREEING {
            // An unknown thread, then a number not yet made.
            assert!(!a.agrees(99, 3));
        }
        assert_eq!(a.state.load(Relaxed), OFF);
        let note = a.take_off_note().unwrap();
        assert!(note.starts_with(AUTOGRAD_OFF_NOTE), "{note}");
        assert!(note.contains("8 of 10"), "{note}");
        assert_eq!(a.take_off_note(), None);
        assert_eq!(a.tag(), Tag::default());
    }

    #[test]
    fn two_nodes_with_the_same_ids_disagree_one_node_read_again_does_not() {
        let a = Autograd::new(None);
        assert!(a.unique(1, 5, 0x1000));
        // The same node, another launch of it (or a second backward pass).
        assert!(a.unique(1, 5, 0x1000));
        assert!(a.unique(1, 6, 0x2000));
        assert!(a.unique(2, 5, 0x3000));
        assert_eq!(a.disagreeing.load(Relaxed), 0);
        // Another node with ids already read: once is doubt, twice proof.
        a.state.store(ON, Relaxed);
        assert!(!a.unique(1, 5, 0x4000));
        assert_eq!(a.disagreeing.load(Relaxed), 1);
        assert_eq!(a.state.load(Relaxed), ON);
        assert!(!a.unique(1, 6, 0x7000));
        assert_eq!(a.state.load(Relaxed), OFF);
        assert!(
            a.take_off_note()
                .unwrap()
                .contains("2 carry another node's ids")
        );
        // Nodes without a forward op all share one number.
        assert!(a.unique(1, u64::MAX, 0x5000));
        assert!(a.unique(1, u64::MAX, 0x6000));
    }
}
