//! NVTX through its injection hook, for `--capture-range nvtx:NAME`.
//!
//! NVTX v3 (header-only, compiled into each library that uses it, PyTorch's
//! `torch.cuda.nvtx` included) loads the library named by
//! `NVTX_INJECTION64_PATH` at its first call and calls its
//! `InitializeInjectionNvtx2(getExportTable)`. The injection asks that
//! function for the `NVTX_ETID_CALLBACKS` table, whose
//! `GetModuleFunctionTable(NVTX_CB_MODULE_CORE, …)` hands out the addresses of
//! NVTX's function pointers for the core module, indexed by
//! `NVTX_CBID_CORE_*`; the injection writes its own functions into the slots
//! it implements, and NVTX makes every other one a no-op. Returning 0 makes
//! NVTX unload the library and turn every call into a no-op.
//!
//! Push/pop ranges are per thread; start/end ranges cross threads and are
//! known by the id the start returned, which here carries in its low bit
//! whether the range has the capture name. The window is open while any range
//! of that name is.

use std::cell::RefCell;
use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::panic::catch_unwind;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::capture;

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
/// `NVTX_CB_MODULE_CORE`.
const MODULE_CORE: c_int = 1;
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

/// The range name that opens the capture window, read once from the environment.
fn capture_name() -> Option<&'static str> {
    static NAME: OnceLock<Option<String>> = OnceLock::new();
    NAME.get_or_init(|| {
        let v = std::env::var_os(gpuperf_merge::recording::env::CAPTURE_RANGE)?;
        match crate::config::parse_range(v.to_str()?) {
            Some(capture::Range::Nvtx(n)) => Some(n),
            _ => None,
        }
    })
    .as_deref()
}

thread_local! {
    /// Whether each range this thread pushed and has not popped has the
    /// capture name, innermost last.
    static PUSHED: RefCell<Vec<bool>> = const { RefCell::new(Vec::new()) };
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

/// # Safety
/// As [`InitializeInjectionNvtx2`].
unsafe fn install(get: Option<GetExportTable>) -> bool {
    if capture_name().is_none() {
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
    let mut slots: *mut *mut FnPtr = std::ptr::null_mut();
    let mut size: c_uint = 0;
    // SAFETY: both out-pointers point to locals of the right types.
    if unsafe { get_table(MODULE_CORE, &mut slots, &mut size) } == 0 || slots.is_null() {
        return false;
    }
    // SAFETY: each function is transmuted to NVTX's generic pointer type, and
    // NVTX casts it back to the slot's own type (`nvtx*_impl_fntype`), which
    // is the signature written here.
    let ours: [(usize, FnPtr); 8] = unsafe {
        [
            (
                RANGE_START_EX,
                std::mem::transmute::<unsafe extern "C" fn(*const c_void) -> u64, FnPtr>(
                    range_start_ex,
                ),
            ),
            (
                RANGE_START_A,
                std::mem::transmute::<unsafe extern "C" fn(*const c_char) -> u64, FnPtr>(
                    range_start_a,
                ),
            ),
            (
                RANGE_START_W,
                std::mem::transmute::<unsafe extern "C" fn(*const u32) -> u64, FnPtr>(
                    range_start_w,
                ),
            ),
            (
                RANGE_END,
                std::mem::transmute::<extern "C" fn(u64), FnPtr>(range_end),
            ),
            (
                RANGE_PUSH_EX,
                std::mem::transmute::<unsafe extern "C" fn(*const c_void) -> c_int, FnPtr>(
                    range_push_ex,
                ),
            ),
            (
                RANGE_PUSH_A,
                std::mem::transmute::<unsafe extern "C" fn(*const c_char) -> c_int, FnPtr>(
                    range_push_a,
                ),
            ),
            (
                RANGE_PUSH_W,
                std::mem::transmute::<unsafe extern "C" fn(*const u32) -> c_int, FnPtr>(
                    range_push_w,
                ),
            ),
            (
                RANGE_POP,
                std::mem::transmute::<extern "C" fn() -> c_int, FnPtr>(range_pop),
            ),
        ]
    };
    for (cbid, f) in ours {
        // `size` counts the slots after the unused slot 0.
        if cbid >= size as usize {
            continue;
        }
        // SAFETY: `slots` has `size + 1` entries (NVTX's table is
        // `NVTX_CBID_CORE_SIZE + 1` long); a non-null entry points to NVTX's
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

/// Whether a range's message is the capture name.
fn is_capture(message: Option<&[u8]>) -> bool {
    matches!((message, capture_name()), (Some(m), Some(n)) if m == n.as_bytes())
}

/// # Safety
/// `p` is null or a NUL-terminated string that lives for the call.
unsafe fn ascii<'a>(p: *const c_char) -> Option<&'a [u8]> {
    // SAFETY: as this function's contract.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_bytes())
}

/// Whether a wide (UTF-32 on Linux) message is the capture name.
///
/// # Safety
/// `p` is null or a NUL-terminated `wchar_t` string that lives for the call.
unsafe fn wide_is_capture(p: *const u32) -> bool {
    let Some(name) = capture_name() else {
        return false;
    };
    if p.is_null() {
        return false;
    }
    let mut chars = name.chars();
    for i in 0.. {
        // SAFETY: the string is NUL-terminated and read up to its NUL.
        let c = unsafe { p.add(i).read() };
        match (c, chars.next()) {
            (0, None) => return true,
            (c, Some(n)) if c == n as u32 => {}
            _ => return false,
        }
    }
    false
}

/// # Safety
/// `attr` is null or an `nvtxEventAttributes_t` that lives for the call.
unsafe fn attr_is_capture(attr: *const c_void) -> bool {
    if attr.is_null() {
        return false;
    }
    let a = attr.cast::<u8>();
    // SAFETY: the attributes struct holds its message type and message at
    // these offsets (`nvtxEventAttributes_v2`); the message is read as the
    // type says.
    unsafe {
        let kind = a.add(ATTR_MESSAGE_TYPE).cast::<i32>().read_unaligned();
        let msg = a.add(ATTR_MESSAGE).cast::<*const c_void>().read_unaligned();
        match kind {
            MESSAGE_ASCII => is_capture(ascii(msg.cast())),
            MESSAGE_UNICODE => wide_is_capture(msg.cast()),
            // A registered string handle: not matched.
            _ => false,
        }
    }
}

fn push(capture: bool) -> c_int {
    let depth = PUSHED
        .try_with(|p| {
            let mut p = p.borrow_mut();
            p.push(capture);
            p.len() as c_int - 1
        })
        .unwrap_or(-1);
    if capture {
        capture::nvtx_range(true);
    }
    depth
}

extern "C" fn range_pop() -> c_int {
    catch_unwind(|| {
        let popped = PUSHED
            .try_with(|p| {
                let mut p = p.borrow_mut();
                p.pop().map(|c| (c, p.len() as c_int))
            })
            .ok()
            .flatten();
        match popped {
            Some((capture, depth)) => {
                if capture {
                    capture::nvtx_range(false);
                }
                depth
            }
            None => -1,
        }
    })
    .unwrap_or(-1)
}

unsafe extern "C" fn range_push_a(message: *const c_char) -> c_int {
    // SAFETY: NVTX passes the caller's NUL-terminated message.
    catch_unwind(|| push(is_capture(unsafe { ascii(message) }))).unwrap_or(-1)
}

unsafe extern "C" fn range_push_w(message: *const u32) -> c_int {
    // SAFETY: NVTX passes the caller's NUL-terminated message.
    catch_unwind(|| push(unsafe { wide_is_capture(message) })).unwrap_or(-1)
}

unsafe extern "C" fn range_push_ex(attr: *const c_void) -> c_int {
    // SAFETY: NVTX passes the caller's attributes.
    catch_unwind(|| push(unsafe { attr_is_capture(attr) })).unwrap_or(-1)
}

/// Start/end range ids: a count, shifted, with the capture flag in bit 0.
fn start(capture: bool) -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    if capture {
        capture::nvtx_range(true);
    }
    (NEXT.fetch_add(1, Relaxed) << 1) | u64::from(capture)
}

extern "C" fn range_end(id: u64) {
    if id & 1 == 1 {
        let _ = catch_unwind(|| capture::nvtx_range(false));
    }
}

unsafe extern "C" fn range_start_a(message: *const c_char) -> u64 {
    // SAFETY: NVTX passes the caller's NUL-terminated message.
    catch_unwind(|| start(is_capture(unsafe { ascii(message) }))).unwrap_or(0)
}

unsafe extern "C" fn range_start_w(message: *const u32) -> u64 {
    // SAFETY: NVTX passes the caller's NUL-terminated message.
    catch_unwind(|| start(unsafe { wide_is_capture(message) })).unwrap_or(0)
}

unsafe extern "C" fn range_start_ex(attr: *const c_void) -> u64 {
    // SAFETY: NVTX passes the caller's attributes.
    catch_unwind(|| start(unsafe { attr_is_capture(attr) })).unwrap_or(0)
}
