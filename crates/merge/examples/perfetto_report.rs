//! For each real trace in `samples/recordings/real/`: the kernels and total
//! kernel time that Perfetto's own trace processor reads from gpuperf's two
//! timelines (Chrome JSON and Perfetto protobuf), against the trace's own, and
//! each timeline's bytes per launch API call.
//!
//! ```text
//! bash crates/test-support/perfetto/install.sh   # once: the trace processor
//! cargo run -p gpuperf-merge --example perfetto_report
//! ```
//!
//! The timelines are written as `gpuperf merge -c` writes them (idle slices
//! included, no CPU stacks from a separate trace).

use std::path::{Path, PathBuf};

use gpuperf_merge::join::{self, Context, Match, Sink};
use gpuperf_merge::model::{ActivityKind, Record, StringTable};
use gpuperf_merge::read::input::GpuInputs;
use gpuperf_merge::write::{chrome, perfetto};
use gpuperf_test_support::perfetto::TraceProcessor;

/// Kernels and their total time as the input has them.
#[derive(Default)]
struct Kernels {
    count: u64,
    ns: u64,
}

impl Sink for Kernels {
    fn record(
        &mut self,
        _: &Context<'_>,
        rec: &Record,
        _: &Match<'_>,
    ) -> gpuperf_merge::Result<()> {
        if let Record::Activity(a) = rec
            && matches!(a.kind, ActivityKind::Kernel { .. })
        {
            self.count += 1;
            self.ns += a.duration_ns();
        }
        Ok(())
    }
}

/// (kernels, kernel ns, error and data-loss stats) as the trace processor reads `path`.
fn perfetto_kernels(path: &Path) -> Option<(i64, i64, String)> {
    let tp = TraceProcessor::load(path).unwrap()?;
    let t = tp
        .query("select count(*), coalesce(sum(dur), 0) from slice where category = 'kernel'")
        .unwrap();
    let stats = tp
        .query(
            "select name, value from stats \
             where (severity = 'error' or severity = 'data_loss') and value > 0",
        )
        .unwrap();
    let stats = stats
        .rows
        .iter()
        .map(|r| format!("{}={}", r[0].as_str().unwrap_or("?"), r[1]))
        .collect::<Vec<_>>()
        .join(" ");
    Some((t.rows[0][0].as_i64()?, t.rows[0][1].as_i64()?, stats))
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../samples/recordings/real");
    let mut traces: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "gz" || e == "sqlite"))
        .collect();
    traces.sort();
    let dir = tempfile::tempdir().unwrap();
    println!(
        "{:<44} {:>15} {:>24} {:>24} {:>13} {:>13}  Perfetto's error stats",
        "trace",
        "kernels (ms)",
        "JSON in Perfetto",
        "pftrace in Perfetto",
        "JSON B/launch",
        "pb B/launch"
    );
    for trace in traces {
        let mut strings = StringTable::new();
        let inputs = GpuInputs::open(std::slice::from_ref(&trace), &mut strings).unwrap();
        let mut own = Kernels::default();
        let mut json = chrome::Writer::new(Vec::new()).unwrap().with_idle_slices();
        let mut pb = perfetto::Writer::new(Vec::new())
            .unwrap()
            .with_idle_slices();
        let summary = join::merge(
            None,
            &inputs,
            &mut strings,
            &join::Options::default(),
            &mut [&mut own, &mut json, &mut pb],
        )
        .unwrap();
        let (json, pb) = (json.into_inner(), pb.into_inner());
        let (jp, pp) = (dir.path().join("t.json"), dir.path().join("t.pftrace"));
        std::fs::write(&jp, &json).unwrap();
        std::fs::write(&pp, &pb).unwrap();
        let ms = |ns: i64| ns as f64 / 1e6;
        let show = |r: Option<(i64, i64, String)>| match r {
            Some((n, ns, _)) => format!("{n} ({:.3})", ms(ns)),
            None => "no trace processor".to_owned(),
        };
        let (j, p) = (perfetto_kernels(&jp), perfetto_kernels(&pp));
        let stats: Vec<String> = [("JSON", &j), ("pftrace", &p)]
            .into_iter()
            .filter_map(|(f, r)| {
                r.as_ref()
                    .filter(|r| !r.2.is_empty())
                    .map(|r| format!("{f}: {}", r.2))
            })
            .collect();
        let launches = summary.api_launches.max(1) as f64;
        println!(
            "{:<44} {:>15} {:>24} {:>24} {:>13.0} {:>13.0}  {}",
            trace.file_name().unwrap().to_string_lossy(),
            format!("{} ({:.3})", own.count, ms(own.ns as i64)),
            show(j),
            show(p),
            json.len() as f64 / launches,
            pb.len() as f64 / launches,
            if stats.is_empty() {
                "none".to_owned()
            } else {
                stats.join("; ")
            }
        );
    }
}
