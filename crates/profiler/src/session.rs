//! The profiling session: loads the BPF object, attaches the probes, and turns
//! ring-buffer records into CPU trace lines on a thread of its own.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::Write;
use std::mem::MaybeUninit;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use gpuperf_merge::model::ROOT_FRAMES;
use gpuperf_merge::read::cpu::{LaunchLine, TRUNCATED_FRAME, Writer};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, MapHandle, RingBufferBuilder, UprobeOpts};

use crate::elf::{self, ProbePoint};
use crate::error::{Error, Result, bpf};
use crate::event::{
    COPY_ID_BASE, Copy, Event, FULL_ID_BASE, FileMapped, INLINE_STACK_ID_BASE, Launch, Origin,
    Place, Stack,
};
use crate::preflight;
use crate::skel::{LaunchSkel, LaunchSkelBuilder};
use crate::symbolize::Symbolizer;
use crate::unwinding::Unwinding;

/// The marker function and its semaphore, as `gpuperf-inject` exports them.
pub const MARKER_SYMBOL: &str = "gpuperf_launch_marker";
/// See [`MARKER_SYMBOL`].
pub const SEMAPHORE_SYMBOL: &str = "gpuperf_marker_semaphore";

/// How often records are collected when fewer than a batch are waiting.
const POLL_MS: u64 = 20;

/// Cookie bit telling the entry program to write the record itself.
const COOKIE_EMIT: u64 = 1 << 63;
/// Cookie bit: the probed instruction is one at which the kernel's stack walk
/// reads the caller's return address at `[sp]`; the BPF walk does the same,
/// so its frames match those the kernel sends.
const COOKIE_CALLER_AT_SP: u64 = 1 << 62;

/// The cookie bits that a probe on `first` needs.
fn walk_cookie(first: elf::FirstInsn) -> u64 {
    match first {
        elf::FirstInsn::PushRbp | elf::FirstInsn::Endbr64 => COOKIE_CALLER_AT_SP,
        elf::FirstInsn::Nop5 | elf::FirstInsn::Other => 0,
    }
}

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
    /// a thread start); they start with [`TRUNCATED_FRAME`].
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

struct Attach<'a, 'obj> {
    skel: &'a LaunchSkel<'obj>,
    links: Vec<Link>,
    /// Probed places: (file, offset in it).
    attached: HashSet<(FileKey, u64)>,
    examined: HashSet<FileKey>,
    slow: Vec<String>,
    api_files: Vec<PathBuf>,
}

impl Attach<'_, '_> {
    fn marker(&mut self, lib: &Path) -> Result<()> {
        let point = elf::function(lib, MARKER_SYMBOL)?;
        let semaphore = elf::symbol_offset(lib, SEMAPHORE_SYMBOL)?;
        if elf::segments_mapping(lib, semaphore)? > 1 {
            return Err(Error::Probe {
                path: lib.to_owned(),
                message: format!(
                    "{SEMAPHORE_SYMBOL} shares a file page between two segments, so the kernel \
                     cannot count in it and the marker would never fire; rebuild gpuperf-inject"
                ),
            });
        }
        let opts = UprobeOpts {
            ref_ctr_offset: semaphore as usize,
            cookie: walk_cookie(point.first),
            ..Default::default()
        };
        let link = self
            .skel
            .progs
            .launch_marker
            .attach_uprobe_with_opts(-1, lib, point.file_offset as usize, opts)
            .map_err(bpf(format!(
                "attaching to {MARKER_SYMBOL} in {}",
                lib.display()
            )))?;
        self.links.push(link);
        Ok(())
    }

    /// Entry probes on every CUDA API function `file` defines; a file defining
    /// none is fine (the discovery path offers every mapped file).
    fn api_file(&mut self, file: &Path) -> Result<usize> {
        self.api_file_named(file, file)
    }

    /// [`Attach::api_file`] of a file that a process names `shown`.
    fn api_file_named(&mut self, file: &Path, shown: &Path) -> Result<usize> {
        if !self.examined.insert(FileKey::of(file)) {
            return Ok(0);
        }
        let points = elf::api_functions(file)?;
        let mut n = 0;
        for p in &points {
            if self.entry(p, 0)? {
                n += 1;
            }
        }
        if n > 0 {
            self.api_files.push(shown.to_owned());
        }
        Ok(n)
    }

    /// Attaches the entry program; skips a function whose probe would
    /// single-step (about 10 µs a call) unless the user named it.
    fn entry(&mut self, p: &ProbePoint, cookie: u64) -> Result<bool> {
        if cookie & COOKIE_EMIT == 0 && !p.first.is_fast() {
            self.slow.push(format!("{}:{}", p.path.display(), p.symbol));
            return Ok(false);
        }
        if !self.attached.insert((FileKey::of(&p.path), p.file_offset)) {
            return Ok(false);
        }
        let opts = UprobeOpts {
            cookie: cookie | walk_cookie(p.first),
            ..Default::default()
        };
        let link = self
            .skel
            .progs
            .launch_entry
            .attach_uprobe_with_opts(-1, &p.path, p.file_offset as usize, opts)
            .map_err(bpf(format!(
                "attaching to {} in {}",
                p.symbol,
                p.path.display()
            )))?;
        self.links.push(link);
        Ok(true)
    }

    /// Entry probes for the CUDA libraries `pid` maps (libcudart, libcuda, or
    /// an executable with cudart linked in). Each is probed through the
    /// file it maps: `/proc/PID/map_files` (which needs `CAP_SYS_ADMIN`),
    /// else its path here or under `/proc/PID/root` if that file has the
    /// mapping's inode number. Its path alone may name another file here, or
    /// none: the path `/proc/PID/maps` shows a file of another mount
    /// namespace (a container) by is the one it has there.
    fn discover(&mut self, pid: u32) {
        let exe_link = fs::read_link(format!("/proc/{pid}/exe")).ok();
        let exe_ino = fs::metadata(format!("/proc/{pid}/exe"))
            .ok()
            .map(|m| m.ino());
        let root = PathBuf::from(format!("/proc/{pid}/root"));
        let Ok(maps) = fs::read_to_string(format!("/proc/{pid}/maps")) else {
            return;
        };
        let mut seen = HashSet::new();
        for m in maps.lines().filter_map(MapsLine::parse) {
            if !seen.insert(m.path) {
                continue;
            }
            let path = Path::new(m.path);
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            // Only libraries that can define the API, and the executable.
            let candidate = name.starts_with("libcudart")
                || name.starts_with("libcuda.")
                || exe_link.as_deref() == Some(path)
                || exe_ino == Some(m.ino);
            if !candidate {
                continue;
            }
            let own = PathBuf::from(format!("/proc/{pid}/map_files/{}", m.range));
            let file = [
                own,
                path.to_owned(),
                root.join(path.strip_prefix("/").unwrap_or(path)),
            ]
            .into_iter()
            .find(|p| fs::metadata(p).is_ok_and(|x| x.ino() == m.ino));
            if let Some(file) = file {
                let _ = self.api_file_named(&file, path);
            }
        }
    }
}

/// An executable file mapping of a `/proc/PID/maps` line.
struct MapsLine<'a> {
    /// `START-END`, as `/proc/PID/map_files` names it.
    range: &'a str,
    /// The inode number of the mapped file.
    ino: u64,
    path: &'a str,
}

impl<'a> MapsLine<'a> {
    fn parse(line: &'a str) -> Option<Self> {
        // addr perms offset dev inode path
        let mut f = line.split_ascii_whitespace();
        let range = f.next()?;
        let perms = f.next()?;
        let ino = f.nth(2)?.parse().ok()?;
        let path = f.next()?;
        (perms.contains('x') && path.starts_with('/') && f.next().is_none()).then_some(Self {
            range,
            ino,
            path,
        })
    }
}

/// A file as probes see it: its device and inode (the same file by any
/// path, another file at the same path in another mount namespace), or its
/// path when it cannot be read (attaching then fails with the reason).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum FileKey {
    Inode(u64, u64),
    Path(PathBuf),
}

impl FileKey {
    fn of(path: &Path) -> Self {
        match fs::metadata(path) {
            Ok(m) => Self::Inode(m.dev(), m.ino()),
            Err(_) => Self::Path(path.to_owned()),
        }
    }
}

struct Sink<W: Write> {
    writer: Writer<W>,
    symbolizer: Symbolizer,
    unwinding: Unwinding,
    /// The BPF recipe map, when unwinding is on.
    recipes: Option<MapHandle>,
    recipe_seq: u64,
    /// Copy id → the stack its launch gets.
    aliases: HashMap<i32, i32>,
    /// Stacks unwound here and not yet symbolized, with whether complete.
    unwound: HashMap<i32, (Stack, bool)>,
    /// Stacks that end at a signal frame for want of stack.
    signal_cut: HashSet<i32>,
    /// Frames in each frame-pointer stack.
    fp_frames: HashMap<i32, usize>,
    /// Symbolized stacks by id, root first, starting with [`TRUNCATED_FRAME`]
    /// when incomplete.
    stacks: HashMap<i32, Rc<[String]>>,
    waiting: Vec<Launch>,
    seen_pids: HashSet<u32>,
    discover: bool,
    /// Events held until the end when symbolization is deferred.
    deferred: Option<Vec<Option<Event>>>,
    /// The root directory of each process whose file paths were seen, as
    /// [`root_seen_from_here`] found it.
    roots: HashMap<u32, Option<PathBuf>>,
    summary: Summary,
}

impl<W: Write> Sink<W> {
    /// Unwinds the batch's stack copies and sends their recipes to BPF, in
    /// arrival order and before the batch is symbolized (which can take long):
    /// until a recipe arrives, each launch from its call site sends a copy.
    /// Runs on every batch, also when symbolization is deferred.
    fn prepare(&mut self, events: &mut [Option<Event>]) {
        for e in events.iter_mut().flatten() {
            match e {
                Event::Exec(x) => {
                    self.roots.remove(&x.pid);
                }
                Event::File(f) => self.find_file(f),
                Event::Stack(s) if s.stack_id < COPY_ID_BASE => {
                    self.fp_frames.insert(s.stack_id, s.frames.len());
                }
                Event::Copy(c) => self.unwind_copy(c),
                _ => {}
            }
        }
    }

    /// Finds the file a process mapped, whose path is the process's own
    /// (from its root directory, in its mount namespace), and makes `f`'s
    /// path one from which this process reads that very file
    /// ([`ModuleFiles`](crate::unwinding::ModuleFiles)). A file not found,
    /// or only another one by its path, is reported and neither unwound
    /// through nor placed for the symbolizer.
    fn find_file(&mut self, f: &mut FileMapped) {
        let root = self
            .roots
            .entry(f.pid)
            .or_insert_with(|| root_seen_from_here(f.pid))
            .clone();
        let found = self.unwinding.files.find(f, root.as_deref());
        let keys = self.unwinding.mapped(
            f,
            found.as_ref().map(PathBuf::as_path).map_err(Clone::clone),
        );
        match found {
            Ok(here) => {
                self.symbolizer.name_file(&here, &f.path);
                f.path = here;
            }
            Err(_) => f.place = Place::Unknown,
        }
        for key in keys {
            if let Some(map) = &self.recipes {
                let _ = map.delete(&key.to_bytes());
            }
        }
    }

    fn unwind_copy(&mut self, c: &Copy) {
        let fp_frames = self.fp_frames.get(&c.fp_id).copied();
        let r = self.unwinding.resolve(c, fp_frames);
        if let (Some((key, recipe)), Some(map)) = (r.recipe, &self.recipes) {
            self.recipe_seq += 1;
            // A failed update only costs copies.
            let _ = map.update(
                &key.to_bytes(),
                &recipe.to_bytes(self.recipe_seq),
                MapFlags::ANY,
            );
        }
        if let Some((stack, complete)) = r.new_stack {
            self.unwound.insert(stack.stack_id, (stack, complete));
        }
        if r.signal_cut {
            self.signal_cut.insert(r.stack_id);
        }
        self.aliases.insert(c.copy_id, r.stack_id);
    }

    /// The stack a launch's id stands for (a copy stands for its result).
    fn target(&self, id: i32) -> i32 {
        if (COPY_ID_BASE..FULL_ID_BASE).contains(&id) {
            self.aliases.get(&id).copied().unwrap_or(id)
        } else {
            id
        }
    }

    /// Whether the frames of a launch's stack are here (or never will be).
    fn known(&self, id: i32) -> bool {
        let id = self.target(id);
        id < 0 || self.stacks.contains_key(&id) || self.unwound.contains_key(&id)
    }

    fn handle(&mut self, events: Vec<Option<Event>>, attach: &mut Attach<'_, '_>) -> Result<()> {
        if let Some(held) = &mut self.deferred {
            held.extend(events);
            return Ok(());
        }
        // A new process's probes and maps first, while it lives and before
        // its first launches pass: symbolizing the batch's stacks can take
        // long (the first stacks parse whole libraries).
        for e in events.iter().flatten() {
            if let Event::Launch(l) = e
                && self.seen_pids.insert(l.pid)
            {
                self.symbolizer.index_process(l.pid);
                if self.discover && l.origin == Origin::Marker {
                    attach.discover(l.pid);
                }
            }
        }
        let mut new_stack = false;
        for e in events {
            match e {
                None => self.summary.bad_records += 1,
                Some(Event::Exec(x)) => self.symbolizer.exec(x.pid, &x.filename),
                Some(Event::File(f)) => self.symbolizer.mapped(f),
                Some(Event::Stack(s)) => {
                    let names = self.symbolizer.frames(&s);
                    let complete = names
                        .first()
                        .is_some_and(|f| ROOT_FRAMES.contains(&f.as_str()));
                    self.stacks.insert(s.stack_id, mark(names, complete));
                    new_stack = true;
                }
                // Unwound in `prepare`.
                Some(Event::Copy(_)) => new_stack = true,
                Some(Event::Launch(l)) => {
                    if !self.known(l.stack_id) {
                        // Its frames were sent from another CPU and are still
                        // on their way.
                        self.waiting.push(l);
                    } else {
                        self.write(&l)?;
                    }
                }
            }
        }
        if new_stack && !self.waiting.is_empty() {
            let waiting = std::mem::take(&mut self.waiting);
            for l in waiting {
                if self.known(l.stack_id) {
                    self.write(&l)?;
                } else {
                    self.waiting.push(l);
                }
            }
        }
        Ok(())
    }

    fn write(&mut self, l: &Launch) -> Result<()> {
        let id = self.target(l.stack_id);
        if id != l.stack_id {
            self.aliases.remove(&l.stack_id);
        }
        if let Some((stack, complete)) = self.unwound.remove(&id) {
            let names = self.symbolizer.frames(&stack);
            self.stacks.insert(id, mark(names, complete));
        }
        let frames = if id >= INLINE_STACK_ID_BASE {
            self.stacks.remove(&id)
        } else {
            self.stacks.get(&id).cloned()
        };
        if frames.as_ref().is_none_or(|f| f.is_empty()) {
            self.summary.launches_without_stack += 1;
        } else if frames.as_ref().is_some_and(|f| f[0] == TRUNCATED_FRAME) {
            self.summary.truncated_stacks += 1;
            if self.signal_cut.contains(&id) {
                self.summary.signal_stacks_cut += 1;
            }
        }
        let line = LaunchLine {
            ts_ns: l.ts,
            comm: &l.comm,
            pid: l.pid,
            tid: l.tid,
            cpu: l.cpu,
            // CUPTI's ids are 32-bit; the marker passes them zero-extended.
            correlation_id: u32::try_from(l.correlation_id).unwrap_or(0),
        };
        let frames = frames.unwrap_or_else(|| Rc::from([]));
        self.writer
            .launch(&line, frames.iter().map(String::as_str))
            .map_err(Error::Output)?;
        self.summary.launches += 1;
        Ok(())
    }

    fn finish(mut self, dropped: u64, attach: &mut Attach<'_, '_>) -> Result<Summary> {
        if let Some(held) = self.deferred.take() {
            self.discover = false;
            self.handle(held, attach)?;
        }
        for l in std::mem::take(&mut self.waiting) {
            self.write(&l)?;
        }
        if dropped > 0 {
            self.writer.dropped(dropped).map_err(Error::Output)?;
        }
        self.writer.flush().map_err(Error::Output)?;
        self.summary.unsymbolized_frames = self.symbolizer.unsymbolized_frames;
        self.summary.uncacheable_stacks = self.unwinding.counts.uncacheable;
        self.summary.unreadable_files = std::mem::take(&mut self.unwinding.unreadable);
        Ok(self.summary)
    }
}

/// Where the root directory of process `pid` is as this process sees it,
/// when it is another directory than ours; `None` when it is ours, or cannot
/// be told (the process is gone, or its root is not reachable from here).
fn root_seen_from_here(pid: u32) -> Option<PathBuf> {
    let id = |m: fs::Metadata| (m.dev(), m.ino());
    let link = PathBuf::from(format!("/proc/{pid}/root"));
    let theirs = id(fs::metadata(&link).ok()?);
    if id(fs::metadata("/").ok()?) == theirs {
        return None;
    }
    // The link's text is the directory's path from our root; it is theirs
    // only if it leads to the same directory.
    let path = fs::read_link(&link).ok()?;
    (path.is_absolute() && fs::metadata(&path).ok().map(id) == Some(theirs)).then_some(path)
}

/// A symbolized stack (root first), behind [`TRUNCATED_FRAME`] when it does not
/// reach a root frame. An empty stack stays empty (no stack, not a short one).
fn mark(mut names: Vec<String>, complete: bool) -> Rc<[String]> {
    if !complete && !names.is_empty() {
        names.insert(0, TRUNCATED_FRAME.to_owned());
    }
    names.into()
}
