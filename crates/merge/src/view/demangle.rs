//! Kernel and frame name demangling.
//!
//! C++ names are spelled as c++filt (binutils) spells them, so that a kernel has
//! one name in gpuperf's outputs, in PyTorch's profiler and in Nsight: all of those
//! use GNU libiberty's demangler (PyTorch through `abi::__cxa_demangle`). gpuperf
//! calls the same demangler, `__cxa_demangle` in the system's `libstdc++.so.6`,
//! loaded at the first C++ name. No Rust crate spells names that way:
//! `cpp_demangle` 0.5 writes `std::array<char*, (unsigned long)3>` for
//! `std::array<char*, 3ul>`, gives functions named inside template arguments
//! their return type (`<128, 2, void at::f<…>(…)::{lambda(int)#1}>`), moves a
//! `const` into a lambda's parameters (`{lambda(c10::BFloat16 const)#1}&`), and
//! differs from c++filt in one host symbol in ten (vtables, thunks, packs).
//!
//! `__cxa_demangle` differs from c++filt in one thing: it abbreviates the
//! standard substitutions `Ss`, `Si`, `So`, `Sd` (`std::string`), which c++filt
//! (run with `DMGL_VERBOSE`) writes out (`std::basic_string<char, …>`);
//! [`expand_std_abbreviations`] writes them out too. Where `libstdc++.so.6`
//! cannot be loaded (a static or non-glibc build), `cpp_demangle` spells the
//! names, with the differences above.

use std::ffi::{CStr, CString, c_char, c_int};
use std::sync::OnceLock;

/// Demangles C++ (Itanium) and Rust symbol names; other names pass through.
///
/// C++ names come out as c++filt writes them (see the module's documentation);
/// a name that the demangler rejects is returned unchanged, as c++filt does.
pub fn demangle(name: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        // `{:#}` drops the hash suffix of legacy Rust symbols.
        return format!("{d:#}");
    }
    if !name.starts_with("_Z") {
        return name.to_owned();
    }
    match libiberty::get() {
        Some(cxa) => cxa
            .demangle(name)
            .map_or_else(|| name.to_owned(), |d| expand_std_abbreviations(&d)),
        None => cpp_demangle::Symbol::new(name)
            .ok()
            .and_then(|sym| sym.demangle().ok())
            .unwrap_or_else(|| name.to_owned()),
    }
}

/// The standard substitutions that libiberty abbreviates unless asked to be
/// verbose, and c++filt's verbose spelling of each.
const STD_ABBREVIATIONS: [(&str, &str); 4] = [
    (
        "std::string",
        "std::basic_string<char, std::char_traits<char>, std::allocator<char> >",
    ),
    (
        "std::istream",
        "std::basic_istream<char, std::char_traits<char> >",
    ),
    (
        "std::ostream",
        "std::basic_ostream<char, std::char_traits<char> >",
    ),
    (
        "std::iostream",
        "std::basic_iostream<char, std::char_traits<char> >",
    ),
];

/// Writes out `std::string`, `std::istream`, `std::ostream` and
/// `std::iostream` where they stand as whole names (not `a::std::string`, not
/// `std::string_view`), as c++filt does, with its space between two closing `>`.
///
/// Only the substitutions `Ss`, `Si`, `So` and `Sd` demangle to these spellings:
/// the C++11 string is `std::__cxx11::basic_string<…>` in full, and the library's
/// `std::string` is a typedef, which never appears in a mangled name.
fn expand_std_abbreviations(demangled: &str) -> String {
    if !demangled.contains("std::") {
        return demangled.to_owned();
    }
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let bytes = demangled.as_bytes();
    let mut out = String::with_capacity(demangled.len());
    let mut i = 0;
    'scan: while i < demangled.len() {
        let starts_name = i == 0 || !(is_ident(bytes[i - 1]) || bytes[i - 1] == b':');
        if starts_name && bytes[i] == b's' {
            for (short, full) in STD_ABBREVIATIONS {
                if demangled[i..].starts_with(short)
                    && !bytes.get(i + short.len()).is_some_and(|&b| is_ident(b))
                {
                    out.push_str(full);
                    i += short.len();
                    // libiberty separates a template's closing `>` from one before it.
                    if bytes.get(i) == Some(&b'>') {
                        out.push(' ');
                    }
                    continue 'scan;
                }
            }
        }
        // Advance by one character (names may hold non-ASCII bytes).
        let c = demangled[i..]
            .chars()
            .next()
            .expect("i is on a char boundary");
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// `__cxa_demangle` from the system's `libstdc++.so.6`: GNU libiberty's
/// demangler, the one c++filt and PyTorch's profiler use.
mod libiberty {
    use super::{CStr, CString, OnceLock, c_char, c_int};

    /// `char* __cxa_demangle(const char* mangled, char* buf, size_t* len, int* status)`
    /// (Itanium C++ ABI, 3.4): with a null `buf`, the result is `malloc`ed.
    type CxaDemangle = unsafe extern "C" fn(
        mangled: *const c_char,
        buf: *mut c_char,
        len: *mut usize,
        status: *mut c_int,
    ) -> *mut c_char;

    /// The loaded library and its demangler.
    pub(super) struct Cxa {
        // Kept loaded for as long as `demangle` may be called: the process.
        _lib: libloading::Library,
        demangle: CxaDemangle,
    }

    /// Names up to this many bytes are demangled on the calling thread.
    /// libiberty keeps its parse tree on the stack (about 72 bytes per byte of
    /// the name) and recurses at most 2,048 deep, a few hundred bytes a level:
    /// the deepest 1 KiB name it accepts (`f(int, …)`, 1,000 parameters) took
    /// under 0.5 MiB, inside the 2 MiB of a Rust thread's default stack.
    const INLINE_LEN: usize = 1 << 10;
    /// Stack given to the thread that demangles a longer name, per byte of it.
    const STACK_PER_BYTE: usize = 512;
    /// Longer names are not demangled at all (kernel names are a few KiB).
    const MAX_LEN: usize = 1 << 20;

    /// The demangler, loaded on first use; `None` where `libstdc++.so.6` or its
    /// `__cxa_demangle` cannot be loaded.
    pub(super) fn get() -> Option<&'static Cxa> {
        static CXA: OnceLock<Option<Cxa>> = OnceLock::new();
        CXA.get_or_init(|| {
            // SAFETY: loading libstdc++ runs its initialisers, which only set up
            // its own state (locales, iostreams); it is the C++ runtime that the
            // programs gpuperf profiles load themselves.
            let lib = unsafe { libloading::Library::new("libstdc++.so.6") }.ok()?;
            // SAFETY: `__cxa_demangle` has had this signature since the Itanium
            // C++ ABI defined it; the pointer stays valid while `lib` is loaded,
            // and `Cxa` keeps `lib` with it.
            let demangle = unsafe { lib.get::<CxaDemangle>(b"__cxa_demangle\0") }
                .ok()
                .map(|s| *s)?;
            Some(Cxa {
                _lib: lib,
                demangle,
            })
        })
        .as_ref()
    }

    impl Cxa {
        /// libiberty's spelling of `name`, or `None` where it rejects the name
        /// (or the name holds a NUL byte, or is longer than [`MAX_LEN`]).
        pub(super) fn demangle(&self, name: &str) -> Option<String> {
            self.demangle_inline_up_to(name, INLINE_LEN)
        }

        /// [`Cxa::demangle`], on the calling thread for names up to `inline_len`
        /// bytes, on a thread with room for longer ones.
        pub(super) fn demangle_inline_up_to(
            &self,
            name: &str,
            inline_len: usize,
        ) -> Option<String> {
            if name.len() > MAX_LEN {
                return None;
            }
            let c = CString::new(name).ok()?;
            if name.len() <= inline_len {
                return self.call(&c);
            }
            std::thread::scope(|s| {
                std::thread::Builder::new()
                    .name("gpuperf-demangle".into())
                    .stack_size((1 << 20) + STACK_PER_BYTE * name.len())
                    .spawn_scoped(s, || self.call(&c))
                    .ok()?
                    .join()
                    .ok()?
            })
        }

        fn call(&self, name: &CStr) -> Option<String> {
            let mut status: c_int = 0;
            // SAFETY: `name` is NUL-terminated and outlives the call; with a null
            // buffer and length the demangler allocates the result with `malloc`,
            // and `status` is a valid place for the status it writes.
            let out = unsafe {
                (self.demangle)(
                    name.as_ptr(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    &mut status,
                )
            };
            if out.is_null() {
                return None;
            }
            let s = (status == 0).then(|| {
                // SAFETY: a non-null result is a NUL-terminated string that the
                // caller owns until it frees it, below.
                let text = unsafe { CStr::from_ptr(out) };
                text.to_string_lossy().into_owned()
            });
            // SAFETY: `out` was allocated with `malloc` and is freed once, here.
            unsafe { libc::free(out.cast()) };
            s
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demangles_cpp_and_rust_and_passes_others() {
        assert_eq!(
            demangle("_Z12attentionQKTPfS_S_iii"),
            "attentionQKT(float*, float*, float*, int, int, int)"
        );
        assert_eq!(
            demangle("_ZN7cutlass6KernelINS_4gemmEEEvNT_6ParamsE"),
            "void cutlass::Kernel<cutlass::gemm>(cutlass::gemm::Params)"
        );
        assert_eq!(
            demangle("_ZN4core3fmt5write17h0123456789abcdefE"),
            "core::fmt::write"
        );
        assert_eq!(demangle("triton_poi_fused_add_0"), "triton_poi_fused_add_0");
        assert_eq!(demangle("_Znot a symbol"), "_Znot a symbol");
    }

    /// The spellings of c++filt (binutils 2.40) that `cpp_demangle` gets wrong,
    /// each checked against c++filt by hand; the test `names` checks every name
    /// of the repository's recordings against c++filt itself.
    #[test]
    fn spells_names_as_cxxfilt() {
        let cases = [
            // Integer literals: the suffix of their type, as in C++ source.
            ("_Z1fILj4EEvv", "void f<4u>()"),
            ("_Z1fILl4EEvv", "void f<4l>()"),
            ("_Z1fILm4EEvv", "void f<4ul>()"),
            ("_Z1fILx4EEvv", "void f<4ll>()"),
            ("_Z1fILy4EEvv", "void f<4ull>()"),
            ("_Z1fILi4EEvv", "void f<4>()"),
            ("_Z1fILin4EEvv", "void f<-4>()"),
            ("_Z1fILb1EEvv", "void f<true>()"),
            ("_Z1fILb0EEvv", "void f<false>()"),
            ("_Z1fILc65EEvv", "void f<(char)65>()"),
            ("_Z1fILs4EEvv", "void f<(short)4>()"),
            ("_Z1fILt4EEvv", "void f<(unsigned short)4>()"),
            ("_Z1fILh4EEvv", "void f<(unsigned char)4>()"),
            (
                "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIiEESt5arrayIPcLm1EELb0EEEviT0_T1_",
                "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>, \
                 std::array<char*, 1ul>, false>(int, at::native::FillFunctor<int>, std::array<char*, 1ul>)",
            ),
            // A function named inside a template argument: no return type.
            ("_Z1hIZ1fIiEvRKT_E1AEvv", "void h<f<int>(int const&)::A>()"),
            // A const reference to a lambda whose parameter is a qualified name.
            (
                "_Z1fIZ1gvEUlN1a1BEE_EvRKT_",
                "void f<g()::{lambda(a::B)#1}>(g()::{lambda(a::B)#1} const&)",
            ),
            // The standard abbreviations, written out.
            (
                "_Z1fSsRSo",
                "f(std::basic_string<char, std::char_traits<char>, std::allocator<char> >, \
                 std::basic_ostream<char, std::char_traits<char> >&)",
            ),
            (
                "_Z1fSt6vectorISsSaISsEE",
                "f(std::vector<std::basic_string<char, std::char_traits<char>, std::allocator<char> >, \
                 std::allocator<std::basic_string<char, std::char_traits<char>, std::allocator<char> > > >)",
            ),
            (
                "_ZNKSs4sizeEv",
                "std::basic_string<char, std::char_traits<char>, std::allocator<char> >::size() const",
            ),
        ];
        if libiberty::get().is_none() {
            eprintln!("skipped: libstdc++.so.6 cannot be loaded; cpp_demangle spells the names");
            return;
        }
        for (mangled, want) in cases {
            assert_eq!(demangle(mangled), want, "{mangled}");
        }
    }

    #[test]
    fn a_long_name_is_demangled_on_a_thread_with_room() {
        let Some(cxa) = libiberty::get() else {
            eprintln!("skipped: libstdc++.so.6 cannot be loaded");
            return;
        };
        // f(int, …, int): 1,000 parameters, about as deep as libiberty goes
        // (its recursion limit is 2,048), which takes about 0.5 MiB of stack.
        let n = 1000;
        let mangled = format!("_Z1f{}", "i".repeat(n));
        let want = format!("f({})", vec!["int"; n].join(", "));
        assert_eq!(
            cxa.demangle_inline_up_to(&mangled, usize::MAX).as_deref(),
            Some(&*want)
        );
        assert_eq!(
            cxa.demangle_inline_up_to(&mangled, 0).as_deref(),
            Some(&*want)
        );
        // Nested deeper than the limit: refused, and c++filt then prints the
        // name unchanged.
        let n = 300;
        let mangled = format!("_Z1fI{}i{}Evv", "1AI".repeat(n), "E".repeat(n));
        assert_eq!(cxa.demangle_inline_up_to(&mangled, 0), None);
        assert_eq!(demangle(&mangled), mangled);
    }

    #[test]
    fn only_whole_std_abbreviations_are_written_out() {
        assert_eq!(
            expand_std_abbreviations("f(std::string_view, a::std::string, std::stringx)"),
            "f(std::string_view, a::std::string, std::stringx)"
        );
        assert_eq!(
            expand_std_abbreviations("std::vector<std::string>"),
            "std::vector<std::basic_string<char, std::char_traits<char>, std::allocator<char> > >"
        );
        assert_eq!(
            expand_std_abbreviations("std::istream&, std::iostream*"),
            "std::basic_istream<char, std::char_traits<char> >&, \
             std::basic_iostream<char, std::char_traits<char> >*"
        );
        assert_eq!(
            expand_std_abbreviations("g(é, std::ostream)"),
            "g(é, std::basic_ostream<char, std::char_traits<char> >)"
        );
    }
}
