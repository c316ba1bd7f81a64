//! The library's files (the trace, the log), written by a thread of their own.
//!
//! A write to a file system that stopped answering (a hung NFS mount) blocks
//! in the kernel for as long as it does. Made by the thread that asked for
//! it, it would hold that thread there: the flush thread holding the sink's
//! lock, then CUPTI's worker inside its buffer callback, a CUDA call logging a
//! line, and the program's exit, which closes the trace. So the bytes are
//! buffered here, and each full buffer (or a flush) is handed to the file's
//! own thread and waited for only until that thread has been inside one
//! write for [`STALLED_NS`]. The file is then given up: that write and every
//! later one fail with a message saying why, which the trace's and the log's
//! callers count as they count a full disk's.

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::clock::monotonic_ns;
use crate::guard::lock;

/// How long one write may stay inside the kernel before its file is given up.
pub const STALLED_NS: u64 = 10_000_000_000;

/// A file whose writes never hold the caller past a stalled write.
pub struct OutFile {
    buf: Vec<u8>,
    /// The bytes gathered before they are handed over.
    capacity: usize,
    how: How,
    /// Why the file was given up; every write fails with it from then on.
    failed: Option<String>,
    /// [`STALLED_NS`], but in tests.
    stalled_ns: u64,
    /// The process that opened it: a forked child has no writing thread.
    pid: u32,
}

enum How {
    /// Written by the thread that owns `Shared`.
    Handed(Arc<Shared>),
    /// No thread could be started: written by the caller, unbounded.
    Direct(File),
}

/// What the caller and the writing thread share.
struct Shared {
    slot: Mutex<Slot>,
    cv: Condvar,
    /// CLOCK_MONOTONIC when the thread entered its write; 0 while idle.
    since: AtomicU64,
}

#[derive(Default)]
struct Slot {
    /// Bytes handed over, not yet taken by the thread.
    job: Option<Vec<u8>>,
    /// The thread's answer: the buffer back, emptied, or the write's error.
    done: Option<io::Result<Vec<u8>>>,
}

impl OutFile {
    /// Writes `file` (named `path` in messages) through a thread of its own,
    /// gathering `capacity` bytes a write.
    pub fn new(file: File, path: &Path, capacity: usize) -> Self {
        let shared = Arc::new(Shared {
            slot: Mutex::new(Slot::default()),
            cv: Condvar::new(),
            since: AtomicU64::new(0),
        });
        let theirs = Arc::clone(&shared);
        let name = format!("gpuperf-{}", kind(path));
        // The thread owns the file; where it cannot start, the caller does.
        let file = Arc::new(Mutex::new(Some(file)));
        let owned = Arc::clone(&file);
        let how = match crate::threads::spawn_blocked(&name, move || writing(&theirs, &owned)) {
            Ok(_) => How::Handed(shared),
            Err(_) => match lock(&file).take() {
                Some(f) => How::Direct(f),
                None => How::Handed(shared),
            },
        };
        Self {
            buf: Vec::new(),
            capacity,
            how,
            failed: None,
            stalled_ns: STALLED_NS,
            pid: std::process::id(),
        }
    }

    /// Writes what is gathered, and waits for it as [`OutFile`] says.
    fn hand(&mut self) -> io::Result<()> {
        if let Some(why) = &self.failed {
            return Err(io::Error::other(why.clone()));
        }
        if std::process::id() != self.pid {
            // A forked child: its parent's file, and no thread here to write it.
            self.buf.clear();
            return Err(io::Error::other("not written by a forked child"));
        }
        if self.buf.is_empty() {
            return Ok(());
        }
        let shared = match &mut self.how {
            How::Direct(f) => {
                let r = f.write_all(&self.buf);
                self.buf.clear();
                return r.inspect_err(|e| self.failed = Some(e.to_string()));
            }
            How::Handed(s) => Arc::clone(s),
        };
        let mut slot = lock(&shared.slot);
        slot.job = Some(std::mem::take(&mut self.buf));
        shared.cv.notify_all();
        loop {
            match slot.done.take() {
                Some(Ok(buf)) => {
                    self.buf = buf;
                    return Ok(());
                }
                Some(Err(e)) => {
                    self.failed = Some(e.to_string());
                    return Err(e);
                }
                None => {}
            }
            let since = shared.since.load(Relaxed);
            if since != 0 && monotonic_ns().saturating_sub(since) >= self.stalled_ns {
                let why = format!(
                    "a write to the file had not returned after {} s (a file system that \
                     stopped answering): the file was given up",
                    self.stalled_ns as f64 / 1e9
                );
                self.failed = Some(why.clone());
                return Err(io::Error::other(why));
            }
            slot = shared
                .cv
                .wait_timeout(slot, Duration::from_millis(10))
                .map_or_else(|e| e.into_inner().0, |r| r.0);
        }
    }
}

impl Write for OutFile {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        if let Some(why) = &self.failed {
            return Err(io::Error::other(why.clone()));
        }
        if !self.buf.is_empty() && self.buf.len() + bytes.len() > self.capacity {
            self.hand()?;
        }
        if self.buf.capacity() == 0 {
            self.buf.reserve(self.capacity.max(bytes.len()));
        }
        // Whole: a trace record is one call, so the file never holds half of
        // one however the writes end.
        self.buf.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.hand()
    }
}

/// The writing thread: takes each buffer handed over, writes it, and hands
/// it back emptied (or the error).
fn writing(shared: &Shared, file: &Mutex<Option<File>>) {
    // As on the flush thread: a CUDA call from the program's allocator here
    // returns at once.
    let _inside = crate::guard::Inside::enter();
    let Some(mut file) = lock(file).take() else {
        return;
    };
    loop {
        let mut job = {
            let mut slot = lock(&shared.slot);
            loop {
                if let Some(job) = slot.job.take() {
                    break job;
                }
                slot = shared.cv.wait(slot).unwrap_or_else(|e| e.into_inner());
            }
        };
        shared.since.store(monotonic_ns().max(1), Relaxed);
        let r = file.write_all(&job);
        shared.since.store(0, Relaxed);
        job.clear();
        lock(&shared.slot).done = Some(r.map(|()| job));
        shared.cv.notify_all();
    }
}

/// "trace" or "log", for the thread's name.
fn kind(path: &Path) -> &'static str {
    match path.extension() {
        Some(e) if e == "log" => "log",
        _ => "trace",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::OpenOptionsExt as _;

    fn temp(name: &str) -> (std::path::PathBuf, File) {
        let dir = std::env::temp_dir().join(format!("gpuperf-outfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        let f = File::create(&p).unwrap();
        (p, f)
    }

    #[test]
    fn bytes_reach_the_file_in_order_at_each_flush_and_each_full_buffer() {
        let (p, f) = temp("order.gputrace");
        let mut out = OutFile::new(f, &p, 16);
        out.write_all(b"0123456789").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"", "written before a flush");
        // Past the capacity: the first ten bytes go, these wait.
        out.write_all(b"abcdefghij").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"0123456789");
        out.flush().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"0123456789abcdefghij");
        // A write larger than the capacity is kept whole.
        out.write_all(&[b'x'; 40]).unwrap();
        out.flush().unwrap();
        assert_eq!(std::fs::read(&p).unwrap().len(), 60);
    }

    #[test]
    fn a_write_error_fails_that_flush_and_every_later_write_with_its_message() {
        let (p, _) = temp("full.gputrace");
        // /dev/full: every write fails with ENOSPC, as on a full disk.
        let f = File::options().write(true).open("/dev/full").unwrap();
        let mut out = OutFile::new(f, &p, 1024);
        out.write_all(b"record").unwrap();
        let e = out.flush().unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
        let again = out.write_all(b"more").unwrap_err();
        assert_eq!(again.to_string(), e.to_string());
    }

    /// A FIFO that nobody reads takes 64 KiB, then its write blocks, as a
    /// write to a file system that stopped answering does. The flush gives
    /// the file up once that write has stalled for the bound (here 200 ms),
    /// and so does every later write, at once.
    #[test]
    fn a_stalled_write_gives_the_file_up_and_the_caller_goes_on() {
        let dir = std::env::temp_dir().join(format!("gpuperf-outfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("stalled.gputrace");
        let _ = std::fs::remove_file(&p);
        let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // A reader that never reads, so that opening for writing does not wait.
        let _reader = File::options()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&p)
            .unwrap();
        let f = File::options().write(true).open(&p).unwrap();
        let mut out = OutFile::new(f, &p, 1 << 20);
        out.stalled_ns = 200_000_000;
        out.write_all(&[0u8; 256 << 10]).unwrap();
        let e = out.flush().unwrap_err();
        assert!(
            e.to_string()
                .starts_with("a write to the file had not returned after 0.2 s"),
            "{e}"
        );
        let again = out.write_all(b"more").unwrap_err();
        assert_eq!(again.to_string(), e.to_string());
        std::fs::remove_file(&p).unwrap();
    }
}
