//! A small recording in gpuperf's own formats that exercises every record kind:
//! two threads, a CUDA graph, copies, a memset, a sync, a failed launch, a lost CPU
//! event, a lost API record, and drop counts.

use gpuperf_merge::model::{
    Activity, ActivityKind, ApiCall, ApiDomain, Device, DropSource, Dropped, MemcpyKind, Process,
    Record, StringTable,
};
use gpuperf_merge::read::cpu;
use gpuperf_merge::read::gputrace;

pub const PID: u32 = 100;
const T1: u32 = 101;
const T2: u32 = 102;

pub const STACK_MATMUL: &str = "_start;main;train_step;forward;matmul_layer;cudaLaunchKernel";
pub const STACK_SOFTMAX: &str = "_start;main;train_step;forward;softmax_layer;cudaLaunchKernel";
pub const STACK_GRAPH: &str = "_start;main;train_step;replay_graph;cudaGraphLaunch";
pub const STACK_WORKER: &str = "_start;start_thread;worker;reduce_async;cuLaunchKernel";
pub const STACK_FAILED: &str = "_start;main;train_step;bad_launch;cudaLaunchKernel";
pub const STACK_ORPHAN: &str = "_start;main;orphan;cudaLaunchKernel";

/// One CPU launch: (tid, correlation id, stack), in time order of the calls.
pub struct Scenario {
    pub strings: StringTable,
    pub records: Vec<Record>,
    /// (ts, tid, corr, stack) for the CPU side.
    pub cpu: Vec<(u64, u32, u32, &'static str)>,
}

fn act(start: u64, dur: u64, corr: u32, stream: u32, kind: ActivityKind) -> Activity {
    Activity {
        pid: PID,
        start_ns: start,
        end_ns: start + dur,
        correlation_id: corr,
        device: Some(0),
        context: 1,
        stream: Some(stream),
        graph_id: None,
        graph_node_id: None,
        kind,
    }
}

pub fn build() -> Scenario {
    let mut s = StringTable::new();
    let mut records = vec![
        Record::Process(Process {
            pid: PID,
            ppid: Some(1),
            exe: "/opt/app/train".into(),
            start_ns: 1_000_000,
            start_realtime_ns: None,
        }),
        Record::Device(Device {
            pid: PID,
            id: 0,
            name: "NVIDIA H100 80GB HBM3".into(),
            compute_capability: (9, 0),
        }),
    ];
    let mut cpu = Vec::new();
    let api = |s: &mut StringTable,
               records: &mut Vec<Record>,
               tid,
               start: u64,
               dur,
               corr,
               name: &str,
               cbid| {
        let domain = if name.starts_with("cu") && !name.starts_with("cuda") {
            ApiDomain::Driver
        } else {
            ApiDomain::Runtime
        };
        records.push(Record::Api(ApiCall {
            pid: PID,
            tid,
            start_ns: start,
            end_ns: start + dur,
            correlation_id: corr,
            cbid,
            domain,
            name: s.intern(name),
        }));
    };
    let k = |s: &mut StringTable, name: &str| ActivityKind::Kernel {
        name: s.intern(name),
        grid: [64, 1, 1],
        block: [128, 1, 1],
    };
    let base = 2_000_000u64;
    api(&mut s, &mut records, T1, base, 4_000, 1, "cudaMalloc", 20);
    api(
        &mut s,
        &mut records,
        T1,
        base + 10_000,
        30_000,
        2,
        "cudaMemcpy",
        31,
    );
    records.push(Record::Activity(act(
        base + 12_000,
        25_000,
        2,
        7,
        ActivityKind::Memcpy {
            kind: MemcpyKind::HtoD,
            bytes: 1 << 20,
            peer: None,
        },
    )));
    // Kernels may be recorded before their API call, as CUPTI buffers deliver them.
    let kk = k(&mut s, "_Z6matmulPfS_S_i");
    records.push(Record::Activity(act(base + 50_000, 1_500, 3, 7, kk)));
    api(
        &mut s,
        &mut records,
        T1,
        base + 45_000,
        3_000,
        3,
        "cudaLaunchKernel",
        211,
    );
    cpu.push((base + 45_000 - 400, T1, 3, STACK_MATMUL));
    api(
        &mut s,
        &mut records,
        T1,
        base + 50_000,
        3_000,
        4,
        "cudaLaunchKernel",
        211,
    );
    cpu.push((base + 50_000 - 400, T1, 4, STACK_SOFTMAX));
    let kk = k(&mut s, "_Z7softmaxPfi");
    records.push(Record::Activity(act(base + 52_000, 800, 4, 7, kk)));
    // A graph launch: three kernels share its correlation id.
    api(
        &mut s,
        &mut records,
        T1,
        base + 60_000,
        6_000,
        5,
        "cudaGraphLaunch",
        311,
    );
    cpu.push((base + 60_000 - 400, T1, 5, STACK_GRAPH));
    for (node, (name, dur)) in [("_Z4gemmv", 2_000), ("_Z4reluv", 700), ("_Z4gemmv", 2_100)]
        .into_iter()
        .enumerate()
    {
        let mut a = act(
            base + 70_000 + node as u64 * 3_000,
            dur,
            5,
            8,
            k(&mut s, name),
        );
        a.graph_id = Some(1);
        a.graph_node_id = Some(node as u64 + 1);
        records.push(Record::Activity(a));
    }
    // A driver-API launch from a second thread.
    api(
        &mut s,
        &mut records,
        T2,
        base + 61_000,
        2_000,
        6,
        "cuLaunchKernel",
        307,
    );
    cpu.push((base + 61_000 - 400, T2, 6, STACK_WORKER));
    let kk = k(&mut s, "_Z9reduceSumPfi");
    records.push(Record::Activity(act(base + 80_000, 900, 6, 9, kk)));
    // A launch that failed: CPU stack and API call, no kernel.
    api(
        &mut s,
        &mut records,
        T1,
        base + 90_000,
        1_000,
        7,
        "cudaLaunchKernel",
        211,
    );
    cpu.push((base + 90_000 - 400, T1, 7, STACK_FAILED));
    api(
        &mut s,
        &mut records,
        T1,
        base + 95_000,
        1_000,
        8,
        "cudaMemsetAsync",
        52,
    );
    records.push(Record::Activity(act(
        base + 96_000,
        200,
        8,
        7,
        ActivityKind::Memset {
            bytes: 4096,
            value: 0,
        },
    )));
    api(
        &mut s,
        &mut records,
        T1,
        base + 100_000,
        20_000,
        9,
        "cudaStreamSynchronize",
        131,
    );
    records.push(Record::Activity(act(
        base + 100_500,
        19_000,
        9,
        7,
        ActivityKind::Sync {
            sync_type: 3,
            wait: None,
        },
    )));
    // A launch whose CPU event was lost.
    api(
        &mut s,
        &mut records,
        T1,
        base + 125_000,
        3_000,
        10,
        "cudaLaunchKernel",
        211,
    );
    let kk = k(&mut s, "_Z6matmulPfS_S_i");
    records.push(Record::Activity(act(base + 130_000, 1_200, 10, 7, kk)));
    // A kernel whose API record was lost.
    let kk = k(&mut s, "_Z7softmaxPfi");
    records.push(Record::Activity(act(base + 140_000, 300, 11, 7, kk)));
    // A CPU launch no API call explains.
    cpu.push((base + 300_000, T1, 99, STACK_ORPHAN));
    records.push(Record::Dropped(Dropped {
        pid: PID,
        source: DropSource::CuptiActivity,
        count: 2,
    }));
    Scenario {
        strings: s,
        records,
        cpu,
    }
}

impl Scenario {
    pub fn gpu_bytes(&self) -> Vec<u8> {
        let mut w = gputrace::Writer::new(Vec::new()).unwrap();
        for r in &self.records {
            w.write(r, &self.strings).unwrap();
        }
        w.into_inner()
    }

    /// The CPU side in gpuperf's format (with correlation ids).
    pub fn cpu_gpuperf(&self) -> Vec<u8> {
        let mut w = cpu::Writer::new(Vec::new()).unwrap();
        for &(ts, tid, corr, stack) in &self.cpu {
            let l = cpu::LaunchLine {
                ts_ns: ts,
                comm: "train",
                pid: PID,
                tid,
                cpu: 0,
                correlation_id: corr,
            };
            w.launch(&l, stack.split(';')).unwrap();
        }
        w.dropped(1).unwrap();
        w.into_inner()
    }

    /// The CPU side in the reference format (no correlation ids), real tids.
    pub fn cpu_reference(&self) -> Vec<u8> {
        let mut out = String::new();
        for &(ts, tid, _, stack) in &self.cpu {
            out.push_str(&format!("{ts} train {PID} {tid} 0 {stack}\n"));
        }
        out.into_bytes()
    }
}
