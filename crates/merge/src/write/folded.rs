//! Merged folded stacks: `cpu;…;api;[GPU_Kernel]name weight`, weight in µs of GPU time.
//! When all the GPU work together lasted under half a µs, weights are in ns instead
//! ([`Folder::unit`]), so that it is not all rounded to nothing.
//!
//! - A kernel's frame is `[GPU_Kernel]` + its demangled name; copies and sets are
//!   `[GPU_Memcpy HtoD]` and `[GPU_Memset]`. Synchronization records are CPU wait
//!   time, not GPU work, and stay out of this output (the timeline shows them).
//! - The API frame (`cudaLaunchKernel`) is added unless the CPU stack already ends
//!   in it, as stacks taken at the launch API's entry do.
//! - Activities without a CPU stack go under `[no CPU stack];api;…`, and CPU
//!   launches without GPU activity end in `[GPU_Launch_Pending]` with weight 0: they
//!   cost no GPU time, but they are listed, not dropped.
//! - When the data holds more than one process (whatever the number of files it
//!   came in), each stack starts with a `name [pid N]` frame naming its process
//!   (its executable, as the trace names it), so that processes stay apart;
//!   [`Folder::per_process`] asks for that frame even with one process.
//! - Durations are summed in ns and rounded once per frame label with the
//!   largest-remainder method, so the µs total of each kernel name is its exact sum
//!   rounded, within 1 µs. (The reference tooling truncates every kernel to whole
//!   µs, so a 0.8 µs kernel weighs nothing there.)

use std::io::Write;

use rustc_hash::FxHashMap;

use crate::error::{Error, Result};
use crate::join::{ApiInfo, Context, Match, Sink};
use crate::model::{ActivityKind, MemcpyKind, Record, StringId};
use crate::read::cpu::{CpuLaunch, StackId};
use crate::write::demangle::Demangler;

/// Root frame of activities that have no CPU stack.
pub const NO_STACK_ROOT: &str = "[no CPU stack]";
/// Prefix of a kernel's frame.
pub(crate) const KERNEL_PREFIX: &str = "[GPU_Kernel]";
/// Leaf frame of CPU launches that caused no GPU activity.
pub(crate) const PENDING_FRAME: &str = "[GPU_Launch_Pending]";

#[derive(Copy, Clone, PartialEq, Eq, Hash)]
enum Label {
    Kernel(StringId),
    Memcpy(MemcpyKind),
    Memset,
    Pending,
}

/// (process, CPU stack, API, GPU frame).
type Key = (u32, Option<StackId>, Option<StringId>, Label);

/// Accumulates GPU time per (CPU stack, API, GPU frame); a [`Sink`].
#[derive(Default)]
pub struct Folder {
    acc: FxHashMap<Key, u64>,
    per_process: bool,
    // Executable names of the processes, from the trace's process records.
    exes: FxHashMap<u32, String>,
    // Rendered at `finish`, when the string table is at hand.
    lines: Vec<(String, u64)>,
    // Weights in ns rather than µs: set when µs would round all GPU work to 0.
    in_ns: bool,
    demangler: Demangler,
}

impl Folder {
    /// An empty folder.
    pub fn new() -> Self {
        Self::default()
    }

    /// A folder whose stacks start with a frame naming their process, even when
    /// there is only one. (With several, they always do.)
    pub fn per_process() -> Self {
        Self {
            per_process: true,
            ..Self::default()
        }
    }

    /// The folded lines, sorted, with integer weights in [`Folder::unit`]. Valid
    /// after the join.
    pub fn lines(&self) -> &[(String, u64)] {
        &self.lines
    }

    /// The unit of the weights: "µs", or "ns" when all the GPU work together lasted
    /// less than half a µs, which µs would round to nothing.
    pub fn unit(&self) -> &'static str {
        if self.in_ns { "ns" } else { "µs" }
    }

    /// The sum of the weights, in [`Folder::unit`].
    pub fn total(&self) -> u64 {
        self.lines.iter().map(|l| l.1).sum()
    }

    /// The full names of the kernel labels the view shortened.
    pub fn full_names(&self) -> &crate::view::FullNames {
        self.demangler.full_names()
    }

    /// Writes `stack weight` lines.
    pub fn write<W: Write>(&self, mut out: W) -> Result<()> {
        let err = |source| Error::Write {
            what: "folded stacks",
            source,
        };
        for (stack, w) in &self.lines {
            writeln!(out, "{stack} {w}").map_err(err)?;
        }
        out.flush().map_err(err)
    }

    fn add(
        &mut self,
        pid: u32,
        stack: Option<StackId>,
        api: Option<StringId>,
        label: Label,
        ns: u64,
    ) {
        let v = self.acc.entry((pid, stack, api, label)).or_default();
        *v = v.saturating_add(ns);
    }
}

/// A process's name: its executable's file name from the trace's process record,
/// else the command name the CPU trace gives it, else "process".
pub(crate) fn process_name(exes: &FxHashMap<u32, String>, ctx: &Context<'_>, pid: u32) -> String {
    if let Some(exe) = exes.get(&pid) {
        return exe.replace(';', "_");
    }
    ctx.cpu
        .and_then(|cpu| {
            cpu.comms.get(&(pid, pid)).or_else(|| {
                cpu.comms
                    .iter()
                    .find(|((p, _), _)| *p == pid)
                    .map(|(_, c)| c)
            })
        })
        .map_or_else(|| "process".to_owned(), |c| c.replace(';', "_"))
}

impl Sink for Folder {
    fn record(&mut self, _ctx: &Context<'_>, rec: &Record, m: &Match<'_>) -> Result<()> {
        if let Record::Process(p) = rec {
            let name = p.exe.rsplit('/').next().unwrap_or("").trim();
            if !name.is_empty() {
                self.exes.insert(p.pid, name.to_owned());
            }
            return Ok(());
        }
        let Record::Activity(a) = rec else {
            return Ok(());
        };
        let label = match a.kind {
            ActivityKind::Kernel { name, .. } => Label::Kernel(name),
            ActivityKind::Memcpy { kind, .. } => Label::Memcpy(kind),
            ActivityKind::Memset { .. } => Label::Memset,
            ActivityKind::Sync { .. } => return Ok(()),
        };
        let c = m.charge();
        self.add(a.pid, c.stack, c.api, label, a.duration_ns());
        Ok(())
    }

    fn pending(
        &mut self,
        _ctx: &Context<'_>,
        launch: &CpuLaunch,
        api: Option<&ApiInfo>,
    ) -> Result<()> {
        self.add(
            launch.pid,
            Some(launch.stack),
            api.map(|a| a.name),
            Label::Pending,
            0,
        );
        Ok(())
    }

    fn finish(&mut self, ctx: &Context<'_>, _summary: &crate::join::Summary) -> Result<()> {
        // Render each key's text; keys with equal text merge.
        let mut by_text: FxHashMap<String, (u64, usize)> = FxHashMap::default();
        let mut groups: Vec<String> = Vec::new();
        let mut group_of: FxHashMap<String, usize> = FxHashMap::default();
        // Decided by the processes in the data, not by how many files held it.
        let mut pids: Vec<u32> = self.acc.keys().map(|k| k.0).collect();
        pids.sort_unstable();
        pids.dedup();
        let roots = self.per_process || pids.len() > 1;
        for (&(pid, stack, api, label), &ns) in &self.acc {
            let frame = match label {
                Label::Kernel(name) => {
                    format!(
                        "[GPU_Kernel]{}",
                        self.demangler.label(name, ctx.strings, ctx.view)
                    )
                }
                Label::Memcpy(kind) => format!("[GPU_Memcpy {kind}]"),
                Label::Memset => "[GPU_Memset]".to_owned(),
                Label::Pending => PENDING_FRAME.to_owned(),
            };
            let mut text = if roots {
                format!("{} [pid {pid}];", process_name(&self.exes, ctx, pid))
            } else {
                String::new()
            };
            push_stack(&mut text, ctx, stack, api);
            text.push(';');
            text.push_str(&frame);
            let g = *group_of.entry(frame).or_insert_with_key(|f| {
                groups.push(f.clone());
                groups.len() - 1
            });
            let v = &mut by_text.entry(text).or_insert((0, g)).0;
            *v = v.saturating_add(ns);
        }
        let mut lines: Vec<(String, u64, usize)> =
            by_text.into_iter().map(|(t, (ns, g))| (t, ns, g)).collect();
        lines.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut weights = round_per_group(&lines, groups.len());
        self.in_ns = weights.iter().all(|&w| w == 0) && lines.iter().any(|l| l.1 > 0);
        if self.in_ns {
            weights = lines.iter().map(|l| l.1).collect();
        }
        self.lines = lines
            .into_iter()
            .zip(weights)
            .map(|((t, _, _), w)| (t, w))
            .collect();
        self.acc = FxHashMap::default();
        Ok(())
    }
}

/// Appends the CPU stack (or [`NO_STACK_ROOT`]) and the API frame, unless the
/// stack already ends in it, as stacks taken at the API's entry do.
pub(crate) fn push_stack(
    text: &mut String,
    ctx: &Context<'_>,
    stack: Option<StackId>,
    api: Option<StringId>,
) {
    match (stack, ctx.cpu) {
        (Some(s), Some(cpu)) => text.push_str(cpu.stacks.text(s)),
        _ => text.push_str(NO_STACK_ROOT),
    }
    if let Some(api) = api {
        let api = ctx.strings.get(api);
        if text.rsplit(';').next() != Some(api) {
            text.push(';');
            text.push_str(api);
        }
    }
}

/// Converts ns to µs so that each group's total is its exact total rounded to the
/// nearest µs: floor every line, then give the missing µs to the lines with the
/// largest remainders (ties to the earlier line).
pub(crate) fn round_per_group(lines: &[(String, u64, usize)], groups: usize) -> Vec<u64> {
    let mut weights: Vec<u64> = lines.iter().map(|l| l.1 / 1000).collect();
    let mut total = vec![0u128; groups];
    let mut floored = vec![0u64; groups];
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); groups];
    for (i, l) in lines.iter().enumerate() {
        total[l.2] += u128::from(l.1);
        floored[l.2] += weights[i];
        members[l.2].push(i);
    }
    for g in 0..groups {
        let target = u64::try_from((total[g] + 500) / 1000).unwrap_or(u64::MAX);
        let missing = target.saturating_sub(floored[g]) as usize;
        if missing == 0 {
            continue;
        }
        let mut m = std::mem::take(&mut members[g]);
        m.sort_by_key(|&i| std::cmp::Reverse(lines[i].1 % 1000));
        for &i in m.iter().take(missing) {
            weights[i] += 1;
        }
    }
    weights
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_keeps_group_totals_within_a_microsecond() {
        // 10 lines of 0.8 µs each: truncation gives 0, the exact total is 8 µs.
        let lines: Vec<(String, u64, usize)> = (0..10).map(|i| (format!("s{i}"), 800, 0)).collect();
        let w = round_per_group(&lines, 1);
        assert_eq!(w.iter().sum::<u64>(), 8);
        let mixed = vec![
            ("a".into(), 1_499, 0),
            ("b".into(), 2_501, 0),
            ("c".into(), 999, 1),
            ("d".into(), 0, 1),
        ];
        let w = round_per_group(&mixed, 2);
        assert_eq!(w, vec![1, 3, 1, 0]);
    }

    #[test]
    fn rounding_every_weight_to_zero_gives_weights_in_ns() {
        let mut f = Folder::new();
        let mut strings = crate::model::StringTable::new();
        let k = strings.intern("tiny");
        f.add(1, None, None, Label::Kernel(k), 120);
        f.add(1, None, None, Label::Kernel(k), 130);
        let offsets = FxHashMap::default();
        let ctx = Context::for_tests(&strings, &offsets);
        f.finish(&ctx, &crate::join::Summary::default()).unwrap();
        assert_eq!(f.unit(), "ns");
        assert_eq!(
            f.lines(),
            &[("[no CPU stack];[GPU_Kernel]tiny".to_owned(), 250)]
        );
        // One µs of work in all: µs again.
        let mut f = Folder::new();
        f.add(1, None, None, Label::Kernel(k), 1_000);
        f.finish(&ctx, &crate::join::Summary::default()).unwrap();
        assert_eq!((f.unit(), f.total()), ("µs", 1));
    }
}
