//! `gpuperf record`: run a program with the injection library and the eBPF
//! profiler, then join and render what they recorded.
//!
//! Ordering comes from the kernel, not from sleeps: the profiler's probes are
//! attached and our own pid is in its traced set before the target is forked,
//! and the traced set follows forks, so the target is traced from its first
//! instruction. The injection library is loaded by the CUDA driver during
//! `cuInit`, before any launch, and waits there (see [`crate::sync`]) until the
//! process's CUDA libraries have entry probes.

use std::ffi::OsString;
use std::fs;
use std::io::{self, IsTerminal as _};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use gpuperf_profiler::{Options, ProbeSpec, Profiler, Symbolizer};
use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::SignalsInfo;
use signal_hook::iterator::exfiltrator::WithOrigin;
use signal_hook::low_level::siginfo::{Cause, Origin};
use tracing::{debug, info, warn};

use gpuperf_merge::recording::{self, Finish, Finished, Outputs, env as rec_env};

use crate::cli::{RecordArgs, StacksFrom};
use crate::inject_lib;
use crate::sync;
use crate::target::{self, User};

/// How often the wait loop looks at the target when no signal wakes it.
const TICK: Duration = Duration::from_millis(100);

/// Phases the signal thread reacts to.
const RUNNING: u8 = 0;
const FINISHING: u8 = 1;

/// Runs the whole recording. Returns the target's exit code; errors before the
/// target starts are returned as errors, errors after it are printed, because
/// the exit code belongs to the target.
pub fn run(a: RecordArgs, quiet: bool) -> Result<u8> {
    let user = User::from_sudo(|k| std::env::var_os(k), geteuid())?;
    let want_gpu = !a.cpu_only;
    // Where launch stacks come from: in the program whenever the injection
    // library runs, unless eBPF is asked for (or needed: --cpu-only, --uprobe).
    let want_cpu = match a.stacks {
        StacksFrom::Auto => !a.gpu_only && (a.cpu_only || !a.uprobe.is_empty()),
        StacksFrom::Ebpf => !a.gpu_only,
        StacksFrom::Inject => false,
    };
    if a.stacks == StacksFrom::Inject && a.cpu_only {
        bail!("--stacks inject takes stacks in the injection library, which --cpu-only turns off");
    }
    let mut in_process = want_gpu && !a.gpu_only && !want_cpu;
    // Before the program runs: finding a bad output path only afterwards would
    // cost the user the whole run.
    check_outputs(&a)?;

    // Scratch space: the embedded injection library, and the raw traces unless
    // the user keeps them. The target's user must read and write there.
    let scratch = tempfile::Builder::new()
        .prefix("gpuperf-")
        .tempdir()
        .context("failed to create a scratch directory")?;
    fs::set_permissions(scratch.path(), fs::Permissions::from_mode(0o755))
        .context("failed to open up the scratch directory")?;
    let raw = match &a.raw_dir {
        Some(d) => {
            fs::create_dir_all(d).with_context(|| format!("failed to create `{}`", d.display()))?;
            target::chown(d, user.as_ref())?;
            d.clone()
        }
        None => {
            let d = scratch.path().join("raw");
            fs::create_dir(&d).with_context(|| format!("failed to create `{}`", d.display()))?;
            target::chown(&d, user.as_ref())?;
            d
        }
    };
    recording::clear_old_files(&raw)?;

    let signals = Signals::start()?;
    let exe = target::resolve(&a.program[0], std::env::var_os("PATH").as_deref());
    let inject = if want_gpu {
        let (path, origin) = inject_lib::locate(
            std::env::var_os("GPUPERF_INJECT_LIB").map(PathBuf::from),
            scratch.path(),
        )?;
        debug!("injection library {origin:?}: `{}`", path.display());
        Some(path)
    } else {
        None
    };

    let cpu_path = raw.join(recording::CPU_TRACE);
    let profiler = if want_cpu {
        match start_profiler(&a, exe.as_deref(), inject.as_deref(), &cpu_path) {
            Ok(p) => Some(p),
            Err(e) if want_gpu => {
                warn!("no CPU stacks from eBPF: {e:#}");
                warn!(
                    "taking launch stacks inside the program instead (--stacks inject does so \
                     without trying eBPF)"
                );
                in_process = true;
                None
            }
            Err(e) => return Err(e),
        }
    } else {
        None
    };

    // Attached before the target is forked: the BPF pid set then follows it.
    let driver = if a.driver {
        crate::driver::start_for_record(&raw)?
    } else {
        None
    };

    let mut env: Vec<(OsString, OsString)> = Vec::new();
    if let Some(lib) = &inject {
        if let Some(old) = std::env::var_os(rec_env::INJECTION_PATH) {
            warn!(
                "{} was `{}`; gpuperf replaces it",
                rec_env::INJECTION_PATH,
                old.to_string_lossy()
            );
        }
        let mut asked = rec_env::Injection::new(lib.clone(), raw.clone());
        // The user's own setting wins (e.g. both kinds of stacks, to compare them).
        if std::env::var_os(rec_env::STACKS).is_none() {
            asked.stacks = Some(in_process);
        }
        if let Some(c) = &a.cupti {
            let c = std::path::absolute(c)
                .with_context(|| format!("failed to resolve `{}`", c.display()))?;
            asked.cupti = Some(c);
        }
        // Each CUDA process waits in cuInit until its libraries are probed, so
        // even its first launch has its stack taken at the API entry.
        if let Some(p) = &profiler
            && a.uprobe.is_empty()
        {
            match sync::serve(scratch.path(), p.discoverer()) {
                Ok(sock) => asked.sync = Some(sock),
                Err(e) => warn!("{e:#}; the first launches of each process may lack full stacks"),
            }
        }
        asked.capture_range.clone_from(&a.capture_range);
        // Whole milliseconds, at least 1: a delay asked for is never none.
        asked.delay_ms = a.delay.map(|s| ((s * 1000.0).round() as u64).max(1));
        asked.nvtx = !a.no_nvtx;
        asked.pc_sampling = a.pc_sampling.map(|p| p.0);
        asked.pc_mode = a.pc_sampling_mode.unwrap_or_default();
        asked.pc_window = a.pc_sampling_window;
        asked.pc_budget = a.pc_sampling_budget;
        if asked.nvtx_hook()
            && let Some(old) = std::env::var_os(rec_env::NVTX_INJECTION_PATH)
        {
            warn!(
                "{} was `{}`; gpuperf replaces it to record NVTX ranges (--no-nvtx leaves it)",
                rec_env::NVTX_INJECTION_PATH,
                old.to_string_lossy()
            );
        }
        env = asked.vars();
    }
    // CPython 3.12+ then writes /tmp/perf-PID.map, which names Python
    // functions in the stacks; older interpreters ignore it.
    if profiler.is_some() && std::env::var_os("PYTHONPERFSUPPORT").is_none() {
        env.push(("PYTHONPERFSUPPORT".into(), "1".into()));
    }
    let spec = target::Spec {
        argv: a.program.clone(),
        env,
        user: user.clone(),
    };
    let started = Instant::now();
    let child = match target::spawn(&spec) {
        Ok(c) => c,
        Err(e) => {
            if let Some(p) = profiler {
                let _ = p.stop();
            }
            if let Some(d) = driver {
                let _ = d.finish();
            }
            let code = spawn_failure_code(&e);
            // `gpuperf flamegraph` is a program to run, not a typo'd command.
            let hint = if code == 127 && !a.program[0].as_encoded_bytes().contains(&b'/') {
                " (gpuperf's own commands are record, merge, report, diff and monitor)"
            } else {
                ""
            };
            eprintln!("gpuperf: error: {}{hint}", one_line(&e));
            return Ok(code);
        }
    };
    info!(
        "started `{}` as pid {}",
        a.program[0].to_string_lossy(),
        child.id()
    );

    let status = wait(child, &signals, profiler.as_ref(), &raw, &a, quiet, started)?;
    let code = target::exit_code(status);
    signals.phase.store(FINISHING, Ordering::Release);
    let wall = started.elapsed();
    let driver_line = match driver.map(crate::driver::ForRecord::finish) {
        Some(Ok(line)) => line,
        Some(Err(e)) => {
            eprintln!("gpuperf: error: {}", one_line(&e));
            String::new()
        }
        None => String::new(),
    };

    if let Err(e) =
        finish(&a, driver_line, profiler, &raw, &cpu_path, wall, status).and_then(|done| {
            for w in &done.written {
                target::chown(&w.path, user.as_ref())?;
            }
            if !quiet {
                eprint!("{done}");
            }
            Ok(())
        })
    {
        eprintln!("gpuperf: error: {}", one_line(&e));
        // Nothing recorded may be lost: keep the raw recording, and say how to
        // make the outputs from it.
        if a.raw_dir.is_none() {
            let kept = scratch.keep();
            let raw = kept.join("raw");
            eprintln!(
                "gpuperf: the recording is kept in `{}`; make the outputs with `gpuperf merge {} -o flamegraph.svg`",
                raw.display(),
                raw.display()
            );
        }
    }
    if a.raw_dir.is_some() {
        // The user's files, like the outputs.
        for entry in fs::read_dir(&raw).into_iter().flatten().flatten() {
            let _ = target::chown(&entry.path(), user.as_ref());
        }
    }
    Ok(code)
}

/// Fails with one line naming the first output that cannot be written.
fn check_outputs(a: &RecordArgs) -> Result<()> {
    let outputs = [
        Some(&a.output),
        a.folded.as_ref().filter(|p| p.as_os_str() != "-"),
        a.cpu_trace.as_ref(),
    ];
    for path in outputs.into_iter().flatten().chain(a.files.files()) {
        if let Err(e) = recording::check_writable(path) {
            bail!(
                "cannot write `{}` ({e}); the program was not started",
                path.display()
            );
        }
    }
    Ok(())
}

fn one_line(e: &anyhow::Error) -> String {
    format!("{e:#}").replace('\n', "\\n")
}

/// Like a shell: 127 when the program is not found, 126 when it cannot run.
fn spawn_failure_code(e: &anyhow::Error) -> u8 {
    match e.downcast_ref::<io::Error>().map(io::Error::kind) {
        Some(io::ErrorKind::NotFound) => 127,
        _ => 126,
    }
}

fn geteuid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

fn start_profiler(
    a: &RecordArgs,
    exe: Option<&Path>,
    inject: Option<&Path>,
    cpu_path: &Path,
) -> Result<Profiler> {
    let mut o = Options {
        pids: vec![std::process::id()],
        uprobes: a.uprobe.clone(),
        ..Options::default()
    };
    if o.uprobes.is_empty() {
        match inject {
            Some(lib) => {
                o.marker_libraries = vec![lib.to_path_buf()];
                // cudart linked into the executable gets its entry probes
                // before the first launch; shared libraries are found when
                // the process first reaches the marker.
                if let Some(exe) = exe.filter(|e| has_cuda_api(e)) {
                    o.api_files = vec![exe.to_path_buf()];
                }
            }
            None => o.uprobes = default_uprobes(a, exe)?,
        }
    }
    let file = fs::File::create(cpu_path)
        .with_context(|| format!("failed to create `{}`", cpu_path.display()))?;
    let out = io::BufWriter::with_capacity(1 << 20, file);
    Profiler::start(o, out).context("failed to start the eBPF profiler")
}

fn has_cuda_api(exe: &Path) -> bool {
    match gpuperf_profiler::api_functions(exe) {
        Ok(f) => !f.is_empty(),
        Err(e) => {
            debug!("not probing `{}` itself: {e}", exe.display());
            false
        }
    }
}

/// `--cpu-only` without `--uprobe`: the launch functions of a cudart linked
/// into the executable, else a request for `--uprobe`.
fn default_uprobes(a: &RecordArgs, exe: Option<&Path>) -> Result<Vec<ProbeSpec>> {
    let fns = exe
        .map(gpuperf_profiler::api_functions)
        .transpose()
        .ok()
        .flatten()
        .unwrap_or_default();
    let specs: Vec<ProbeSpec> = fns
        .iter()
        .filter(|f| gpuperf_merge::model::is_launch_api(&f.symbol))
        .map(|f| ProbeSpec {
            path: f.path.clone(),
            symbol: f.symbol.clone(),
        })
        .collect();
    if specs.is_empty() {
        bail!(
            "--cpu-only needs --uprobe LIB:SYMBOL: `{}` has no CUDA runtime linked in; name the \
             library that launches, e.g. --uprobe /usr/local/cuda/lib64/libcudart.so.13:cudaLaunchKernel",
            a.program[0].to_string_lossy()
        );
    }
    Ok(specs)
}

/// Signals for the whole run, on a thread of their own.
struct Signals {
    rx: mpsc::Receiver<Origin>,
    phase: Arc<AtomicU8>,
}

impl Signals {
    fn start() -> Result<Self> {
        let mut info = SignalsInfo::<WithOrigin>::new([SIGINT, SIGTERM, SIGHUP, SIGCHLD])
            .context("failed to install signal handlers")?;
        let (tx, rx) = mpsc::channel();
        let phase = Arc::new(AtomicU8::new(RUNNING));
        let p = Arc::clone(&phase);
        thread::Builder::new()
            .name("gpuperf-signals".into())
            .spawn(move || {
                let mut finishing_signals = 0;
                for origin in info.forever() {
                    if origin.signal != SIGCHLD && p.load(Ordering::Acquire) == FINISHING {
                        finishing_signals += 1;
                        if finishing_signals == 1 {
                            eprintln!(
                                "\ngpuperf: writing the outputs; interrupt again to abandon them"
                            );
                        } else {
                            std::process::exit(128 + origin.signal);
                        }
                    }
                    if tx.send(origin).is_err() {
                        break;
                    }
                }
            })
            .context("failed to start the signal thread")?;
        Ok(Self { rx, phase })
    }
}

/// Waits for the target, forwarding signals and showing progress.
fn wait(
    mut child: Child,
    signals: &Signals,
    profiler: Option<&Profiler>,
    raw: &Path,
    a: &RecordArgs,
    quiet: bool,
    started: Instant,
) -> Result<std::process::ExitStatus> {
    let pid = child.id() as libc::pid_t;
    let deadline = a.duration.map(|s| started + Duration::from_secs_f64(s));
    let mut stops = 0u32;
    let mut progress = Progress::new(quiet);
    loop {
        if let Some(status) = child.try_wait().context("failed to wait for the target")? {
            progress.clear();
            return Ok(status);
        }
        match signals.rx.recv_timeout(TICK) {
            Ok(origin) if origin.signal == SIGCHLD => {}
            Ok(origin) => {
                stops += 1;
                progress.clear();
                // A Ctrl-C at the terminal reached the whole foreground process
                // group, the target included; a signal sent to gpuperf alone
                // is passed on.
                let from_terminal = matches!(origin.cause, Cause::Kernel);
                if stops == 1 {
                    if !quiet {
                        eprintln!(
                            "gpuperf: stopping the target; the outputs will still be written"
                        );
                    }
                    if !from_terminal {
                        send(pid, origin.signal);
                    }
                } else {
                    if !quiet {
                        eprintln!("gpuperf: killing the target");
                    }
                    send(pid, libc::SIGKILL);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => bail!("the signal thread ended"),
        }
        if let Some(d) = deadline
            && Instant::now() >= d
            && stops == 0
        {
            stops = 1;
            progress.clear();
            if !quiet {
                eprintln!("gpuperf: --duration reached; stopping the target (SIGINT)");
            }
            send(pid, SIGINT);
        }
        progress.tick(started, profiler, raw);
    }
}

/// Signals the target, which has not been reaped yet: `child.try_wait` runs on
/// this thread only, so the pid cannot have been reused.
fn send(pid: libc::pid_t, signal: i32) {
    // SAFETY: kill has no memory preconditions; the pid is our unreaped child.
    let rc = unsafe { libc::kill(pid, signal) };
    if rc != 0 {
        debug!("kill({pid}, {signal}): {}", io::Error::last_os_error());
    }
}

/// The progress line on stderr: elapsed time, launches, drops.
struct Progress {
    tty: bool,
    enabled: bool,
    last: Option<Instant>,
    shown: bool,
}

impl Progress {
    fn new(quiet: bool) -> Self {
        Self {
            tty: io::stderr().is_terminal(),
            enabled: !quiet,
            last: None,
            shown: false,
        }
    }

    fn tick(&mut self, started: Instant, profiler: Option<&Profiler>, raw: &Path) {
        let now = Instant::now();
        let every = if self.tty {
            Duration::from_secs(1)
        } else {
            Duration::from_secs(10)
        };
        let elapsed = now - started;
        // Short runs show nothing.
        if !self.enabled || elapsed < Duration::from_secs(2) {
            return;
        }
        if self.last.is_some_and(|l| now - l < every) {
            return;
        }
        self.last = Some(now);
        let mut line = format!("gpuperf: {:.0} s", elapsed.as_secs_f64());
        if let Some(p) = profiler {
            let launches = p.progress().launches.load(Ordering::Relaxed);
            let dropped = p.progress().dropped.load(Ordering::Relaxed);
            line += &format!(", {launches} launches, {dropped} dropped");
        } else {
            line += &format!(
                ", {} of GPU trace",
                human_bytes(recording::gpu_trace_bytes(raw))
            );
        }
        if self.tty {
            eprint!("\r{line}\x1b[K");
            self.shown = true;
        } else {
            eprintln!("{line}");
        }
    }

    fn clear(&mut self) {
        if self.shown {
            eprint!("\r\x1b[K");
            self.shown = false;
        }
    }
}

fn human_bytes(n: u64) -> String {
    match n {
        0..1024 => format!("{n} B"),
        1024..1_048_576 => format!("{:.1} KiB", n as f64 / 1024.0),
        _ => format!("{:.1} MiB", n as f64 / 1_048_576.0),
    }
}

/// Stops the profiler, then reads, joins and writes the recording.
fn finish(
    a: &RecordArgs,
    driver: String,
    profiler: Option<Profiler>,
    raw: &Path,
    cpu_path: &Path,
    wall: Duration,
    status: std::process::ExitStatus,
) -> Result<Finished> {
    let cpu_stats = profiler
        .map(|p| p.stop().context("the eBPF profiler failed"))
        .transpose()?;
    let mut outs = Outputs::default();
    outs.folded.clone_from(&a.folded);
    outs.svg = Some(a.output.clone());
    a.files.fill(&mut outs);
    outs.title.clone_from(&a.title);
    outs.subtitle = Some(recording::command_line(&a.program));
    outs.origin = recording::origin_from_env(&|v| std::env::var_os(v));
    let program = a.program[0].to_string_lossy().into_owned();
    let mut f = Finish::new(raw.to_path_buf(), outs, program, status, wall);
    f.cpu = cpu_stats.is_some().then(|| cpu_path.to_path_buf());
    f.cpu_stats = cpu_stats.map(|s| s.to_string());
    f.view = a.view.view();
    f.gpu_only = a.gpu_only;
    f.cpu_only = a.cpu_only;
    f.keep = a.raw_dir.is_some();
    f.cpu_trace.clone_from(&a.cpu_trace);
    f.top = a.top;
    f.driver = driver;
    Ok(f.run(Symbolizer::new, &mut io::stdout().lock())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_well() {
        assert_eq!(human_bytes(10), "10 B");
        assert_eq!(human_bytes(2048), "2.0 KiB");
        assert_eq!(human_bytes(3 << 20), "3.0 MiB");
    }
}
