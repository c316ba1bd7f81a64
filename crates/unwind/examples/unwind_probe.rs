//! Test probe: a shared library that a C program or Python (ctypes) loads to take its
//! own stack with this crate, the way the injection library will. Built by
//! `cargo test`; the integration tests load it.
//!
//! `gpuperf_probe_capture(buf, len)` writes one line per frame, innermost first:
//! `N <path>\t<build id>\t<offset hex>` (native, symbolized later by the test with
//! blazesym), `P <function>\t<file>\t<line>` (Python), `U <address hex>`, then a
//! last line `end <StackEnd> python <n> truncated <bool>`. It returns the length
//! written, or -1 if `buf` is too small.

use std::ffi::{c_char, c_int};
use std::fmt::Write as _;
use std::sync::OnceLock;

use gpuperf_unwind::{Captured, Frame, LocalUnwinder, MAX_FRAMES, Options, Trail};

fn unwinder() -> &'static LocalUnwinder {
    static U: OnceLock<LocalUnwinder> = OnceLock::new();
    U.get_or_init(|| LocalUnwinder::new(Options::default()))
}

/// Sets the unwinder up (reads the module table), and has CPython 3.11+
/// count destroyed code objects, as the injection library's first capture does.
#[unsafe(no_mangle)]
pub extern "C" fn gpuperf_probe_init() {
    if let Some(py) = unwinder().python() {
        py.watch_codes(|| true);
    }
}

/// 1 once CPython counts destroyed code objects (3.11+: by the main thread,
/// between two bytecodes after [`gpuperf_probe_init`]), else 0.
#[unsafe(no_mangle)]
pub extern "C" fn gpuperf_probe_watching_codes() -> c_int {
    unwinder()
        .python()
        .is_some_and(|p| p.watching_codes())
        .into()
}

/// Rebuilds the module table if modules changed; 1 if it did.
#[unsafe(no_mangle)]
pub extern "C" fn gpuperf_probe_refresh() -> c_int {
    c_int::from(unwinder().refresh())
}

/// Adds the modules loaded since the table was built, without rebuilding
/// it; 1 if it changed.
#[unsafe(no_mangle)]
pub extern "C" fn gpuperf_probe_add_loaded() -> c_int {
    c_int::from(unwinder().add_loaded())
}

/// Captures the caller's stack and writes it as text into `buf`.
///
/// # Safety
/// `buf` must be valid for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpuperf_probe_capture(buf: *mut c_char, len: usize) -> c_int {
    let u = unwinder();
    let mut frames = [Frame::default(); MAX_FRAMES];
    let captured = u.capture(0, &mut frames);
    // SAFETY: as this function's.
    unsafe { write_stack(&frames[..captured.len], captured, buf, len) }
}

thread_local! {
    static TRAIL: std::cell::RefCell<Trail> = std::cell::RefCell::new(Trail::new(MAX_FRAMES));
}

/// As [`gpuperf_probe_capture`], with the calling thread's [`Trail`] (what
/// the injection library does): the stack may reuse part of the thread's
/// last capture taken this way.
///
/// # Safety
/// As [`gpuperf_probe_capture`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpuperf_probe_capture_reusing(buf: *mut c_char, len: usize) -> c_int {
    let u = unwinder();
    let mut frames = [Frame::default(); MAX_FRAMES];
    TRAIL.with_borrow_mut(|trail| {
        // Written in `then`: a capture taken whole is not in `frames`.
        // SAFETY: as this function's.
        u.capture_then_reusing(0, &mut frames, trail, |f, c| unsafe {
            write_stack(f, c, buf, len)
        })
        .unwrap_or(-1)
    })
}

/// As [`gpuperf_probe_capture_reusing`], expecting the capture kept under
/// `expect` ([`Trail::expect`]; 0: none), then keeping this one under `keep`
/// ([`Trail::keep_last`]; 0: not); the `end` line says whether the kept walk
/// (`kept`) and the whole capture kept with it (`whole`) were taken.
///
/// # Safety
/// As [`gpuperf_probe_capture`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpuperf_probe_capture_kept(
    buf: *mut c_char,
    len: usize,
    expect: u32,
    keep: u32,
) -> c_int {
    let u = unwinder();
    let mut frames = [Frame::default(); MAX_FRAMES];
    TRAIL.with_borrow_mut(|trail| {
        trail.expect([expect, 0]);
        // Written in `then`: a capture taken whole is not in `frames`.
        // SAFETY: as this function's.
        let r = u.capture_then_reusing(0, &mut frames, trail, |f, c| unsafe {
            write_stack(f, c, buf, len)
        });
        if r.is_ok() && keep != 0 {
            trail.keep_last(keep, 0);
        }
        r.unwrap_or(-1)
    })
}

/// Writes a stack as text into `buf` (see the module docs).
///
/// # Safety
/// `buf` must be valid for `len` bytes.
unsafe fn write_stack(frames: &[Frame], captured: Captured, buf: *mut c_char, len: usize) -> c_int {
    let u = unwinder();
    let modules = u.modules();
    let mut text = String::new();
    for f in frames {
        match *f {
            Frame::Native { module, offset, .. } => {
                let m = &modules[module.0 as usize];
                let id: String = m.build_id.iter().map(|b| format!("{b:02x}")).collect();
                let lookup = f.lookup_offset().unwrap_or(offset);
                let _ = writeln!(text, "N {}\t{id}\t{lookup:x}", m.path.display());
            }
            Frame::Python { code, instruction } => {
                let py = u.python().expect("Python frames come from a Python reader");
                match py.resolve(code, instruction) {
                    Some(r) => {
                        let _ = writeln!(text, "P {}\t{}\t{}", r.function, r.file, r.line);
                    }
                    None => {
                        let _ = writeln!(text, "P ?\t?\t0");
                    }
                }
            }
            Frame::Unknown { address } => {
                let _ = writeln!(text, "U {address:x}");
            }
        }
    }
    let _ = writeln!(
        text,
        "end {:?} python {} truncated {} status {:?} recovered {} kept {} whole {} on_caller_stack {}",
        captured.end,
        captured.python_frames,
        captured.python_truncated,
        u.python_status(),
        captured.recovered,
        captured.kept,
        captured.whole,
        u.stats().whole_on_caller_stack
    );
    if text.len() + 1 > len {
        return -1;
    }
    // SAFETY: the caller gives `len` writable bytes; we write text.len() + 1 < len.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), text.len());
        *buf.add(text.len()) = 0;
    }
    text.len() as c_int
}

/// Captures a stack on a new native thread (one the interpreter never saw).
///
/// # Safety
/// As [`gpuperf_probe_capture`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpuperf_probe_capture_in_native_thread(
    buf: *mut c_char,
    len: usize,
) -> c_int {
    let addr = buf as usize;
    std::thread::spawn(move || {
        // SAFETY: the caller's buffer outlives the joined thread.
        unsafe { gpuperf_probe_capture(addr as *mut c_char, len) }
    })
    .join()
    .unwrap_or(-1)
}

/// Captures `n` stacks and returns the nanoseconds per capture (for the bench).
#[unsafe(no_mangle)]
pub extern "C" fn gpuperf_probe_bench(n: u32) -> f64 {
    let u = unwinder();
    let mut frames = [Frame::default(); MAX_FRAMES];
    let t = std::time::Instant::now();
    for _ in 0..n {
        std::hint::black_box(u.capture(0, &mut frames));
    }
    t.elapsed().as_nanos() as f64 / f64::from(n.max(1))
}

/// Writes the unwinder's counters as `name value` lines.
///
/// # Safety
/// `buf` must be valid for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpuperf_probe_stats(buf: *mut c_char, len: usize) -> c_int {
    let text = format!("{:?}\n", unwinder().stats());
    if text.len() + 1 > len {
        return -1;
    }
    // SAFETY: as in gpuperf_probe_capture.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), text.len());
        *buf.add(text.len()) = 0;
    }
    text.len() as c_int
}
