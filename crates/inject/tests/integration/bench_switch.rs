//! `gpuperf_bench_stacks_off`, the switch a benchmark sets to time one process
//! with stacks and without (sim/bench/hf_interleaved.sh): launches made while
//! it is set are recorded without a stack, counted with their reason; those
//! before and after it have their stacks. On the simulated CUDA runtime.

use std::collections::{BTreeMap, HashSet};

use gpuperf_merge::model::{ActivityKind, Record};

use crate::support::{Sim, read_logs, read_traces};

#[test]
fn sim_launches_while_a_benchmark_has_stacks_off_have_none_and_are_counted() {
    let Some(sim) = Sim::find() else { return };
    let (out, dir) = sim.run("stacks-off", &[]);
    let log = read_logs(dir.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{out:?}\n{log}");
    assert!(stdout.contains("stacks-off switch found"), "{stdout}");
    let (records, strings, _) = read_traces(dir.path());
    let with_stack: HashSet<u32> = records
        .iter()
        .filter_map(|r| match r {
            Record::CallStack(c) if c.stack != 0 => Some(c.correlation_id),
            _ => None,
        })
        .collect();
    // Kernel name -> (launches, of them with a stack).
    let mut by_name: BTreeMap<&str, (u32, u32)> = BTreeMap::new();
    for r in &records {
        if let Record::Activity(a) = r
            && let ActivityKind::Kernel { name, .. } = a.kind
        {
            let e = by_name.entry(strings.get(name)).or_default();
            e.0 += 1;
            e.1 += u32::from(with_stack.contains(&a.correlation_id));
        }
    }
    let want = BTreeMap::from([
        ("_Z5afterv", (3, 0)),
        ("_Z5earlyv", (2, 2)),
        ("_Z6kernelPfi", (4, 4)),
    ]);
    assert_eq!(by_name, want, "{log}");
    let note = records
        .iter()
        .find_map(|r| match r {
            Record::Note(n) if n.text.contains("calls that take a CPU stack have none") => {
                Some(n.text.as_str())
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("no note of the launches without a stack\n{log}"));
    assert!(
        note.starts_with("3 calls that take a CPU stack have none; 3 of them made while a benchmark had stacks off"),
        "{note}"
    );
}
