//! The loaded modules, as `dl_iterate_phdr` lists them: each one's text range,
//! build id and `.eh_frame` (read in place), given a stable [`ModuleId`] by the
//! [`Registry`], and the unwind tables built from them (a [`Snapshot`]), whole
//! or for the modules added since the last one.
//!
//! Built on the application's threads too (a capture after a `dlopen`): the
//! allocations here are fallible, and a refusal gives no snapshot (`None`)
//! and changes nothing but the registry, whose modules a later try finds
//! again. framehop's, inside [`Table::try_with_generation`], and the shared
//! main table's `Arc` (a rebuild only) are not.

use std::ffi::{CStr, c_int, c_void};
use std::ops::Range;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::fallible;
use crate::frame::ModuleId;
use crate::module::{ModuleInfo, build_id_in_notes, union};
use crate::table::{Bytes, Cfi, Entry, Table, unique};

use super::{Registry, Snapshot};

/// glibc's (adds, subs) counters, read through the first `dl_iterate_phdr` entry.
pub(super) fn loader_counters() -> (u64, u64) {
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: called by dl_iterate_phdr with a valid entry; `data` is the
        // (u64, u64) passed below.
        unsafe {
            let out = &mut *(data as *mut (u64, u64));
            *out = ((*info).dlpi_adds, (*info).dlpi_subs);
        }
        1
    }
    let mut out = (0u64, 0u64);
    // SAFETY: the callback matches the declared type and only writes `out`.
    unsafe { libc::dl_iterate_phdr(Some(first), (&mut out as *mut (u64, u64)).cast()) };
    out
}

/// One loaded module as `dl_iterate_phdr` describes it.
struct Loaded {
    name: PathBuf,
    bias: u64,
    phdr: usize,
    text: Option<Range<u64>>,
    /// Every executable segment is readable too.
    text_readable: bool,
    build_id: Vec<u8>,
    cfi: Option<(Cfi, u64)>,
}

/// Every loaded module's table; `None` when memory is short.
pub(super) fn build_snapshot(registry: &mut Registry) -> Option<Snapshot> {
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: dl_iterate_phdr passes a valid entry and our Vec; the loader lock
        // is held, so the module's segments stay mapped while we read them.
        unsafe {
            let out = &mut *(data as *mut (Vec<Loaded>, u64, u64, bool));
            out.1 = (*info).dlpi_adds;
            out.2 = (*info).dlpi_subs;
            if read_loaded(&*info).map(|m| fallible::push(&mut out.0, m).is_ok()) != Some(true) {
                // Memory is short: the list is incomplete, the walk stops.
                out.3 = true;
                return 1;
            }
        }
        0
    }
    let mut found: (Vec<Loaded>, u64, u64, bool) = (Vec::new(), 0, 0, false);
    // SAFETY: the callback matches the declared type and only touches `found`.
    unsafe {
        libc::dl_iterate_phdr(
            Some(each),
            (&mut found as *mut (Vec<Loaded>, u64, u64, bool)).cast(),
        )
    };
    let (loaded, adds, subs, refused) = found;
    if refused {
        return None;
    }
    let entries = register(registry, loaded)?;
    let table = Table::try_with_generation(entries, |id| module_name(registry, id), unique())?;
    Some(Snapshot::new(Arc::new(table), None, (adds, subs)))
}

/// `prev` with the modules loaded since: those whose code `prev`'s main table
/// does not cover are read (only their headers, in place) into an extra
/// table that shares the main table's rule-cache generation. Only for loads:
/// with no module unloaded since `prev`, no new module can lie where the main
/// table has one. `None` when memory is short.
pub(super) fn build_added(registry: &mut Registry, prev: &Snapshot) -> Option<Snapshot> {
    struct Found<'a> {
        known: &'a Table,
        loaded: Vec<Loaded>,
        adds: u64,
        subs: u64,
        refused: bool,
    }
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: dl_iterate_phdr passes a valid entry and our `Found`; the
        // loader lock is held, so the module stays mapped while we read it.
        unsafe {
            let out = &mut *(data as *mut Found);
            let info = &*info;
            out.adds = info.dlpi_adds;
            out.subs = info.dlpi_subs;
            let phdrs = std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize);
            let code = phdrs
                .iter()
                .find(|p| p.p_type == libc::PT_LOAD && p.p_flags & libc::PF_X != 0)
                .map(|p| info.dlpi_addr.wrapping_add(p.p_vaddr));
            let known =
                code.is_some_and(|c| out.known.find(c).is_some_and(|e| e.bias == info.dlpi_addr));
            if !known
                && read_loaded(info).map(|m| fallible::push(&mut out.loaded, m).is_ok())
                    != Some(true)
            {
                // Memory is short: the list is incomplete, the walk stops.
                out.refused = true;
                return 1;
            }
        }
        0
    }
    let mut found = Found {
        known: &prev.table,
        loaded: Vec::new(),
        adds: 0,
        subs: 0,
        refused: false,
    };
    // SAFETY: the callback matches the declared type and only touches `found`.
    unsafe { libc::dl_iterate_phdr(Some(each), (&mut found as *mut Found).cast()) };
    let Found {
        loaded,
        adds,
        subs,
        refused,
        ..
    } = found;
    if refused {
        return None;
    }
    let entries = register(registry, loaded)?;
    let extra = match entries.is_empty() {
        true => None,
        false => Some(Table::try_with_generation(
            entries,
            |id| module_name(registry, id),
            prev.table.generation,
        )?),
    };
    Some(Snapshot::new(Arc::clone(&prev.table), extra, (adds, subs)))
}

/// A module's name for framehop (which only shows it); `None` when memory
/// is short.
fn module_name(registry: &Registry, id: ModuleId) -> Option<String> {
    match registry.modules.get(id.0 as usize) {
        Some(m) => fallible::string(&m.path.to_string_lossy()),
        None => Some(String::new()),
    }
}

/// Gives each loaded module its id (a new one for a module not seen before)
/// and makes its table entry. `None` when memory is short (the modules given
/// ids until then keep them: a later try finds them).
fn register(registry: &mut Registry, loaded: Vec<Loaded>) -> Option<Vec<Entry>> {
    // Only the main program has no name; its path is read once.
    if registry.exe.is_none() && loaded.iter().any(|m| m.name.as_os_str().is_empty()) {
        registry.exe = Some(std::fs::read_link("/proc/self/exe").unwrap_or_default());
    }
    let mut entries = fallible::vec(loaded.len())?;
    for m in loaded {
        let Some(text) = m.text else { continue };
        let path = match m.name.as_os_str().is_empty() {
            true => fallible::path(registry.exe.as_deref().unwrap_or(Path::new("")).as_os_str())?,
            false => m.name,
        };
        let key = (m.bias, m.phdr, path, m.build_id);
        let id = match registry.ids.get(&key) {
            Some(&id) => id,
            None => {
                let info = ModuleInfo {
                    path: fallible::path(key.2.as_os_str())?,
                    build_id: fallible::bytes(&key.3)?,
                    bias: m.bias,
                    text: text.clone(),
                    has_unwind_info: m.cfi.is_some(),
                };
                if !fallible::reserve(&mut registry.modules, 1)
                    || fallible::mock::refuses()
                    || registry.ids.try_reserve(1).is_err()
                {
                    return None;
                }
                let id = ModuleId(registry.modules.len() as u32);
                // Within the room reserved: no allocation.
                registry.modules.push(info);
                registry.ids.insert(key, id);
                id
            }
        };
        let (cfi, hdr_avma) = match m.cfi {
            Some((cfi, hdr)) => (Some(cfi), hdr),
            None => (None, 0),
        };
        entries.push(Entry {
            id,
            avma: text,
            bias: m.bias,
            cfi,
            eh_frame_hdr_avma: hdr_avma,
            text_readable: m.text_readable,
        });
    }
    Some(entries)
}

/// Reads one module's program headers in place; `None` when memory is short.
///
/// # Safety
/// `info` must come from `dl_iterate_phdr`, inside its callback.
unsafe fn read_loaded(info: &libc::dl_phdr_info) -> Option<Loaded> {
    let bias = info.dlpi_addr;
    let name = if info.dlpi_name.is_null() {
        PathBuf::new()
    } else {
        // SAFETY: the loader's NUL-terminated name.
        fallible::path(std::ffi::OsStr::from_bytes(unsafe {
            CStr::from_ptr(info.dlpi_name).to_bytes()
        }))?
    };
    // SAFETY: dlpi_phdr points at dlpi_phnum program headers.
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    let mut text = None;
    let mut text_readable = true;
    let mut build_id = Vec::new();
    let mut hdr = None;
    for ph in phdrs {
        let start = bias.wrapping_add(ph.p_vaddr);
        match ph.p_type {
            libc::PT_LOAD if ph.p_flags & libc::PF_X != 0 => {
                text = Some(union(text, start..start + ph.p_memsz));
                text_readable &= ph.p_flags & libc::PF_R != 0;
            }
            libc::PT_GNU_EH_FRAME => hdr = Some((ph.p_vaddr, ph.p_memsz)),
            libc::PT_NOTE if build_id.is_empty() => {
                // SAFETY: a note segment of a loaded module is mapped readable.
                let notes =
                    unsafe { std::slice::from_raw_parts(start as *const u8, ph.p_filesz as usize) };
                build_id = match build_id_in_notes(notes) {
                    Some(id) => fallible::bytes(id)?,
                    None => Vec::new(),
                };
            }
            _ => {}
        }
    }
    let cfi = hdr.and_then(|(hdr_svma, hdr_len)| {
        let hdr_bytes = Bytes::InPlace {
            ptr: bias.wrapping_add(hdr_svma) as *const u8,
            len: hdr_len as usize,
        };
        let bases = gimli::BaseAddresses::default().set_eh_frame_hdr(hdr_svma);
        let parsed = gimli::EhFrameHdr::new(&hdr_bytes, gimli::LittleEndian)
            .parse(&bases, 8)
            .ok()?;
        let gimli::Pointer::Direct(eh_svma) = parsed.eh_frame_ptr() else {
            return None;
        };
        // .eh_frame's length is not in the header: bound it by its segment's end.
        let seg_end = phdrs
            .iter()
            .filter(|p| p.p_type == libc::PT_LOAD)
            .find(|p| p.p_vaddr <= eh_svma && eh_svma < p.p_vaddr + p.p_memsz)
            .map(|p| p.p_vaddr + p.p_memsz)?;
        let text_svma = text.as_ref().map_or(0, |t| t.start.wrapping_sub(bias));
        Some((
            Cfi {
                eh_frame: Bytes::InPlace {
                    ptr: bias.wrapping_add(eh_svma) as *const u8,
                    len: (seg_end - eh_svma) as usize,
                },
                eh_frame_svma: eh_svma,
                hdr: Some((hdr_bytes, hdr_svma)),
                text_svma,
            },
            bias.wrapping_add(hdr_svma),
        ))
    });
    Some(Loaded {
        name,
        bias,
        phdr: info.dlpi_phdr as usize,
        text,
        text_readable,
        build_id,
        cfi,
    })
}

#[cfg(test)]
#[allow(non_snake_case)]
mod tests {
    use gpuperf_test_support::cc::Gcc;

    use super::*;
    use crate::fallible::mock;
    use crate::local::{LOADER_TESTS, LocalUnwinder, Options};

    /// A shared library of this test's own: no other test loads it.
    fn library(dir: &Path) -> PathBuf {
        let src = dir.join("added.c");
        std::fs::write(&src, "int gpuperf_added(int x) { return x + 1; }\n").unwrap();
        Gcc::new(dir.join("libgpuperf_added.so"))
            .args(["-shared", "-fPIC"])
            .arg(&src)
            .build()
    }

    /// The mock allocator refuses `add_loaded` its 1st allocation, then its
    /// 2nd, and so on, until one call has all it needs: each refusal leaves
    /// the table as it was (stale, for the next capture to try again) and is
    /// counted; the call that succeeds adds the library, and a refused
    /// `refresh` folds nothing in until it is granted memory.
    #[test]
    fn add_loaded__refused_at_each_allocation_in_turn__changes_nothing_and_is_counted() {
        // It loads and unloads a library: see `LOADER_TESTS`.
        let _loader = LOADER_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let lib = library(dir.path());
        let u = LocalUnwinder::new(Options {
            python: false,
            ..Options::default()
        });
        // SAFETY: a library of this test's, without initializers.
        let _loaded = unsafe { libloading::Library::new(&lib) }.unwrap();
        let mut refused = 0;
        loop {
            mock::refuse_after(Some(refused));
            let added = u.add_loaded();
            mock::refuse_after(None);
            if added {
                break;
            }
            refused += 1;
            assert_eq!(u.tables_refused(), refused as u64);
            assert!(u.needs_refresh());
            assert!(!u.has_added_modules());
            assert!(refused < 1000, "add_loaded refused forever");
        }
        // The library's name, its list entry, its build id, the entries, its
        // path and build id kept, the region index, the starts, the snapshot.
        assert!(refused >= 8, "only {refused} fallible allocations");
        assert!(u.modules().iter().any(|m| m.path == lib));
        assert!(u.has_added_modules());
        assert!(!u.needs_refresh());
        assert!(!u.add_loaded());

        mock::refuse_after(Some(0));
        let folded = u.refresh();
        mock::refuse_after(None);
        assert!(!folded);
        assert_eq!(u.tables_refused(), refused as u64 + 1);
        assert!(u.has_added_modules());
        assert!(u.refresh());
        assert!(!u.has_added_modules());
        assert_eq!(u.tables_refused(), refused as u64 + 1);
    }
}
