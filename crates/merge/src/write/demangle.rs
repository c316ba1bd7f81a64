//! Kernel-name demangling, cached per interned name.

use crate::model::{StringId, StringTable};

/// Demangles C++ (Itanium) and Rust symbol names; other names pass through.
pub(crate) fn demangle(name: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        // `{:#}` drops the hash suffix of legacy Rust symbols.
        return format!("{d:#}");
    }
    if name.starts_with("_Z")
        && let Ok(sym) = cpp_demangle::Symbol::new(name)
        && let Ok(d) = sym.demangle()
    {
        return d;
    }
    name.to_owned()
}

/// Caches demangled names by [`StringId`], so each distinct name is demangled once.
#[derive(Default)]
pub(crate) struct Demangler {
    cache: Vec<Option<Box<str>>>,
}

impl Demangler {
    /// The demangled form of `id`, with `;` (the folded separator) replaced.
    pub(crate) fn get<'s>(&'s mut self, id: StringId, strings: &StringTable) -> &'s str {
        let i = id.index();
        if self.cache.len() <= i {
            self.cache.resize(i + 1, None);
        }
        self.cache[i]
            .get_or_insert_with(|| demangle(strings.get(id)).replace(';', ":").into_boxed_str())
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
}
