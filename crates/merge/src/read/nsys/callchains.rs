//! `CUDA_CALLCHAINS`: the CPU backtraces of API calls.

use rustc_hash::FxHashMap;

use super::frame_text;
use super::meta::Names;
use super::schema::{Export, Skipped};
use crate::error::Result;

const TABLE: &str = "CUDA_CALLCHAINS";

/// Frames of each call chain, by its id, outermost first, without CUDA's own
/// frames next to the call.
pub(super) type Chains = FxHashMap<i64, Vec<String>>;

/// Libraries whose frames next to the API call are CUDA's own machinery.
fn is_cuda_internal(module: &str) -> bool {
    let base = module.rsplit('/').next().unwrap_or(module);
    base.starts_with("libcupti") || base.starts_with("libcuda.so") || base.starts_with("libcudart")
}

/// A frame's text: its symbol, or `[module]+offset` when nsys could not resolve it.
fn frame(symbol: &str, module: &str, unresolved: bool) -> String {
    if unresolved || symbol.is_empty() {
        let base = module.rsplit('/').next().unwrap_or(module);
        format!("[{base}]+{symbol}")
    } else {
        symbol.to_owned()
    }
}

/// Reads the call chains.
pub(super) fn read(export: &Export, names: &Names, skipped: &mut Skipped) -> Result<Chains> {
    let mut chains = Chains::default();
    if !export.has(TABLE) {
        return Ok(chains);
    }
    let unresolved = if export.columns(TABLE)?.contains("unresolved") {
        "unresolved"
    } else {
        "NULL"
    };
    let q = format!("SELECT id, symbol, module, {unresolved} FROM {TABLE} ORDER BY id, stackDepth");
    let parse = |r: &rusqlite::Row<'_>| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, Option<i64>>(1)?,
            r.get::<_, Option<i64>>(2)?,
            r.get::<_, Option<i64>>(3)?,
        ))
    };
    // The chain being read, and whether its innermost NVIDIA frames still go on.
    let mut cur: Option<(i64, bool)> = None;
    export.rows(
        &q,
        TABLE,
        skipped,
        parse,
        |(id, symbol, module, unresolved)| {
            let module = names.get(module);
            if cur.is_none_or(|(c, _)| c != id) {
                cur = Some((id, true));
            }
            let inner = &mut cur.as_mut().expect("set above").1;
            if *inner && is_cuda_internal(module) {
                return;
            }
            *inner = false;
            let text = frame(names.get(symbol), module, unresolved.unwrap_or(0) != 0);
            chains.entry(id).or_default().push(frame_text(&text));
        },
    )?;
    for c in chains.values_mut() {
        c.reverse();
    }
    Ok(chains)
}
