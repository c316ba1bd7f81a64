//! `detect()`: finding the CPython of this process through `dlsym`
//! (`Py_GetVersion`, `PyGILState_GetThisThreadState`, the type objects,
//! `_PyEval_EvalFrameDefault`'s range; on 3.13 `_PyRuntime`), and choosing
//! one version's [`Layout`].

use std::cell::UnsafeCell;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize};

use super::layout::Layout;
use super::watch::CodeWatch;
use super::{ARENA_BYTES, CODE_SLOTS, CodeSlot, Python, v3_10, v3_11, v3_12, v3_13};

use crate::frame::ModuleId;
use crate::module::ModuleInfo;

unsafe extern "C" {
    pub(super) fn dladdr1(
        addr: *const c_void,
        info: *mut libc::Dl_info,
        extra: *mut *mut c_void,
        flags: c_int,
    ) -> c_int;
}
pub(super) const RTLD_DL_SYMENT: c_int = 1;

pub(super) fn sym(name: &CStr) -> Option<u64> {
    // SAFETY: a NUL-terminated name; dlsym has no other precondition.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!p.is_null()).then_some(p as u64)
}

impl Python {
    /// Finds the CPython in this process, if any. Allocates; not on the hot path.
    pub(crate) fn detect(modules: &[ModuleInfo]) -> Option<Python> {
        let get_version = sym(c"Py_GetVersion")?;
        // SAFETY: CPython's `const char *Py_GetVersion(void)`, which returns a
        // static string and needs no GIL.
        let version = unsafe {
            let f: unsafe extern "C" fn() -> *const c_char =
                std::mem::transmute(get_version as usize);
            CStr::from_ptr(f()).to_string_lossy().into_owned()
        };
        let minor: u8 = version
            .strip_prefix("3.")
            .and_then(|v| v.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|m| m.parse().ok())?;
        let layout = match minor {
            10 => v3_10::LAYOUT,
            11 => v3_11::LAYOUT,
            12 => v3_12::LAYOUT,
            13 => {
                let rt = sym(c"_PyRuntime")?;
                // SAFETY: `_PyRuntime` starts with `_Py_DebugOffsets` in 3.13; the
                // reads stay inside its 584 bytes.
                unsafe {
                    let cookie = std::slice::from_raw_parts(rt as *const u8, 8);
                    let version = (rt as *const u64).add(1).read();
                    v3_13::layout(cookie, version, |off| {
                        ((rt + off) as *const u64).read_unaligned()
                    })?
                }
            }
            _ => return None,
        };
        let tstate_fn = sym(c"PyGILState_GetThisThreadState")?;
        let eval = sym(c"_PyEval_EvalFrameDefault")?;
        let mut info: libc::Dl_info = unsafe_zeroed_dl_info();
        let mut esym: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-parameters; RTLD_DL_SYMENT stores an `Elf64_Sym *`.
        let size = unsafe {
            if dladdr1(eval as *const c_void, &mut info, &mut esym, RTLD_DL_SYMENT) == 0
                || esym.is_null()
            {
                return None;
            }
            (*(esym as *const libc::Elf64_Sym)).st_size
        };
        let (index, m) = modules
            .iter()
            .enumerate()
            .find(|(_, m)| m.text.contains(&eval))?;
        let start = eval - m.bias;
        let types = [
            sym(c"PyCode_Type")?,
            sym(c"PyUnicode_Type")?,
            sym(c"PyBytes_Type")?,
        ];
        // SAFETY: CPython's `PyThreadState *PyGILState_GetThisThreadState(void)`.
        let this_thread_state = unsafe {
            std::mem::transmute::<usize, unsafe extern "C" fn() -> *mut c_void>(tstate_fn as usize)
        };
        Some(Python {
            watch: CodeWatch::detect(minor, layout.free_threaded, sym),
            ..Python::with_layout(
                layout,
                this_thread_state,
                types,
                ModuleId(index as u32),
                start..start + size.max(1),
            )
        })
    }

    /// A reader of `layout`; `types`: the addresses of the `code`, `str` and
    /// `bytes` type objects.
    pub(super) fn with_layout(
        layout: Layout,
        this_thread_state: unsafe extern "C" fn() -> *mut c_void,
        types: [u64; 3],
        eval_module: ModuleId,
        eval_range: Range<u64>,
    ) -> Python {
        Python {
            layout,
            this_thread_state,
            code_type: types[0],
            unicode_type: types[1],
            bytes_type: types[2],
            eval_module,
            code_span: layout
                .code_linetable
                .max(layout.code_firstlineno)
                .max(layout.code_qualname)
                .max(layout.code_filename)
                .max(layout.ob_type)
                + 8,
            eval_range,
            // SAFETY: getpid has no preconditions.
            pid: unsafe { libc::getpid() },
            disabled: AtomicU8::new(0),
            codes: (0..CODE_SLOTS).map(|_| CodeSlot::default()).collect(),
            arena: (0..ARENA_BYTES).map(|_| UnsafeCell::new(0)).collect(),
            arena_used: AtomicUsize::new(0),
            overflow: AtomicBool::new(false),
            refused: AtomicBool::new(false),
            read_one: AtomicBool::new(false),
            last_skip: AtomicU8::new(0),
            watch: None,
        }
    }
}

pub(super) fn unsafe_zeroed_dl_info() -> libc::Dl_info {
    libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    }
}
