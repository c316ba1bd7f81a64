//! NVTX through its injection hook: ranges recorded for the trace (`NVTX`
//! records: frames of the launches made inside them, slices on the
//! timeline), and `--capture-range nvtx:NAME`.
//!
//! NVTX v3 (header-only, compiled into each library that uses it, PyTorch's
//! `torch.cuda.nvtx` included) loads the library named by
//! `NVTX_INJECTION64_PATH` at its first call and calls its
//! `InitializeInjectionNvtx2(getExportTable)`. The injection asks that
//! function for the `NVTX_ETID_CALLBACKS` table, whose
//! `GetModuleFunctionTable(module, …)` hands out the addresses of NVTX's
//! function pointers for a module (core, core2: the domain forms), indexed by
//! `NVTX_CBID_*`; the injection writes its own functions into the slots it
//! implements, and NVTX makes every other one a no-op. Returning 0 makes
//! NVTX unload the library and turn every call into a no-op.
//!
//! Push/pop ranges are per thread: each thread keeps its open ranges (at most
//! [`MAX_DEPTH`]) and the ones that ended since the last flush, behind a lock
//! only the flush shares; a launch never looks at them (the merge puts a
//! launch inside the ranges open on its thread when its call started).
//! Start/end ranges cross threads and are known by the id the start
//! returned, which carries in its low bit whether the range has the capture
//! name. The capture window is open while any range of that name is.
//! Domain handles and registered strings are this library's own interned
//! C strings, so a message or domain is read the same way wherever it comes
//! from. Pops without a push, ends of unknown ids, pushes past the depth cap
//! and ranges still open at exit are counted and noted in the trace.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
use std::panic::catch_unwind;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};

use crate::capture;
use crate::clock::{gettid, monotonic_ns};
use crate::guard::lock;

/// `NvtxGetExportTableFunc_t`.
type GetExportTable = unsafe extern "C" fn(export_table_id: u32) -> *const c_void;
/// NVTX's generic function pointer, as the slots hold it.
type FnPtr = unsafe extern "C" fn();
/// `NvtxExportTableCallbacks::GetModuleFunctionTable`.
type GetModuleFunctionTable = unsafe extern "C" fn(
    module: c_int,
    out_table: *mut *mut *mut FnPtr,
    out_size: *mut c_uint,
) -> c_int;

/// `NvtxExportTableCallbacks`.
#[repr(C)]
struct ExportTableCallbacks {
    struct_size: usize,
    get_module_function_table: Option<GetModuleFunctionTable>,
}

/// `NVTX_ETID_CALLBACKS`.
const ETID_CALLBACKS: u32 = 1;
/// `NVTX_CB_MODULE_CORE`, `NVTX_CB_MODULE_CORE2`.
const MODULE_CORE: c_int = 1;
const MODULE_CORE2: c_int = 5;
/// `NVTX_CBID_CORE_*`: the slots this library fills.
const RANGE_START_EX: usize = 4;
const RANGE_START_A: usize = 5;
const RANGE_START_W: usize = 6;
const RANGE_END: usize = 7;
const RANGE_PUSH_EX: usize = 8;
const RANGE_PUSH_A: usize = 9;
const RANGE_PUSH_W: usize = 10;
const RANGE_POP: usize = 11;
/// `nvtxEventAttributes_v2`: `messageType` and `message` offsets (after
/// version, size, category, colorType, color, payloadType, reserved0 and the
/// 8-byte payload union).
const ATTR_MESSAGE_TYPE: usize = 32;
const ATTR_MESSAGE: usize = 40;
/// `NVTX_MESSAGE_TYPE_ASCII`, `NVTX_MESSAGE_TYPE_UNICODE`.
const MESSAGE_ASCII: i32 = 1;
const MESSAGE_UNICODE: i32 = 2;
/// `NVTX_MESSAGE_TYPE_REGISTERED`: a handle from `nvtxDomainRegisterString`.
const MESSAGE_REGISTERED: i32 = 3;
/// `NVTX_CBID_CORE2_*`: the domain forms this library fills.
const DOMAIN_RANGE_START_EX: usize = 2;
const DOMAIN_RANGE_END: usize = 3;
const DOMAIN_RANGE_PUSH_EX: usize = 4;
const DOMAIN_RANGE_POP: usize = 5;
const DOMAIN_REGISTER_STRING_A: usize = 10;
const DOMAIN_CREATE_A: usize = 12;

/// Push/pop ranges recorded per thread; deeper pushes are counted, not
/// recorded (their pops still match).
pub const MAX_DEPTH: usize = 64;
/// Ended ranges kept per thread (and for start/end ranges) between flushes:
/// a process that uses NVTX but never starts CUDA is never flushed.
const MAX_PENDING: usize = 1 << 16;

/// Whether ranges are recorded (`GPUPERF_NVTX` is not `0`), read once.
fn recording() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        std::env::var_os(gpuperf_merge::recording::env::NVTX).is_none_or(|v| v != "0")
    })
}

/// A range pushed or started and not yet popped or ended.
struct Open {
    name: Box<str>,
    domain: Option<&'static str>,
    start_ns: u64,
}

/// A range for the trace.
pub(crate) struct Ended {
    pub tid: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub name: Box<str>,
    /// `None`: the default domain.
    pub domain: Option<&'static str>,
    /// Start/end (else push/pop).
    pub start_end: bool,
    /// Still open at the close; `end_ns` is the close.
    pub unclosed: bool,
}

/// One thread's push/pop ranges; its lock is shared with the flush only.
#[derive(Default)]
struct Thread {
    tid: u32,
    open: Vec<Open>,
    ended: Vec<Ended>,
}

/// Every thread that pushed a range, for the flush.
static THREADS: Mutex<Vec<Arc<Mutex<Thread>>>> = Mutex::new(Vec::new());
/// Start/end ranges open, by id, with the starting thread.
static STARTED: Mutex<Option<HashMap<u64, (u32, Open)>>> = Mutex::new(None);
/// Start/end ranges ended since the last flush.
static ENDED: Mutex<Vec<Ended>> = Mutex::new(Vec::new());
static UNBALANCED_POPS: AtomicU64 = AtomicU64::new(0);
static UNKNOWN_ENDS: AtomicU64 = AtomicU64::new(0);
static TOO_DEEP: AtomicU64 = AtomicU64::new(0);
static UNCLOSED: AtomicU64 = AtomicU64::new(0);
static OVERFLOWED: AtomicU64 = AtomicU64::new(0);

/// Keeps an ended range for the next flush, or counts it when too many wait.
fn keep(list: &mut Vec<Ended>, e: Ended) {
    if list.len() < MAX_PENDING {
        list.push(e);
    } else {
        OVERFLOWED.fetch_add(1, Relaxed);
    }
}

thread_local! {
    /// Whether each range this thread pushed and has not popped has the
    /// capture name, innermost last: the thread's push depth.
    static PUSHED: RefCell<Vec<bool>> = const { RefCell::new(Vec::new()) };
    /// This thread's recorded ranges, registered in [`THREADS`] at its first push.
    static MINE: RefCell<Option<Arc<Mutex<Thread>>>> = const { RefCell::new(None) };
}

/// Runs `f` on this thread's recorded ranges.
fn with_mine<R>(f: impl FnOnce(&mut Thread) -> R) -> Option<R> {
    MINE.try_with(|m| {
        let mut m = m.borrow_mut();
        let t = m.get_or_insert_with(|| {
            let t = Arc::new(Mutex::new(Thread {
                tid: gettid(),
                ..Thread::default()
            }));
            lock(&THREADS).push(t.clone());
            t
        });
        f(&mut lock(t))
    })
    .ok()
}

/// Interns `text` as a C string that lives for the process: domain handles
/// and registered strings are such pointers.
fn intern(text: &[u8]) -> &'static CStr {
    static ALL: Mutex<Option<HashMap<Vec<u8>, &'static CStr>>> = Mutex::new(None);
    let mut all = lock(&ALL);
    let all = all.get_or_insert_with(HashMap::new);
    if let Some(c) = all.get(text) {
        return c;
    }
    let bytes: Vec<u8> = text.iter().copied().filter(|&b| b != 0).collect();
    let c: &'static CStr = Box::leak(CString::new(bytes).unwrap_or_default().into_boxed_c_str());
    all.insert(text.to_vec(), c);
    c
}

/// The ranges that ended since the last call, for the trace. With
/// `close_ns`, the trace closes: every range still open is taken too, ended
/// at the close and marked so.
pub(crate) fn take_ended(close_ns: Option<u64>) -> Vec<Ended> {
    let mut out = std::mem::take(&mut *lock(&ENDED));
    let mut threads = lock(&THREADS);
    for t in threads.iter() {
        let mut t = lock(t);
        out.append(&mut t.ended);
        if let Some(at) = close_ns {
            let tid = t.tid;
            for o in t.open.drain(..) {
                UNCLOSED.fetch_add(1, Relaxed);
                out.push(ended(tid, o, at, false, true));
            }
        }
    }
    // Threads that exited with nothing open.
    threads.retain(|t| Arc::strong_count(t) > 1 || !lock(t).open.is_empty());
    drop(threads);
    if let Some(at) = close_ns
        && let Some(started) = lock(&STARTED).as_mut()
    {
        for (_, (tid, o)) in started.drain() {
            UNCLOSED.fetch_add(1, Relaxed);
            out.push(ended(tid, o, at, true, true));
        }
    }
    out
}

fn ended(tid: u32, o: Open, end_ns: u64, start_end: bool, unclosed: bool) -> Ended {
    Ended {
        tid,
        start_ns: o.start_ns,
        end_ns,
        name: o.name,
        domain: o.domain,
        start_end,
        unclosed,
    }
}

/// The trace's note on ranges that could not be recorded as given; `None`
/// when there were none.
pub(crate) fn problems() -> Option<String> {
    let parts = [
        (
            UNBALANCED_POPS.load(Relaxed),
            "pops without a push on their thread ignored",
        ),
        (
            UNKNOWN_ENDS.load(Relaxed),
            "ends of ranges never started ignored",
        ),
        (
            UNCLOSED.load(Relaxed),
            "ranges still open at exit (ended at the close)",
        ),
        (
            TOO_DEEP.load(Relaxed),
            "pushes deeper than 64 on their thread not recorded",
        ),
    ];
    crate::log::counted("NVTX ranges", ", ", &parts)
}

/// The range name that opens the capture window, read once from the environment.
fn capture_name() -> Option<&'static str> {
    static NAME: OnceLock<Option<String>> = OnceLock::new();
    NAME.get_or_init(|| {
        let v = std::env::var_os(gpuperf_merge::recording::env::CAPTURE_RANGE)?;
        match crate::config::parse_range(v.to_str()?) {
            Some(crate::config::Range::Nvtx(n)) => Some(n),
            _ => None,
        }
    })
    .as_deref()
}

/// Called by NVTX with its export-table getter. Returns 1 when the slots were
/// filled, 0 otherwise (NVTX then unloads the library and ignores its calls).
///
/// # Safety
/// `get` must be NVTX's `nvtxGetExportTable`, as NVTX passes it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn InitializeInjectionNvtx2(get: Option<GetExportTable>) -> c_int {
    // SAFETY: as this function's contract.
    catch_unwind(|| unsafe { install(get) }).unwrap_or(false) as c_int
}

/// Casts a function to NVTX's generic slot type.
macro_rules! slot {
    ($f:expr, $t:ty) => {
        // SAFETY: NVTX casts the slot back to its own type for that id
        // (`nvtx*_impl_fntype`), which is the signature `$t` spells.
        unsafe { std::mem::transmute::<$t, FnPtr>($f) }
    };
}

/// # Safety
/// As [`InitializeInjectionNvtx2`].
unsafe fn install(get: Option<GetExportTable>) -> bool {
    if capture_name().is_none() && !recording() {
        return false;
    }
    let Some(get) = get else { return false };
    // SAFETY: NVTX's getter takes any id and returns null for unknown ones.
    let table = unsafe { get(ETID_CALLBACKS) }.cast::<ExportTableCallbacks>();
    if table.is_null() {
        return false;
    }
    // SAFETY: a non-null callbacks table is an `NvtxExportTableCallbacks`,
    // whose first field is its size; the second is read only when present.
    let get_table = unsafe {
        if (*table).struct_size < size_of::<ExportTableCallbacks>() {
            return false;
        }
        (*table).get_module_function_table
    };
    let Some(get_table) = get_table else {
        return false;
    };
    let core: [(usize, FnPtr); 8] = [
        (
            RANGE_START_EX,
            slot!(range_start_ex, unsafe extern "C" fn(*const c_void) -> u64),
        ),
        (
            RANGE_START_A,
            slot!(range_start_a, unsafe extern "C" fn(*const c_char) -> u64),
        ),
        (
            RANGE_START_W,
            slot!(range_start_w, unsafe extern "C" fn(*const u32) -> u64),
        ),
        (RANGE_END, slot!(range_end, extern "C" fn(u64))),
        (
            RANGE_PUSH_EX,
            slot!(range_push_ex, unsafe extern "C" fn(*const c_void) -> c_int),
        ),
        (
            RANGE_PUSH_A,
            slot!(range_push_a, unsafe extern "C" fn(*const c_char) -> c_int),
        ),
        (
            RANGE_PUSH_W,
            slot!(range_push_w, unsafe extern "C" fn(*const u32) -> c_int),
        ),
        (RANGE_POP, slot!(range_pop, extern "C" fn() -> c_int)),
    ];
    // SAFETY: `get_table` is NVTX's, as read above.
    if !unsafe { fill(get_table, MODULE_CORE, &core) } {
        return false;
    }
    // The domain forms: without them, domain calls stay no-ops.
    let core2: [(usize, FnPtr); 6] = [
        (
            DOMAIN_RANGE_START_EX,
            slot!(
                domain_range_start_ex,
                unsafe extern "C" fn(*const c_void, *const c_void) -> u64
            ),
        ),
        (
            DOMAIN_RANGE_END,
            slot!(domain_range_end, extern "C" fn(*const c_void, u64)),
        ),
        (
            DOMAIN_RANGE_PUSH_EX,
            slot!(
                domain_range_push_ex,
                unsafe extern "C" fn(*const c_void, *const c_void) -> c_int
            ),
        ),
        (
            DOMAIN_RANGE_POP,
            slot!(domain_range_pop, extern "C" fn(*const c_void) -> c_int),
        ),
        (
            DOMAIN_REGISTER_STRING_A,
            slot!(
                domain_register_string_a,
                unsafe extern "C" fn(*const c_void, *const c_char) -> *const c_char
            ),
        ),
        (
            DOMAIN_CREATE_A,
            slot!(
                domain_create_a,
                unsafe extern "C" fn(*const c_char) -> *const c_char
            ),
        ),
    ];
    // SAFETY: as above.
    unsafe { fill(get_table, MODULE_CORE2, &core2) };
    true
}

/// Writes `ours` into NVTX's slots of `module`; false when NVTX has no table
/// for it.
///
/// # Safety
/// `get_table` must be NVTX's `GetModuleFunctionTable`.
unsafe fn fill(get_table: GetModuleFunctionTable, module: c_int, ours: &[(usize, FnPtr)]) -> bool {
    let mut slots: *mut *mut FnPtr = std::ptr::null_mut();
    let mut size: c_uint = 0;
    // SAFETY: both out-pointers point to locals of the right types.
    if unsafe { get_table(module, &mut slots, &mut size) } == 0 || slots.is_null() {
        return false;
    }
    for &(cbid, f) in ours {
        // `size` counts the slots after the unused slot 0.
        if cbid >= size as usize {
            continue;
        }
        // SAFETY: `slots` has `size + 1` entries (NVTX's table is
        // `NVTX_CBID_*_SIZE + 1` long); a non-null entry points to NVTX's
        // function-pointer variable for that id, which it reads only after
        // this initialization returns.
        unsafe {
            let slot = *slots.add(cbid);
            if !slot.is_null() {
                slot.write(f);
            }
        }
    }
    true
}

/// # Safety
/// `p` is null or a NUL-terminated string that lives for the call.
unsafe fn ascii(p: *const c_char) -> Option<String> {
    // SAFETY: as this function's contract.
    (!p.is_null())
        .then(|| String::from_utf8_lossy(unsafe { CStr::from_ptr(p) }.to_bytes()).into_owned())
}

/// A wide (UTF-32 on Linux) message.
///
/// # Safety
/// `p` is null or a NUL-terminated `wchar_t` string that lives for the call.
unsafe fn wide(p: *const u32) -> Option<String> {
    if p.is_null() {
        return None;
    }
    let mut s = String::new();
    for i in 0.. {
        // SAFETY: the string is NUL-terminated and read up to its NUL.
        let c = unsafe { p.add(i).read() };
        if c == 0 {
            break;
        }
        s.push(char::from_u32(c).unwrap_or(char::REPLACEMENT_CHARACTER));
    }
    Some(s)
}

/// The message of an `nvtxEventAttributes_t`.
///
/// # Safety
/// `attr` is null or an `nvtxEventAttributes_t` that lives for the call.
unsafe fn attr_message(attr: *const c_void) -> Option<String> {
    if attr.is_null() {
        return None;
    }
    let a = attr.cast::<u8>();
    // SAFETY: the attributes struct holds its message type and message at
    // these offsets (`nvtxEventAttributes_v2`); the message is read as the
    // type says; a registered string's handle is one of this library's
    // interned C strings (`domain_register_string_a`).
    unsafe {
        let kind = a.add(ATTR_MESSAGE_TYPE).cast::<i32>().read_unaligned();
        let msg = a.add(ATTR_MESSAGE).cast::<*const c_void>().read_unaligned();
        match kind {
            MESSAGE_ASCII | MESSAGE_REGISTERED => ascii(msg.cast()),
            MESSAGE_UNICODE => wide(msg.cast()),
            _ => None,
        }
    }
}

/// A domain handle's name: handles are this library's interned C strings;
/// null is the default domain.
///
/// # Safety
/// `domain` is null or a handle [`domain_create_a`] returned.
unsafe fn domain_name(domain: *const c_void) -> Option<&'static str> {
    if domain.is_null() {
        return None;
    }
    // SAFETY: as this function's contract: interned strings live for the
    // process.
    let c: &'static CStr = unsafe { CStr::from_ptr(domain.cast()) };
    c.to_str().ok()
}

fn is_capture(name: Option<&str>) -> bool {
    matches!((name, capture_name()), (Some(m), Some(n)) if m == n)
}

fn push(name: Option<String>, domain: Option<&'static str>) -> c_int {
    let capture = is_capture(name.as_deref());
    let depth = PUSHED
        .try_with(|p| {
            let mut p = p.borrow_mut();
            p.push(capture);
            p.len() - 1
        })
        .ok();
    if recording()
        && let Some(d) = depth
    {
        if d < MAX_DEPTH {
            let start_ns = monotonic_ns();
            let open = Open {
                name: name.unwrap_or_default().into_boxed_str(),
                domain,
                start_ns,
            };
            with_mine(|t| t.open.push(open));
        } else {
            TOO_DEEP.fetch_add(1, Relaxed);
        }
    }
    if capture {
        capture::nvtx_range(true);
    }
    depth.map_or(-1, |d| d as c_int)
}

fn pop() -> c_int {
    let popped = PUSHED
        .try_with(|p| {
            let mut p = p.borrow_mut();
            p.pop().map(|c| (c, p.len()))
        })
        .ok()
        .flatten();
    let Some((capture, depth)) = popped else {
        UNBALANCED_POPS.fetch_add(1, Relaxed);
        return -1;
    };
    if recording() && depth < MAX_DEPTH {
        let end_ns = monotonic_ns();
        with_mine(|t| {
            if let Some(o) = t.open.pop() {
                let tid = t.tid;
                keep(&mut t.ended, ended(tid, o, end_ns, false, false));
            }
        });
    }
    if capture {
        capture::nvtx_range(false);
    }
    depth as c_int
}

/// Start/end range ids: a count, shifted, with the capture flag in bit 0.
fn start(name: Option<String>, domain: Option<&'static str>) -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let capture = is_capture(name.as_deref());
    let id = (NEXT.fetch_add(1, Relaxed) << 1) | u64::from(capture);
    if recording() {
        let open = Open {
            name: name.unwrap_or_default().into_boxed_str(),
            domain,
            start_ns: monotonic_ns(),
        };
        lock(&STARTED)
            .get_or_insert_with(HashMap::new)
            .insert(id, (gettid(), open));
    }
    if capture {
        capture::nvtx_range(true);
    }
    id
}

fn end(id: u64) {
    if recording() {
        let end_ns = monotonic_ns();
        let open = lock(&STARTED).as_mut().and_then(|m| m.remove(&id));
        match open {
            Some((tid, o)) => keep(&mut lock(&ENDED), ended(tid, o, end_ns, true, false)),
            None => {
                UNKNOWN_ENDS.fetch_add(1, Relaxed);
            }
        }
    }
    if id & 1 == 1 {
        capture::nvtx_range(false);
    }
}

extern "C" fn range_pop() -> c_int {
    catch_unwind(pop).unwrap_or(-1)
}

unsafe extern "C" fn range_push_a(message: *const c_char) -> c_int {
    // SAFETY: NVTX passes the caller's NUL-terminated message.
    catch_unwind(|| push(unsafe { ascii(message) }, None)).unwrap_or(-1)
}

unsafe extern "C" fn range_push_w(message: *const u32) -> c_int {
    // SAFETY: NVTX passes the caller's NUL-terminated message.
    catch_unwind(|| push(unsafe { wide(message) }, None)).unwrap_or(-1)
}

unsafe extern "C" fn range_push_ex(attr: *const c_void) -> c_int {
    // SAFETY: NVTX passes the caller's attributes.
    catch_unwind(|| push(unsafe { attr_message(attr) }, None)).unwrap_or(-1)
}

extern "C" fn range_end(id: u64) {
    let _ = catch_unwind(|| end(id));
}

unsafe extern "C" fn range_start_a(message: *const c_char) -> u64 {
    // SAFETY: NVTX passes the caller's NUL-terminated message.
    catch_unwind(|| start(unsafe { ascii(message) }, None)).unwrap_or(0)
}

unsafe extern "C" fn range_start_w(message: *const u32) -> u64 {
    // SAFETY: NVTX passes the caller's NUL-terminated message.
    catch_unwind(|| start(unsafe { wide(message) }, None)).unwrap_or(0)
}

unsafe extern "C" fn range_start_ex(attr: *const c_void) -> u64 {
    // SAFETY: NVTX passes the caller's attributes.
    catch_unwind(|| start(unsafe { attr_message(attr) }, None)).unwrap_or(0)
}

unsafe extern "C" fn domain_range_push_ex(domain: *const c_void, attr: *const c_void) -> c_int {
    catch_unwind(|| {
        // SAFETY: NVTX passes the caller's attributes and domain handle (ours).
        let (message, domain) = unsafe { (attr_message(attr), domain_name(domain)) };
        push(message, domain)
    })
    .unwrap_or(-1)
}

/// Domains share their thread's push/pop stack: programs nest them.
extern "C" fn domain_range_pop(_domain: *const c_void) -> c_int {
    catch_unwind(pop).unwrap_or(-1)
}

unsafe extern "C" fn domain_range_start_ex(domain: *const c_void, attr: *const c_void) -> u64 {
    catch_unwind(|| {
        // SAFETY: NVTX passes the caller's attributes and domain handle (ours).
        let (message, domain) = unsafe { (attr_message(attr), domain_name(domain)) };
        start(message, domain)
    })
    .unwrap_or(0)
}

extern "C" fn domain_range_end(_domain: *const c_void, id: u64) {
    let _ = catch_unwind(|| end(id));
}

/// `nvtxDomainCreateA`: the handle is the interned name.
unsafe extern "C" fn domain_create_a(name: *const c_char) -> *const c_char {
    catch_unwind(|| {
        // SAFETY: NVTX passes the caller's NUL-terminated name.
        let name = unsafe { ascii(name) };
        name.map_or(std::ptr::null(), |n| intern(n.as_bytes()).as_ptr())
    })
    .unwrap_or(std::ptr::null())
}

/// `nvtxDomainRegisterStringA`: the handle is the interned string.
unsafe extern "C" fn domain_register_string_a(
    _domain: *const c_void,
    text: *const c_char,
) -> *const c_char {
    catch_unwind(|| {
        // SAFETY: NVTX passes the caller's NUL-terminated string.
        let text = unsafe { ascii(text) };
        text.map_or(std::ptr::null(), |t| intern(t.as_bytes()).as_ptr())
    })
    .unwrap_or(std::ptr::null())
}
