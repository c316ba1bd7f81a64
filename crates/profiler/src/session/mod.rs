//! The profiling session: loads the BPF object, attaches the probes, and turns
//! ring-buffer records into CPU trace lines on a thread of its own.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::mem::MaybeUninit;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use gpuperf_merge::read::cpu::Writer;
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, MapHandle, RingBufferBuilder};

use crate::elf;
use crate::error::{Error, Result, bpf};
use crate::event::Event;
use crate::preflight;
use crate::skel::{LaunchSkel, LaunchSkelBuilder};
use crate::symbolize::Symbolizer;
use crate::unwinding::Unwinding;

mod attach;
mod sink;

use attach::{Attach, COOKIE_EMIT};
use sink::Sink;

/// The marker function and its semaphore, as `gpuperf-inject` exports them.
pub const MARKER_SYMBOL: &str = "gpuperf_launch_marker";
/// See [`MARKER_SYMBOL`].
pub const SEMAPHORE_SYMBOL: &str = "gpuperf_marker_semaphore";

/// How often records are collected when fewer than a batch are waiting.
const POLL_MS: u64 = 20;

/// `LIB:SYMBOL`, a function to probe in an ELF file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeSpec {
    /// The library or executable.
    pub path: PathBuf,
    /// The function's symbol name.
    pub symbol: String,
}

impl FromStr for ProbeSpec {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let bad = |message: &str| Error::Spec {
            spec: s.to_owned(),
            message: message.to_owned(),
        };
        // Paths may contain ':'; symbols never do.
        let (path, symbol) = s
            .rsplit_once(':')
            .ok_or_else(|| bad("expected LIB:SYMBOL"))?;
        if path.is_empty() {
            return Err(bad("the library path is empty"));
        }
        if symbol.is_empty() || symbol.contains(char::is_whitespace) {
            return Err(bad("the symbol name is empty or has spaces"));
        }
        Ok(Self {
            path: PathBuf::from(path),
            symbol: symbol.to_owned(),
        })
    }
}

/// What to probe and where to look.
#[derive(Clone, Debug)]
pub struct Options {
    /// `gpuperf-inject` libraries whose marker to attach to. Each launch there
    /// yields a record with its CUPTI correlation id.
    pub marker_libraries: Vec<PathBuf>,
    /// Files whose CUDA API functions get entry probes: the stack taken there
    /// is handed to the marker. Libraries found in traced processes are added
    /// while running when `discover` is set.
    pub api_files: Vec<PathBuf>,
    /// Compatibility mode: functions whose every call yields a record with
    /// correlation id 0, without injection.
    pub uprobes: Vec<ProbeSpec>,
    /// Trace these processes and the processes they start; more can be added
    /// with [`Profiler::add_pid`].
    pub pids: Vec<u32>,
    /// Trace every process on the system instead.
    pub all_processes: bool,
    /// Attach entry probes to CUDA libraries that traced processes map.
    pub discover: bool,
    /// Ring buffer size in bytes, a power of two.
    pub ring_buffer_bytes: u32,
    /// Distinct stacks remembered (and sent once each); beyond that, each
    /// launch with a new stack sends its frames with it.
    pub stack_map_entries: u32,
    /// Symbolize and write everything at [`Profiler::stop`] instead of as
    /// records arrive: no symbolization work while the target runs, at the
    /// cost of holding the records (64 bytes a launch) in memory. Stacks stay
    /// exact because frames carry build ids; files are found through each
    /// process's `exec` and the files the profiler probes.
    pub defer_symbolization: bool,
    /// Complete stacks without frame pointers: where no recipe matches, send
    /// the top of the stack (up to 16 KiB) and unwind it here with
    /// `.eh_frame`, then give BPF a recipe so later launches from the same
    /// place need no copy. Off, stacks are frame-pointer walks only. Default
    /// is `true`.
    pub unwind: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            marker_libraries: Vec::new(),
            api_files: Vec::new(),
            uprobes: Vec::new(),
            pids: Vec::new(),
            all_processes: false,
            discover: true,
            ring_buffer_bytes: 8 << 20,
            stack_map_entries: 16384,
            defer_symbolization: false,
            unwind: true,
        }
    }
}

/// Counts for the user, so that nothing is lost silently.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Launch lines written.
    pub launches: u64,
    /// Launches whose stack was taken at the API entry.
    pub entry_stacks: u64,
    /// Launches whose stack was taken at the marker (it stops in NVIDIA code).
    pub marker_stacks: u64,
    /// Launches lost because the ring buffer was full.
    pub dropped_launches: u64,
    /// Stacks lost: ring buffer full, or the kernel could not walk them.
    pub lost_stacks: u64,
    /// Launch lines written without frames.
    pub launches_without_stack: u64,
    /// Frames printed as `file+offset` or a bare address.
    pub unsymbolized_frames: u64,
    /// Ring-buffer records that could not be decoded.
    pub bad_records: u64,
    /// API functions not probed because their first instruction would need
    /// the slow single-step path.
    pub slow_functions_skipped: Vec<String>,
    /// Files given entry probes. One found in a traced process is named by
    /// the path its `/proc/PID/maps` shows, which for a process in another
    /// mount namespace (a container) may name another file here: it was
    /// probed through the file the process maps.
    pub api_files: Vec<PathBuf>,
    /// Records of files mapped as code lost because the ring buffer was
    /// full: if their process exits early, the frames in that file may stay
    /// unnamed.
    pub dropped_file_events: u64,
    /// Why the libraries traced processes map are not followed, when the
    /// kernel refused that probe: frames in a library of a process that exits
    /// before its stacks are symbolized may then stay unnamed.
    pub files_not_followed: Option<String>,
    /// Where the profiler mounted tracefs because nothing was mounted there
    /// (the mmap syscall tracepoints need it).
    pub tracefs_mounted: Option<PathBuf>,
    /// Launch lines whose stack stops before a root frame (`_start`, `clone`,
    /// a thread start); they start with [`TRUNCATED_FRAME`](gpuperf_merge::read::cpu::TRUNCATED_FRAME).
    pub truncated_stacks: u64,
    /// Stack copies sent for unwinding (one per new call site, ideally).
    pub stack_copies: u64,
    /// Stack copies lost to a full ring buffer: those launches got their
    /// frame-pointer stack (counted in `truncated_stacks` when incomplete).
    pub lost_copies: u64,
    /// Launches whose stack BPF found by a recipe, without a copy.
    pub recipe_hits: u64,
    /// Distinct call paths whose unwind depends on more stack words than a
    /// recipe holds: each launch there sends a copy.
    pub uncacheable_stacks: u64,
    /// Files of traced processes that the unwinder could not read, each
    /// once, with why (one line each): copied stacks stop at their code
    /// (counted in `truncated_stacks`). Each file is looked for as its
    /// process sees it (its mapping, or its path in the process's mount
    /// namespace and root directory: a container, a chroot) while the
    /// process lives, and used only if it is the very file mapped (same
    /// inode number and size); a process gone before its files were looked
    /// for, or a path naming another file (a library replaced since), is
    /// reported here.
    pub unreadable_files: Vec<String>,
    /// Launches in a signal handler whose copied stack the unwind follows
    /// into the signal frame but that ends there: the copy holds neither the
    /// interrupted code's registers nor its stack (the handler ran on an
    /// alternate signal stack, or the signal frame and the handler's frames
    /// fill the copy). They are counted in `truncated_stacks` too.
    pub signal_stacks_cut: u64,
}

/// Counters readable while the profiler runs.
#[derive(Debug, Default)]
pub struct Progress {
    /// Launch lines written so far.
    pub launches: AtomicU64,
    /// Launches lost so far.
    pub dropped: AtomicU64,
}

/// A running profiler. Its probes are attached when [`Profiler::start`]
/// returns; [`Profiler::stop`] drains them and finishes the trace.
pub struct Profiler {
    thread: Option<JoinHandle<Result<Summary>>>,
    stop: Arc<AtomicBool>,
    targets: MapHandle,
    progress: Arc<Progress>,
    requests: mpsc::Sender<DiscoverRequest>,
}

/// A process to give entry probes, and where to say that it is done.
type DiscoverRequest = (u32, mpsc::Sender<()>);

/// Asks the running profiler to probe a process's CUDA libraries now; it can
/// be sent to other threads.
#[derive(Clone, Debug)]
pub struct Discoverer {
    requests: mpsc::Sender<DiscoverRequest>,
}

impl Discoverer {
    /// Attaches entry probes to the CUDA libraries and the executable that
    /// `pid` maps, and returns once they are attached (at most one collection
    /// period, 20 ms, later), so the process may launch next. Without this,
    /// libraries are found at a process's first marker hit, and the launches
    /// before the probes land get marker stacks.
    pub fn discover(&self, pid: u32) -> Result<()> {
        let (tx, rx) = mpsc::channel();
        self.requests
            .send((pid, tx))
            .map_err(|_| Error::Kernel("the profiler has stopped".into()))?;
        rx.recv_timeout(Duration::from_secs(10))
            .map_err(|_| Error::Kernel(format!("probing the libraries of pid {pid} timed out")))
    }
}

impl Profiler {
    /// Checks privileges and the kernel, loads and attaches every probe, and
    /// starts writing CPU lines to `out`.
    pub fn start<W: Write + Send + 'static>(options: Options, out: W) -> Result<Self> {
        preflight::check()?;
        let stop = Arc::new(AtomicBool::new(false));
        let progress = Arc::new(Progress::default());
        let (ready_tx, ready_rx) = mpsc::channel();
        let (requests, requests_rx) = mpsc::channel();
        let thread = {
            let stop = stop.clone();
            let progress = progress.clone();
            std::thread::Builder::new()
                .name("gpuperf-profiler".into())
                .spawn(move || run(options, out, ready_tx, requests_rx, &stop, &progress))
                .map_err(|e| Error::Kernel(format!("cannot start the profiler thread: {e}")))?
        };
        match ready_rx.recv() {
            Ok(targets) => Ok(Self {
                thread: Some(thread),
                stop,
                targets,
                progress,
                requests,
            }),
            // The thread ended before it was ready: its result says why.
            Err(_) => Err(thread
                .join()
                .unwrap_or_else(|_| Err(Error::Kernel("the profiler thread panicked".into())))
                .err()
                .unwrap_or_else(|| Error::Kernel("the profiler stopped before attaching".into()))),
        }
    }

    /// Traces `pid` and the processes it starts from now on. Takes effect
    /// before this returns, so a target started stopped can be released next.
    pub fn add_pid(&self, pid: u32) -> Result<()> {
        self.targets
            .update(&pid.to_ne_bytes(), &[1], MapFlags::ANY)
            .map_err(bpf(format!("adding pid {pid} to the traced set")))
    }

    /// A handle for probing a process's libraries on request; see
    /// [`Discoverer::discover`].
    pub fn discoverer(&self) -> Discoverer {
        Discoverer {
            requests: self.requests.clone(),
        }
    }

    /// Counters of the running session.
    pub fn progress(&self) -> &Progress {
        &self.progress
    }

    /// Drains what the probes recorded, writes the remaining lines and the
    /// drop count, and returns the summary.
    pub fn stop(mut self) -> Result<Summary> {
        self.stop.store(true, Ordering::Release);
        let thread = self.thread.take().expect("stop consumes the profiler");
        thread
            .join()
            .unwrap_or_else(|_| Err(Error::Kernel("the profiler thread panicked".into())))
    }
}

impl Drop for Profiler {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.stop.store(true, Ordering::Release);
            let _ = thread.join();
        }
    }
}

fn run<W: Write>(
    options: Options,
    out: W,
    ready: mpsc::Sender<MapHandle>,
    requests: mpsc::Receiver<DiscoverRequest>,
    stop: &AtomicBool,
    progress: &Progress,
) -> Result<Summary> {
    let mut storage = MaybeUninit::uninit();
    let skel = load(&mut storage, &options)?;

    let mut attach = Attach {
        skel: &skel,
        links: Vec::new(),
        attached: HashSet::new(),
        examined: HashSet::new(),
        slow: Vec::new(),
        api_files: Vec::new(),
    };
    let mut symbolizer = Symbolizer::new();
    let targets = MapHandle::try_from(&skel.maps.targets).map_err(bpf("opening the pid map"))?;
    for pid in &options.pids {
        targets
            .update(&pid.to_ne_bytes(), &[1], MapFlags::ANY)
            .map_err(bpf(format!("adding pid {pid}")))?;
    }
    for prog in [
        &skel.progs.follow_fork,
        &skel.progs.on_exec,
        &skel.progs.forget_exit,
    ] {
        attach.links.push(
            prog.attach()
                .map_err(bpf("attaching the process tracepoints"))?,
        );
    }
    // Without the syscall tracepoints (a kernel without CONFIG_FTRACE_SYSCALLS)
    // libraries are found in /proc while their process lives.
    let tracefs = Path::new(preflight::TRACEFS);
    let tracefs_mounted = preflight::mount_tracefs(tracefs).then(|| tracefs.to_path_buf());
    let mut files_not_followed = None;
    for prog in [&skel.progs.on_mmap_enter, &skel.progs.on_mmap_exit] {
        match prog.attach() {
            Ok(link) => attach.links.push(link),
            Err(e) => {
                files_not_followed =
                    Some(format!("attaching to the mmap syscall tracepoints: {e}"));
            }
        }
    }
    for lib in &options.marker_libraries {
        attach.marker(lib)?;
        symbolizer.hide_file(lib);
    }
    for file in &options.api_files {
        attach.api_file(file)?;
        symbolizer.index_file(file);
    }
    for spec in &options.uprobes {
        let point = elf::function(&spec.path, &spec.symbol)?;
        attach.entry(&point, COOKIE_EMIT)?;
        symbolizer.index_file(&spec.path);
    }

    let queue = Rc::new(RefCell::new(Vec::<Option<Event>>::new()));
    let mut builder = RingBufferBuilder::new();
    {
        let queue = queue.clone();
        builder
            .add(&skel.maps.events, move |data: &[u8]| {
                queue.borrow_mut().push(Event::parse(data));
                0
            })
            .map_err(bpf("opening the ring buffer"))?;
    }
    let ring = builder.build().map_err(bpf("opening the ring buffer"))?;
    let recipes = if options.unwind {
        Some(MapHandle::try_from(&skel.maps.recipes).map_err(bpf("opening the recipe map"))?)
    } else {
        None
    };
    let mut sink = Sink {
        writer: Writer::new(out).map_err(Error::Output)?,
        symbolizer,
        unwinding: Unwinding::default(),
        recipes,
        recipe_seq: 0,
        aliases: HashMap::new(),
        unwound: HashMap::new(),
        fp_frames: HashMap::new(),
        signal_cut: HashSet::new(),
        stacks: HashMap::new(),
        waiting: Vec::new(),
        seen_pids: HashSet::new(),
        discover: options.discover && !options.marker_libraries.is_empty(),
        deferred: options.defer_symbolization.then(Vec::new),
        roots: HashMap::new(),
        summary: Summary::default(),
    };
    // Ready: the caller may start or release its target now.
    let _ = ready.send(targets);

    loop {
        let stopping = stop.load(Ordering::Acquire);
        // The probes wake us only once a batch is waiting, so records are
        // also collected on this timer. A signal interrupting the wait is
        // not an error.
        let _ = ring.poll(Duration::from_millis(POLL_MS));
        let _ = ring.consume();
        let mut events = std::mem::take(&mut *queue.borrow_mut());
        sink.prepare(&mut events);
        sink.handle(events, &mut attach)?;
        while let Ok((pid, done)) = requests.try_recv() {
            attach.discover(pid);
            // The process waits only for the probes.
            let _ = done.send(());
            sink.symbolizer.index_process(pid);
        }
        progress
            .launches
            .store(sink.summary.launches, Ordering::Relaxed);
        if stopping {
            break;
        }
    }
    // Everything the probes submitted before `stop` is in the buffer now.
    let _ = ring.consume();
    let mut events = std::mem::take(&mut *queue.borrow_mut());
    sink.prepare(&mut events);
    sink.handle(events, &mut attach)?;

    let stats = read_stats(&skel);
    let mut summary = sink.finish(stats[Stat::LaunchDrops as usize], &mut attach)?;
    summary.entry_stacks = stats[Stat::MarkerEntryStack as usize]
        + if options.marker_libraries.is_empty() {
            stats[Stat::Entries as usize]
        } else {
            0
        };
    summary.marker_stacks = stats[Stat::MarkerOwnStack as usize];
    summary.dropped_launches = stats[Stat::LaunchDrops as usize];
    summary.lost_stacks = stats[Stat::StackErrors as usize] + stats[Stat::StackDrops as usize];
    summary.dropped_file_events = stats[Stat::FileDrops as usize];
    summary.files_not_followed = files_not_followed;
    summary.tracefs_mounted = tracefs_mounted;
    summary.stack_copies = stats[Stat::Copies as usize];
    summary.lost_copies = stats[Stat::CopyDrops as usize];
    summary.recipe_hits = stats[Stat::RecipeHits as usize];
    summary.slow_functions_skipped = attach.slow;
    summary.api_files = attach.api_files;
    progress
        .dropped
        .store(summary.dropped_launches, Ordering::Relaxed);
    Ok(summary)
}

/// Opens, sizes and loads the BPF object.
fn load<'obj>(
    storage: &'obj mut MaybeUninit<libbpf_rs::OpenObject>,
    options: &Options,
) -> Result<LaunchSkel<'obj>> {
    let mut open = LaunchSkelBuilder::default()
        .open(storage)
        .map_err(bpf("opening the BPF object"))?;
    if let Some(rodata) = open.maps.rodata_data.as_deref_mut() {
        rodata.filter_pids = !options.all_processes;
        rodata.unwind_copies = options.unwind;
    }
    open.maps
        .events
        .set_max_entries(options.ring_buffer_bytes.next_power_of_two().max(4096))
        .map_err(bpf("sizing the ring buffer"))?;
    open.maps
        .stack_ids
        .set_max_entries(options.stack_map_entries.max(64))
        .map_err(bpf("sizing the stack map"))?;
    open.load().map_err(bpf("loading the BPF programs"))
}

/// `enum stat_index` in launch.h.
#[derive(Copy, Clone)]
enum Stat {
    Entries,
    #[allow(dead_code)]
    Markers,
    MarkerEntryStack,
    MarkerOwnStack,
    StackErrors,
    #[allow(dead_code)]
    StackCollisions,
    LaunchDrops,
    StackDrops,
    #[allow(dead_code)]
    ExecDrops,
    #[allow(dead_code)]
    StackMapFull,
    #[allow(dead_code)]
    WalkMismatch,
    FileDrops,
    Copies,
    CopyDrops,
    RecipeHits,
    #[allow(dead_code)]
    RecipeMisses,
    #[allow(dead_code)]
    CallerRestored,
    Count,
}

fn read_stats(skel: &LaunchSkel<'_>) -> [u64; Stat::Count as usize] {
    let mut out = [0u64; Stat::Count as usize];
    for (i, slot) in out.iter_mut().enumerate() {
        let key = (i as u32).to_ne_bytes();
        if let Ok(Some(per_cpu)) = skel.maps.stats.lookup_percpu(&key, MapFlags::ANY) {
            *slot = per_cpu
                .iter()
                .filter_map(|v| v.get(..8).and_then(|b| b.try_into().ok()))
                .map(u64::from_ne_bytes)
                .sum();
        }
    }
    out
}
