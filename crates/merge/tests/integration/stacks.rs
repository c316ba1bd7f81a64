//! In-process stacks carried by a GPU trace, through the join and the writers.
//! Native frames are named by a FAKE symbolizer (a table of offsets); the real
//! one (blazesym) is tested end to end by gpuperf's record tests.

use std::collections::HashMap;
use std::fs;

use gpuperf_merge::join;
use gpuperf_merge::join::stacks;
use gpuperf_merge::model::Symbolize;
use gpuperf_merge::model::{
    Activity, ActivityKind, ApiCall, ApiDomain, GraphNode, Module, Process, Record, Stack,
    StackEnd, StackFrame, StringTable,
};
use gpuperf_merge::read::gputrace::{self, FLAG_STACKS};
use gpuperf_merge::read::input::GpuInputs;
use gpuperf_merge::write::folded::Folder;

use crate::{data, golden};

const PID: u32 = 200;

/// FAKE symbolizer: names offsets of module 0 from a table.
struct Table(HashMap<u64, &'static str>, Vec<(String, Vec<u8>)>);

impl Symbolize for Table {
    fn symbolize(&mut self, module: &Module, offsets: &[u64]) -> Vec<Vec<String>> {
        self.1.push((module.path.clone(), module.build_id.clone()));
        offsets
            .iter()
            .map(|o| match (module.id, self.0.get(o)) {
                (0, Some(n)) => vec![(*n).to_owned()],
                _ => Vec::new(),
            })
            .collect()
    }
}

fn fake() -> Table {
    Table(
        [
            (0x1000, "_start"),
            (0x1100, "launch_kernel"),
            (0x1200, "run_layer"),
            (0x1300, "main"),
            (0x1400, "cudaLaunchKernel"),
            (0x1500, "cudart::internal_launch"),
            (0x1600, "replay"),
            (0x1700, "build_graph"),
        ]
        .into_iter()
        .collect(),
        Vec::new(),
    )
}

fn native(offset: u64) -> StackFrame {
    StackFrame::Native { module: 0, offset }
}

/// The trace: five stacks (complete with Python frames, cut at the depth cap,
/// ending in JIT code, through a runtime linked into the executable, a graph
/// launch site), graph nodes captured and added, and their kernels.
fn trace() -> (Vec<u8>, StringTable) {
    let mut s = StringTable::new();
    let launch = s.intern("cudaLaunchKernel");
    let graph = s.intern("cudaGraphLaunch");
    let memcpy = s.intern("cudaMemcpy");
    let kernel = s.intern("_Z4gemmPf");
    let forward = s.intern("model.Net.forward");
    let file = s.intern("/srv/model.py");
    let stack = |id, end, frames| {
        Record::Stack(Stack {
            pid: PID,
            id,
            end,
            python_truncated: false,
            frames,
        })
    };
    let mut recs = vec![
        Record::Process(Process {
            pid: PID,
            ppid: Some(1),
            exe: "/opt/app/bin/trainer".into(),
            start_ns: 0,
            start_realtime_ns: None,
        }),
        Record::Module(Module {
            pid: PID,
            id: 0,
            path: "/opt/app/bin/trainer".into(),
            build_id: vec![0xab, 0xcd],
            bias: 0x5500_0000_0000,
            text_start: 0x5500_0000_1000,
            text_end: 0x5500_0000_2000,
        }),
        Record::Module(Module {
            pid: PID,
            id: 1,
            path: "/usr/lib/libpython3.12.so.1.0".into(),
            build_id: vec![],
            bias: 0x7f00_0000_0000,
            text_start: 0x7f00_0000_1000,
            text_end: 0x7f00_0010_0000,
        }),
        stack(
            1,
            StackEnd::Root,
            vec![
                native(0x1100),
                StackFrame::Python {
                    function: forward,
                    file,
                    line: Some(42),
                },
                StackFrame::Native {
                    module: 1,
                    offset: 0x4242,
                },
                native(0x1200),
                native(0x1300),
                native(0x1000),
            ],
        ),
        stack(
            2,
            StackEnd::DepthLimit,
            vec![native(0x1100), native(0x1200)],
        ),
        stack(
            3,
            StackEnd::NoUnwindInfo,
            vec![
                native(0x1100),
                StackFrame::Unknown {
                    address: 0x7fff_0000_1234,
                },
            ],
        ),
        stack(
            4,
            StackEnd::Root,
            vec![
                native(0x1500),
                native(0x1400),
                native(0x1200),
                native(0x1300),
                native(0x1000),
            ],
        ),
        stack(
            5,
            StackEnd::Root,
            vec![native(0x1600), native(0x1300), native(0x1000)],
        ),
        stack(
            6,
            StackEnd::Root,
            vec![native(0x1700), native(0x1300), native(0x1000)],
        ),
        Record::GraphNode(GraphNode {
            pid: PID,
            node_id: 11,
            stack: 1,
            api: Some(launch),
        }),
        Record::GraphNode(GraphNode {
            pid: PID,
            node_id: 12,
            stack: 6,
            api: None,
        }),
    ];
    let mut calls: Vec<(ApiCall, Option<u32>)> = Vec::new();
    for (corr, name, stack) in [
        (1, launch, Some(1)),
        (2, launch, Some(2)),
        (3, launch, Some(3)),
        (4, launch, Some(4)),
        (5, graph, Some(5)),
        (6, memcpy, None),
    ] {
        calls.push((
            ApiCall {
                pid: PID,
                tid: PID + 1,
                start_ns: 1000 * u64::from(corr),
                end_ns: 1000 * u64::from(corr) + 100,
                correlation_id: corr,
                cbid: 211,
                domain: ApiDomain::Runtime,
                name,
            },
            stack,
        ));
    }
    let k = |corr: u32, node: u64, dur: u64| {
        Record::Activity(Activity {
            pid: PID,
            start_ns: 100_000 + 10_000 * u64::from(corr) + node,
            end_ns: 100_000 + 10_000 * u64::from(corr) + node + dur,
            correlation_id: corr,
            device: Some(0),
            context: 1,
            stream: Some(7),
            graph_id: (node != 0).then_some(1),
            graph_node_id: (node != 0).then_some(node),
            kind: ActivityKind::Kernel {
                name: kernel,
                grid: [1, 1, 1],
                block: [32, 1, 1],
            },
        })
    };
    let mut w = gputrace::Writer::with_flags(Vec::new(), FLAG_STACKS).unwrap();
    for r in &recs {
        w.write(r, &s).unwrap();
    }
    for (a, st) in &calls {
        w.write_api(a, *st, &s).unwrap();
    }
    recs = vec![
        k(1, 0, 1000),
        k(2, 0, 2000),
        k(3, 0, 3000),
        k(4, 0, 4000),
        k(5, 11, 5000),
        k(5, 12, 6000),
        k(5, 13, 7000),
    ];
    for r in &recs {
        w.write(r, &s).unwrap();
    }
    (w.into_inner(), s)
}

#[test]
fn inprocess_stacks__joined_like_cpu_trace_stacks_with_graph_nodes_golden() {
    let (bytes, _) = trace();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gpu-200.gputrace");
    fs::write(&path, &bytes).unwrap();
    let mut strings = StringTable::new();
    let inputs = GpuInputs::open(&[path], &mut strings).unwrap();
    let mut sym = fake();
    let mut got = stacks::collect(&inputs, &mut strings, &mut sym)
        .unwrap()
        .expect("the trace carries stacks");
    // Modules are handed to the symbolizer with their path and build id.
    assert!(
        sym.1
            .contains(&("/opt/app/bin/trainer".into(), vec![0xab, 0xcd]))
    );
    let st = &got.stats;
    assert_eq!((st.launches, st.stacks, st.graph_nodes), (5, 6, 2));
    assert_eq!(st.truncated_launches(), 2);
    assert_eq!(st.truncated[&StackEnd::DepthLimit], 1);
    assert_eq!(st.truncated[&StackEnd::NoUnwindInfo], 1);
    // The Python module's frame has no symbol; it is shown by file and offset.
    assert_eq!(st.unsymbolized_frames, 1);

    let mut folder = Folder::per_process();
    let summary = join::merge(
        Some(&mut got.trace),
        &inputs,
        &mut strings,
        &join::Options::default(),
        &mut [&mut folder],
    )
    .unwrap();
    assert_eq!(summary.kernels, 7);
    assert_eq!(summary.kernels_matched, 7, "{summary}");
    assert_eq!(summary.cpu_truncated, 2, "{summary}");
    assert!(
        summary
            .to_string()
            .contains("truncated CPU stacks: 2 of 5 launches stop before a root frame"),
        "{summary}"
    );
    let mut f = Vec::new();
    folder.write(&mut f).unwrap();
    let folded = String::from_utf8(f).unwrap();
    let mut out = format!("{}\n", got.stats);
    for l in &got.trace.launches {
        out += &format!(
            "corr {} tid {} ts {} stack {}\n",
            l.correlation_id.map_or(0, |c| c.get()),
            l.tid,
            l.ts_ns,
            got.trace.stacks.text(l.stack)
        );
    }
    out += &folded;
    golden::check(&data("stacks/inprocess.expected.txt"), &out);
    // The stack of the call into a linked-in runtime ends at the API function.
    assert!(folded.contains(
        "trainer [pid 200];_start;main;run_layer;cudaLaunchKernel;[GPU_Kernel]gemm(float*) 4\n"
    ));
    // A replayed graph's kernels: the launch stack, then where the node came from.
    assert!(folded.contains(
        "_start;main;replay;cudaGraphLaunch;[graph node captured at];_start;main;run_layer;\
         libpython3.12.so.1.0+0x4242;model.Net.forward (model.py:42);launch_kernel;\
         cudaLaunchKernel;[GPU_Kernel]gemm(float*) 5\n"
    ));
    assert!(folded.contains(
        "_start;main;replay;cudaGraphLaunch;[graph node added at];_start;main;build_graph;\
         [GPU_Kernel]gemm(float*) 6\n"
    ));
    // A node of unknown origin stays with the graph launch.
    assert!(folded.contains("_start;main;replay;cudaGraphLaunch;[GPU_Kernel]gemm(float*) 7\n"));
}

#[test]
fn stack_records__reader_golden() {
    let (bytes, _) = trace();
    let path = data("gputrace/stacks.trace");
    // The committed binary is the reader's input; regenerate it only when blessing.
    if !path.exists() || std::env::var_os("GPUPERF_BLESS").is_some_and(|v| v == "1") {
        fs::write(&path, &bytes).unwrap();
    }
    let mut strings = StringTable::new();
    let mut records = Vec::new();
    let stats = gputrace::read(
        fs::File::open(&path).unwrap(),
        &path,
        &mut strings,
        &mut |r, _| records.push(r.clone()),
    )
    .unwrap();
    assert!(stats.diagnostics.is_empty() && stats.truncated_at.is_none());
    assert_eq!(stats.flags, FLAG_STACKS);
    golden::check(
        &data("gputrace/stacks.expected.txt"),
        &golden::render_records(&records, &strings),
    );
}

#[test]
fn trace_without_stacks__collects_nothing() {
    let sc = crate::scenario::build();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gpu.gputrace");
    fs::write(&path, sc.gpu_bytes()).unwrap();
    let mut strings = StringTable::new();
    let inputs = GpuInputs::open(&[path], &mut strings).unwrap();
    assert!(
        stacks::collect(&inputs, &mut strings, &mut fake())
            .unwrap()
            .is_none()
    );
}

#[test]
fn completeness_is_judged_by_the_root_frame() {
    assert!(stacks::is_complete("_start;__libc_start_main;main;f"));
    assert!(stacks::is_complete("clone3;start_thread;worker"));
    assert!(!stacks::is_complete("main;run_layer;cudaLaunchKernel"));
    assert!(!stacks::is_complete("[unknown];f"));
    assert!(!stacks::is_complete(""));
}
