//! Sees another CUPTI client take CUPTI from gpuperf.
//!
//! CUPTI 13.0 has one set of activity buffer callbacks per process: a second
//! client (torch.profiler's Kineto, a tool loaded later) that calls
//! `cuptiActivityRegisterCallbacks` gets every buffer from then on, the ones
//! holding gpuperf's unflushed records included, and its `cuptiFinalize` ends
//! every client's recording. CUPTI says nothing to the first client. So the
//! places through which other code calls those two functions, the GOT slots
//! of every loaded object that imports them, are pointed at wrappers that let
//! the recorder flush and take note first, then call CUPTI.
//!
//! Only slots bound to the libcupti gpuperf loaded are rewritten, and not yet
//! bound (lazy) slots only when that is the one libcupti in the process: a
//! caller of another libcupti talks to another CUPTI. A caller that looks the
//! functions up with `dlsym` is not seen; the recorder still finds the
//! takeover later, by its records' absence or clock.

use std::ffi::{CStr, c_int, c_void};
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `PT_DYNAMIC`, `PT_GNU_RELRO`.
const PT_DYNAMIC: u32 = 2;
const PT_GNU_RELRO: u32 = 0x6474_e552;
/// Dynamic tags used.
const DT_NULL: i64 = 0;
const DT_NEEDED: i64 = 1;
const DT_PLTRELSZ: i64 = 2;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_RELA: i64 = 7;
const DT_RELASZ: i64 = 8;
const DT_PLTREL: i64 = 20;
const DT_JMPREL: i64 = 23;
/// `R_X86_64_GLOB_DAT`, `R_X86_64_JUMP_SLOT`.
const R_GLOB_DAT: u64 = 6;
const R_JUMP_SLOT: u64 = 7;

#[repr(C)]
struct Dyn {
    tag: i64,
    val: u64,
}

#[repr(C)]
struct Rela {
    offset: u64,
    info: u64,
    addend: i64,
}

#[repr(C)]
struct Sym {
    name: u32,
    info: u8,
    other: u8,
    shndx: u16,
    value: u64,
    size: u64,
}

/// One function to interpose: its name, CUPTI's own address, the wrapper's.
pub(crate) struct Hook {
    pub name: &'static CStr,
    pub real: usize,
    pub wrapper: usize,
}

/// What one pass found.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Installed {
    /// Slots pointed at a wrapper in this pass.
    pub slots: usize,
    /// Slots bound to some other definition (another libcupti), left alone.
    pub foreign: usize,
}

struct Pass<'a> {
    hooks: &'a [Hook],
    /// Load address of the libcupti the recorder uses, and of this library:
    /// neither is rewritten (CUPTI's own calls, and ours, go straight through).
    skip: [usize; 2],
    /// The soname the recorder's libcupti goes by, as `DT_NEEDED` names it.
    soname: &'a [u8],
    /// libcupti objects in the process.
    cuptis: usize,
    found: Installed,
    write: bool,
}

/// Points every GOT slot of the loaded objects that names one of `hooks` at
/// its wrapper. `cupti_base` and `own_base` are the load addresses of the
/// recorder's libcupti and of this library; `soname` is the libcupti's file
/// name. A second pass changes nothing that the first did: a slot already
/// holding a wrapper is left as it is.
pub(crate) fn install(
    hooks: &[Hook],
    cupti_base: usize,
    own_base: usize,
    soname: &[u8],
) -> Installed {
    let mut pass = Pass {
        hooks,
        skip: [cupti_base, own_base],
        soname,
        cuptis: 0,
        found: Installed::default(),
        write: false,
    };
    // First count the libcupti objects (lazy slots are only bound to ours when
    // it is the only one), then rewrite.
    iterate(&mut pass);
    pass.write = true;
    iterate(&mut pass);
    pass.found
}

fn iterate(pass: &mut Pass<'_>) {
    // SAFETY: the callback gets a valid `dl_phdr_info` for each loaded object
    // while the loader's lock is held, and `data` is the `Pass` borrowed here.
    unsafe { libc::dl_iterate_phdr(Some(visit), (pass as *mut Pass<'_>).cast()) };
}

unsafe extern "C" fn visit(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: see `iterate`.
    let (info, pass) = unsafe { (&*info, &mut *data.cast::<Pass<'_>>()) };
    let base = info.dlpi_addr as usize;
    let name = if info.dlpi_name.is_null() {
        &[][..]
    } else {
        // SAFETY: the loader's names are NUL-terminated strings.
        unsafe { CStr::from_ptr(info.dlpi_name) }.to_bytes()
    };
    if !pass.write {
        let file = name.rsplit(|&b| b == b'/').next().unwrap_or(name);
        pass.cuptis += usize::from(file.starts_with(b"libcupti"));
        return 0;
    }
    if pass.skip.contains(&base) {
        return 0;
    }
    // SAFETY: `dlpi_phdr` points at `dlpi_phnum` program headers of a mapped object.
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    let mut dynamic = None;
    let mut relro = 0..0;
    // Where the object is mapped: from its lowest segment to its highest end.
    let (mut lo, mut hi) = (usize::MAX, 0);
    for p in phdrs {
        match p.p_type {
            libc::PT_LOAD => {
                let start = base + p.p_vaddr as usize;
                lo = lo.min(start);
                hi = hi.max(start + p.p_memsz as usize);
            }
            PT_DYNAMIC => dynamic = Some(base + p.p_vaddr as usize),
            PT_GNU_RELRO => {
                let start = base + p.p_vaddr as usize;
                relro = start..start + p.p_memsz as usize;
            }
            _ => {}
        }
    }
    if let Some(d) = dynamic {
        // SAFETY: `d` is the object's mapped dynamic section.
        unsafe { object(pass, base, d as *const Dyn, relro, lo..hi) };
    }
    0
}

/// Rewrites the matching slots of one object.
///
/// # Safety
/// `dynamic` is the mapped `DT_NULL`-terminated dynamic section of the object
/// loaded at `base`.
unsafe fn object(
    pass: &mut Pass<'_>,
    base: usize,
    dynamic: *const Dyn,
    relro: Range<usize>,
    span: Range<usize>,
) {
    let (mut strtab, mut symtab, mut rela, mut relasz, mut jmprel, mut pltrelsz) =
        (0, 0, 0, 0, 0, 0);
    let mut pltrel_is_rela = true;
    let mut needed = Vec::new();
    let mut i = 0;
    loop {
        // SAFETY: within the section until its DT_NULL.
        let d = unsafe { &*dynamic.add(i) };
        // The loader relocates these addresses in place on x86-64; a value
        // below the base is still an offset (the vDSO's).
        let addr = |v: u64| {
            let v = v as usize;
            if v < base { v + base } else { v }
        };
        match d.tag {
            DT_NULL => break,
            DT_NEEDED => needed.push(d.val as usize),
            DT_STRTAB => strtab = addr(d.val),
            DT_SYMTAB => symtab = addr(d.val),
            DT_RELA => rela = addr(d.val),
            DT_RELASZ => relasz = d.val as usize,
            DT_JMPREL => jmprel = addr(d.val),
            DT_PLTRELSZ => pltrelsz = d.val as usize,
            DT_PLTREL => pltrel_is_rela = d.val as i64 == DT_RELA,
            _ => {}
        }
        i += 1;
    }
    if strtab == 0 || symtab == 0 {
        return;
    }
    let str_at = |off: usize| {
        // SAFETY: string table offsets name NUL-terminated strings in it.
        unsafe { CStr::from_ptr((strtab + off) as *const libc::c_char) }.to_bytes()
    };
    // Lazy slots are ours to bind only if this object asks for our libcupti
    // and no other libcupti is loaded.
    let needs_ours = needed.iter().any(|&n| str_at(n) == pass.soname);
    let lazy_ok = needs_ours && pass.cuptis == 1;
    let tables = [
        (rela, relasz),
        (if pltrel_is_rela { jmprel } else { 0 }, pltrelsz),
    ];
    for (table, size) in tables {
        if table == 0 {
            continue;
        }
        let n = size / size_of::<Rela>();
        // SAFETY: the loader mapped `size` bytes of relocations there.
        let relas = unsafe { std::slice::from_raw_parts(table as *const Rela, n) };
        for r in relas {
            let kind = r.info & 0xffff_ffff;
            if kind != R_JUMP_SLOT && kind != R_GLOB_DAT {
                continue;
            }
            // SAFETY: a relocation's symbol index is within the symbol table.
            let sym = unsafe { &*(symtab as *const Sym).add((r.info >> 32) as usize) };
            let name = str_at(sym.name as usize);
            let Some(hook) = pass.hooks.iter().find(|h| h.name.to_bytes() == name) else {
                continue;
            };
            let slot = base + r.offset as usize;
            // SAFETY: a GOT slot of a loaded object: aligned, mapped, pointer-sized.
            let now = unsafe { AtomicUsize::from_ptr(slot as *mut usize) }.load(Ordering::Acquire);
            // An unbound PLT slot points back into its own object's PLT.
            let unbound = kind == R_JUMP_SLOT && span.contains(&now);
            if now == hook.wrapper {
                continue;
            }
            if now != hook.real && !(unbound && lazy_ok) {
                pass.found.foreign += 1;
                continue;
            }
            // SAFETY: as above; the page is made writable first when RELRO
            // made it read-only, and read-only again after.
            if unsafe { write_slot(slot, hook.wrapper, relro.contains(&slot)) } {
                pass.found.slots += 1;
            }
        }
    }
}

/// Stores `value` in the pointer-sized `slot`.
///
/// # Safety
/// `slot` is a mapped, aligned GOT slot; `read_only` says it is in the
/// object's RELRO range.
unsafe fn write_slot(slot: usize, value: usize, read_only: bool) -> bool {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let start = slot & !(page - 1);
    if read_only {
        // SAFETY: the page is mapped (the slot is in it); only its protection changes.
        if unsafe {
            libc::mprotect(
                start as *mut c_void,
                page,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        } != 0
        {
            return false;
        }
    }
    // SAFETY: the caller's slot, writable now. An aligned pointer store is atomic
    // on x86-64, so a thread calling through it sees the old or the new target.
    unsafe { AtomicUsize::from_ptr(slot as *mut usize) }.store(value, Ordering::Release);
    if read_only {
        // SAFETY: as above, restoring RELRO's protection.
        unsafe { libc::mprotect(start as *mut c_void, page, libc::PROT_READ) };
    }
    true
}

/// How many objects the loader has loaded so far (it only grows): a new value
/// means there may be new slots to look at.
pub(crate) fn loads() -> u64 {
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        _: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: a valid info for the first object, and the `u64` passed below.
        unsafe { *data.cast::<u64>() = (*info).dlpi_adds };
        1
    }
    let mut adds = 0u64;
    // SAFETY: `first` writes one u64 through `data`, which points at `adds`.
    unsafe { libc::dl_iterate_phdr(Some(first), (&mut adds as *mut u64).cast()) };
    adds
}

/// The load address of the object holding `addr`, if any.
pub(crate) fn base_of(addr: usize) -> Option<usize> {
    let mut info: libc::Dl_info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: `info` is a valid out-pointer; dladdr only reads the loader's tables.
    let ok = unsafe { libc::dladdr(addr as *const c_void, &mut info) } != 0;
    ok.then_some(info.dli_fbase as usize)
}
