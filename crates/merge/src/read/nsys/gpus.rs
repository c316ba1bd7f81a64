//! Which GPU is which CUDA device, from the tables that say so in each version:
//!
//! | table | versions | the CUDA device is |
//! |---|---|---|
//! | `TARGET_INFO_CUDA_GPU` | 2021.1 to 2021.3.0 | `deviceId` |
//! | `TARGET_INFO_GPU` | 2021.3.1 on | `cuDevice` when there is one, else `deviceId`, else `id` |
//! | `TARGET_INFO_CUDA_DEVICE` | later ones | `cudaId` of the GPU whose `id` is `gpuId`, per `pid` |
//!
//! On Windows `TARGET_INFO_GPU` also lists the display adapters that are no CUDA
//! device (an integrated GPU, Microsoft's Basic Render Driver), with CUDA device
//! 0 and no compute capability: those are left out, and the notes say so.

use rusqlite::Row;
use rustc_hash::FxHashSet;

use super::pid_of;
use super::schema::{Export, Skipped};
use crate::error::Result;

const GPU: &str = "TARGET_INFO_GPU";
const CUDA_GPU: &str = "TARGET_INFO_CUDA_GPU";
const CUDA_DEVICE: &str = "TARGET_INFO_CUDA_DEVICE";

/// A named GPU.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Gpu {
    /// The process that sees it as [`Gpu::id`]; `None` for every process.
    pub(super) pid: Option<u32>,
    /// Its CUDA device number.
    pub(super) id: u32,
    pub(super) name: String,
    pub(super) compute_capability: (u16, u16),
}

/// A row of a GPU table, before choosing.
struct GpuRow {
    /// Nsight's own number of the GPU (`TARGET_INFO_GPU.id`).
    gpu: Option<i64>,
    cuda: Option<i64>,
    name: String,
    cc: (u16, u16),
    /// Whether it is a CUDA device; `None` when the table cannot tell.
    is_cuda: Option<bool>,
}

/// The first of `names` that `cols` has.
fn first<'a>(cols: &FxHashSet<String>, names: &[&'a str]) -> Option<&'a str> {
    names.iter().copied().find(|c| cols.contains(*c))
}

/// Reads the rows of a GPU table by the columns it has. `cuda_only`: every row is
/// a CUDA device.
fn rows(
    export: &Export,
    table: &'static str,
    cuda: &[&str],
    cuda_only: bool,
    skipped: &mut Skipped,
) -> Result<Vec<GpuRow>> {
    let cols = export.columns(table)?;
    let col = |c: Option<&str>| c.unwrap_or("NULL").to_owned();
    let cc = [
        ("computeMajor", "computeMinor"),
        ("computeCapabilityMajor", "computeCapabilityMinor"),
    ]
    .into_iter()
    .find(|(a, b)| cols.contains(*a) && cols.contains(*b));
    let sm = first(&cols, &["smCount", "numMultiprocessors"]);
    // Without a compute capability or SM count, a row cannot say it is CUDA's.
    let can_tell = cuda_only || cc.is_some() || sm.is_some();
    let q = format!(
        "SELECT {}, {}, {}, {}, {}, {} FROM {table}",
        col(first(&cols, &["id"]).filter(|_| table == GPU)),
        col(first(&cols, cuda)),
        col(first(&cols, &["name"])),
        col(cc.map(|c| c.0)),
        col(cc.map(|c| c.1)),
        col(sm),
    );
    let parse = |r: &Row<'_>| {
        let int = |i| r.get::<_, Option<i64>>(i);
        Ok((
            int(0)?,
            int(1)?,
            r.get::<_, Option<String>>(2)?,
            int(3)?,
            int(4)?,
            int(5)?,
        ))
    };
    let mut out = Vec::new();
    export.rows(
        &q,
        table,
        skipped,
        parse,
        |(gpu, cuda, name, major, minor, sm)| {
            let major = major.unwrap_or(0);
            let small = |v: i64| u16::try_from(v).unwrap_or(0);
            out.push(GpuRow {
                gpu,
                cuda,
                name: name.unwrap_or_default(),
                cc: (small(major), small(minor.unwrap_or(0))),
                is_cuda: can_tell.then_some(cuda_only || major > 0 || sm.unwrap_or(0) > 0),
            });
        },
    )?;
    Ok(out)
}

/// `TARGET_INFO_CUDA_DEVICE`: (CUDA device, Nsight's GPU number, pid).
fn cuda_devices(export: &Export, skipped: &mut Skipped) -> Result<Vec<(i64, i64, Option<i64>)>> {
    let cols = export.columns(CUDA_DEVICE)?;
    let (Some(cuda), Some(gpu)) = (
        first(&cols, &["cudaId", "cuDevice"]),
        first(&cols, &["gpuId"]),
    ) else {
        return Ok(Vec::new());
    };
    let pid = first(&cols, &["pid"]).unwrap_or("NULL");
    let q = format!("SELECT {cuda}, {gpu}, {pid} FROM {CUDA_DEVICE}");
    let mut out = Vec::new();
    let parse = |r: &Row<'_>| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get(2)?));
    export.rows(&q, CUDA_DEVICE, skipped, parse, |row| out.push(row))?;
    Ok(out)
}

/// What [`read`] found: the GPUs, and the adapters it left out.
#[derive(Default)]
pub(super) struct Gpus {
    gpus: Vec<Gpu>,
    /// Names of the rows that are not the CUDA GPU of their number.
    not_cuda: Vec<String>,
    /// CUDA devices that several rows claim, none of them surely CUDA's.
    ambiguous: Vec<u32>,
}

/// Reads the GPUs from whichever tables the export has.
pub(super) fn read(export: &Export, skipped: &mut Skipped) -> Result<Gpus> {
    let mut rows_ = Vec::new();
    if export.has(GPU) {
        rows_ = rows(
            export,
            GPU,
            &["cuDevice", "deviceId", "cudaId"],
            false,
            skipped,
        )?;
    }
    let map = if export.has(CUDA_DEVICE) {
        cuda_devices(export, skipped)?
    } else {
        Vec::new()
    };
    let mut found = Gpus::default();
    if !map.is_empty() {
        // The map says which rows are CUDA devices, and which device each is.
        for (cuda, gpu, pid) in &map {
            if let Some(r) = rows_.iter().find(|r| r.gpu == Some(*gpu)) {
                // The plain pid, or nsys's `globalPid`.
                let pid = pid.map(|p| if p >> 24 != 0 { pid_of(p) } else { p as u32 });
                found.push(pid, Some(*cuda), r);
            }
        }
        // GPUs no process used are no loss; adapters that are no CUDA device are.
        let mapped: FxHashSet<i64> = map.iter().map(|m| m.1).collect();
        found.not_cuda.extend(
            rows_
                .iter()
                .filter(|r| r.is_cuda == Some(false))
                .filter(|r| r.gpu.is_none_or(|g| !mapped.contains(&g)))
                .map(|r| r.name.clone()),
        );
        return Ok(found);
    }
    // The CUDA device is the row's own column, else its `id` (2021.3.1 on).
    for r in &mut rows_ {
        r.cuda = r.cuda.or(r.gpu);
    }
    if export.has(CUDA_GPU) {
        let cuda = rows(
            export,
            CUDA_GPU,
            &["deviceId", "cudaId", "cuDevice", "id"],
            true,
            skipped,
        )?;
        rows_.extend(cuda);
    }
    found.choose(&rows_);
    Ok(found)
}

impl Gpus {
    fn push(&mut self, pid: Option<u32>, cuda: Option<i64>, r: &GpuRow) {
        let Some(id) = cuda.and_then(|c| u32::try_from(c).ok()) else {
            return;
        };
        if r.name.is_empty() {
            return;
        }
        self.gpus.push(Gpu {
            pid,
            id,
            name: r.name.clone(),
            compute_capability: r.cc,
        });
    }

    /// One row per CUDA device: one that is surely CUDA's, else the only one that
    /// may be; never one that is surely not.
    fn choose(&mut self, rows: &[GpuRow]) {
        let mut ids: Vec<i64> = rows.iter().filter_map(|r| r.cuda).collect();
        ids.sort_unstable();
        ids.dedup();
        for id in ids {
            let of_id = || {
                rows.iter()
                    .filter(move |r| r.cuda == Some(id) && !r.name.is_empty())
            };
            let pick = of_id().find(|r| r.is_cuda == Some(true)).or_else(|| {
                let mut maybe = of_id().filter(|r| r.is_cuda.is_none());
                match (maybe.next(), maybe.next()) {
                    (Some(r), None) => Some(r),
                    (Some(_), Some(_)) => {
                        self.ambiguous.extend(u32::try_from(id).ok());
                        None
                    }
                    _ => None,
                }
            });
            if let Some(r) = pick {
                self.push(None, Some(id), r);
            }
            // Beside the CUDA GPU (which two tables may both name), the other
            // adapters that claim its number are left out.
            let picked = pick.map(|r| r.name.as_str());
            self.not_cuda.extend(
                of_id()
                    .filter(|r| {
                        r.is_cuda == Some(false) || (picked.is_some() && r.is_cuda.is_none())
                    })
                    .filter(|r| Some(r.name.as_str()) != picked)
                    .map(|r| r.name.clone()),
            );
        }
    }

    /// What the summary says about adapters left out.
    pub(super) fn notes(&self) -> impl Iterator<Item = String> + '_ {
        let not_cuda = (!self.not_cuda.is_empty()).then(|| {
            format!(
                "{} adapters in `{GPU}` are not the CUDA GPU of their CUDA device number (they have no compute capability, or another adapter is that GPU) and were left out: {}",
                self.not_cuda.len(),
                // Names come from the file: a line break must not split the note.
                self.not_cuda
                    .iter()
                    .map(|n| n.escape_debug().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        });
        let ambiguous = (!self.ambiguous.is_empty()).then(|| {
            format!(
                "`{GPU}` names several adapters as CUDA device {} and cannot tell which is the CUDA GPU: named by number",
                join(&self.ambiguous)
            )
        });
        not_cuda.into_iter().chain(ambiguous)
    }

    /// The GPUs `pid` sees, one per CUDA device.
    pub(super) fn of(&self, pid: u32) -> impl Iterator<Item = &Gpu> {
        let mut seen = FxHashSet::default();
        self.gpus
            .iter()
            .filter(move |g| g.pid.is_none_or(|p| p == pid) && seen.insert(g.id))
    }
}

/// `0, 1, 2`.
pub(super) fn join(ids: &[u32]) -> String {
    ids.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
