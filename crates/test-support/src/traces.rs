//! Hand-made gpuperf GPU traces: the records a test writes itself (a process,
//! its API calls, the kernels they launched), built with the defaults every
//! test used (parent 1, runtime API, device 0, context 1, a 1×1×1 grid of
//! 32-thread blocks, no graph), and encoded as the injection library writes them.
//!
//! ```
//! use gpuperf_test_support::traces::Trace;
//!
//! let mut t = Trace::new();
//! t.process(42, "/bin/app", 1_000)
//!     .api(42, 43, 1, (100_000, 105_000), "cudaLaunchKernel", 211)
//!     .kernel(42, 1, (110_000, 160_000), 7, "tiny");
//! assert_eq!(t.records.len(), 3);
//! assert!(!t.gputrace().is_empty());
//! ```

use gpuperf_merge::model::{
    Activity, ActivityKind, ApiCall, ApiDomain, Process, Record, StringTable,
};
use gpuperf_merge::read::gputrace;

/// A GPU trace under construction: its records in the order written, and the
/// strings they name.
#[derive(Default)]
pub struct Trace {
    /// The names the records refer to.
    pub strings: StringTable,
    /// The records, in the order [`Trace::gputrace`] writes them.
    pub records: Vec<Record>,
}

impl Trace {
    /// An empty trace.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds process `pid` (parent 1), started at `start_ns`, running `exe`.
    pub fn process(&mut self, pid: u32, exe: &str, start_ns: u64) -> &mut Self {
        self.push(Record::Process(Process {
            pid,
            ppid: Some(1),
            exe: exe.into(),
            start_ns,
            start_realtime_ns: None,
        }))
    }

    /// Adds a runtime API call `name` (callback id `cbid`) by thread `tid`, over
    /// `(start_ns, end_ns)`, with correlation id `corr`.
    pub fn api(
        &mut self,
        pid: u32,
        tid: u32,
        corr: u32,
        (start_ns, end_ns): (u64, u64),
        name: &str,
        cbid: u32,
    ) -> &mut Self {
        let name = self.strings.intern(name);
        self.push(Record::Api(ApiCall {
            pid,
            tid,
            start_ns,
            end_ns,
            correlation_id: corr,
            cbid,
            domain: ApiDomain::Runtime,
            name,
        }))
    }

    /// Adds kernel `name` on device 0, `stream`, over `(start_ns, end_ns)`,
    /// launched by the call with correlation id `corr`.
    pub fn kernel(
        &mut self,
        pid: u32,
        corr: u32,
        (start_ns, end_ns): (u64, u64),
        stream: u32,
        name: &str,
    ) -> &mut Self {
        let name = self.strings.intern(name);
        self.push(Record::Activity(Activity {
            pid,
            start_ns,
            end_ns,
            correlation_id: corr,
            device: Some(0),
            context: 1,
            stream: Some(stream),
            graph_id: None,
            graph_node_id: None,
            kind: ActivityKind::Kernel {
                name,
                grid: [1, 1, 1],
                block: [32, 1, 1],
            },
        }))
    }

    /// Adds a record built by hand.
    pub fn push(&mut self, record: Record) -> &mut Self {
        self.records.push(record);
        self
    }

    /// The records as a gpuperf GPU trace file (`*.gputrace`).
    pub fn gputrace(&self) -> Vec<u8> {
        let mut w = gputrace::Writer::new(Vec::new()).expect("writing to memory");
        for r in &self.records {
            w.write(r, &self.strings).expect("writing to memory");
        }
        w.into_inner()
    }
}
