//! NVTX ranges in `gpuperf record` end to end on the simulated CUDA runtime
//! (`sim/`, no GPU, no root): `sim/tests/nvtx_app.c` pushes, pops, starts and
//! ends ranges around its launches (nested, in a domain, past the depth cap,
//! one pop too many, one never closed). Push/pop ranges become `[nvtx] NAME`
//! frames of the launches made inside them, every range a slice on the
//! timeline, which Perfetto's trace processor reads back nested.
//!
//! Needs NVIDIA's CUDA 13 wheels and NVTX v3's header (the nvidia-nvtx wheel);
//! skips without them unless `GPUPERF_REQUIRE_CUDA_WHEELS=1`. The timeline
//! check also needs the trace processor (see `crates/test-support/perfetto`).
#![allow(non_snake_case)]

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;

use common::{Record, cuda13, nvtx_include, show, sim, text, work_dir};
use gpuperf_merge::read::cpu::CpuTrace;
use gpuperf_test_support::perfetto::TraceProcessor;

/// Records `nvtx_app` with `flags`; returns the output, the kernels' NVTX
/// frames (by kernel, one list per launch), the CPU trace and the directory.
fn record(
    name: &str,
    flags: &[&str],
) -> Option<(Output, common::Recording, CpuTrace, std::path::PathBuf)> {
    let cuda = cuda13()?;
    let nvtx = nvtx_include(&cuda)?;
    let app = common::sim_c_program_as(
        &cuda,
        "nvtx_app",
        "nvtx_app",
        &["-idirafter".as_ref(), nvtx.as_os_str()],
        &["cudart"],
    );
    let dir = work_dir(name);
    let cupti = sim(&cuda).join("libcupti.so.13");
    let mut all = vec![
        "--stacks",
        "inject",
        "--raw-dir",
        "raw",
        "-p",
        "cpu.txt",
        "-c",
        "tl.json",
    ];
    all.extend_from_slice(flags);
    let o = Record::new(&dir)
        .flags(&all)
        .cupti(&cupti)
        .program(&app, [] as [&str; 0])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    assert!(
        text(&o.stdout).contains("nvtx_app: 8 kernels"),
        "{}",
        show(&o)
    );
    let rec = common::Recording::open(&dir.join("raw"));
    let cpu = CpuTrace::open(&dir.join("cpu.txt")).unwrap();
    Some((o, rec, cpu, dir))
}

/// Each kernel's launch stacks, from `main` on.
fn stacks_by_kernel(rec: &common::Recording, cpu: &CpuTrace) -> BTreeMap<String, Vec<Vec<String>>> {
    let by_corr: BTreeMap<(u32, u32), &str> = cpu
        .launches
        .iter()
        .map(|l| {
            (
                (l.pid, l.correlation_id.map_or(0, |c| c.get())),
                cpu.stacks.text(l.stack),
            )
        })
        .collect();
    let mut out: BTreeMap<String, Vec<Vec<String>>> = BTreeMap::new();
    for k in rec.kernels() {
        let stack = by_corr[&(k.pid, k.correlation_id)];
        let frames: Vec<String> = stack.split(';').map(str::to_owned).collect();
        let from = frames.iter().position(|f| f == "main").unwrap_or(0);
        out.entry(rec.label(k))
            .or_default()
            .push(frames[from..].to_vec());
    }
    out
}

fn nvtx_frames(stack: &[String]) -> Vec<&str> {
    stack
        .iter()
        .filter(|f| f.starts_with("[nvtx"))
        .map(String::as_str)
        .collect()
}

#[test]
fn record_nvtx_ranges__frames_of_the_launches_inside_and_nested_slices_on_the_timeline() {
    let Some((o, rec, cpu, dir)) = record("nvtx_ranges", &[]) else {
        return;
    };
    let stacks = stacks_by_kernel(&rec, &cpu);
    let deep = vec!["[nvtx] deep"; 64];
    let want: [(&str, Vec<&str>); 7] = [
        ("outer_kernel", vec!["[nvtx] outer"]),
        ("inner_kernel", vec!["[nvtx] outer", "[nvtx] inner"]),
        // A start/end range encloses no frame: it is not nested on a thread.
        ("async_kernel", vec![]),
        ("domain_kernel", vec!["[nvtx mylib] dom_range"]),
        ("deep_kernel", deep),
        ("plain_kernel", vec![]),
        ("tail_kernel", vec!["[nvtx] never_closed"]),
    ];
    for (kernel, frames) in &want {
        let launches = &stacks[*kernel];
        for s in launches {
            assert_eq!(&nvtx_frames(s), frames, "{kernel}: {s:?}\n{}", show(&o));
            if !frames.is_empty() {
                // No Python frame: the ranges sit just above the API frame,
                // below the function that called it.
                let at = s.iter().position(|f| f.starts_with("[nvtx")).unwrap();
                assert_eq!(s[at - 1], "launch", "{kernel}: {s:?}");
                assert_eq!(at + frames.len(), s.len() - 1, "{kernel}: {s:?}");
                assert!(s[s.len() - 1].starts_with("cudaLaunchKernel"), "{s:?}");
            }
        }
    }
    assert_eq!(stacks["inner_kernel"].len(), 2);
    let note = "NVTX ranges: 1 pops without a push on their thread ignored, 1 ranges still \
                open at exit (ended at the close), 2 pushes deeper than 64 on their thread \
                not recorded";
    assert!(rec.notes.iter().any(|n| n == note), "{:?}", rec.notes);

    // The timeline, as Perfetto's trace processor reads it.
    let Some(tp) = TraceProcessor::load(&dir.join("tl.json")).unwrap() else {
        return;
    };
    let errors = tp
        .query(
            "select name, value from stats where severity in ('error', 'data_loss') and value > 0",
        )
        .unwrap();
    assert!(errors.rows.is_empty(), "{:?}", errors.rows);
    let q = |sql: &str| tp.query(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    // name, depth, parent's name, track's name: each range once.
    let ranges = q("select s.name, s.depth, p.name as parent, \
                    coalesce(t.name, th.name) as track from slice s \
                    left join slice p on p.id = s.parent_id join track t on t.id = s.track_id \
                    left join thread_track tt on tt.id = s.track_id \
                    left join thread th on th.utid = tt.utid \
                    where s.category = 'nvtx' order by s.ts, s.depth");
    let rows: Vec<(String, i64, String)> = ranges
        .rows
        .iter()
        .map(|r| {
            (
                r[0].as_str().unwrap().to_owned(),
                r[1].as_i64().unwrap(),
                r[2].as_str().unwrap_or("-").to_owned(),
            )
        })
        .collect();
    let mut want: Vec<(String, i64, String)> = vec![
        ("outer".into(), 0, "-".into()),
        ("inner".into(), 1, "outer".into()),
        ("async".into(), 0, "-".into()),
        ("dom_range".into(), 0, "-".into()),
    ];
    for d in 0..64 {
        let parent = if d == 0 { "-" } else { "deep" };
        want.push(("deep".into(), d, parent.into()));
    }
    want.push(("never_closed".into(), 0, "-".into()));
    assert_eq!(rows, want);
    let async_track = &ranges.rows[2][ranges.col("track")];
    assert_eq!(async_track.as_str(), Some("NVTX ranges (start/end)"));
    // Each launch's API slice inside its innermost range.
    let parents = q(
        "select p.name from slice s join slice p on p.id = s.parent_id \
                     where s.name like 'cudaLaunchKernel%' order by s.ts",
    );
    let parents: Vec<&str> = parents
        .rows
        .iter()
        .map(|r| r[0].as_str().unwrap())
        .collect();
    assert_eq!(
        parents,
        [
            "outer",
            "inner",
            "inner",
            "dom_range",
            "deep",
            "never_closed"
        ],
        "{}",
        show(&o)
    );
}

#[test]
fn record_no_nvtx__no_frames_no_slices() {
    let Some((o, rec, cpu, dir)) = record("nvtx_off", &["--no-nvtx"]) else {
        return;
    };
    for (kernel, launches) in stacks_by_kernel(&rec, &cpu) {
        for s in launches {
            assert!(nvtx_frames(&s).is_empty(), "{kernel}: {s:?}\n{}", show(&o));
        }
    }
    assert!(
        !rec.notes.iter().any(|n| n.contains("NVTX")),
        "{:?}",
        rec.notes
    );
    let json = std::fs::read_to_string(dir.join("tl.json")).unwrap();
    assert!(
        !json.contains("\"nvtx\""),
        "an NVTX slice in {}",
        Path::new("tl.json").display()
    );
}
