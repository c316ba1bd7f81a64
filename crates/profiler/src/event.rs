//! Records from the BPF ring buffer, decoded from bytes. The layouts are those
//! of `src/bpf/launch.h`; every read is bounds-checked, so a short or unknown
//! record is reported, never misread.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// `enum event_kind` in launch.h.
const EVENT_LAUNCH: u32 = 1;
const EVENT_STACK: u32 = 2;
const EVENT_EXEC: u32 = 3;
const EVENT_FILE: u32 = 4;
const EVENT_COPY: u32 = 5;
/// `offsetof(struct copy_event, bytes)`.
const COPY_BYTES_AT: usize = 64;
/// `COPY_BYTES`.
pub(crate) const COPY_BYTES: usize = 16 << 10;
/// `offsetof(struct file_event, path)`.
const FILE_PATH_AT: usize = 56;
/// `enum file_place`.
const PLACE_MAPPING: u32 = 1;
const PLACE_EXEC: u32 = 2;

/// `sizeof(struct launch_event)`.
pub(crate) const LAUNCH_SIZE: usize = 64;
/// `sizeof(struct bpf_stack_build_id)`.
const FRAME_SIZE: usize = 32;
/// `MAX_STACK_DEPTH`.
pub(crate) const MAX_STACK_DEPTH: usize = 127;
/// `INLINE_STACK_ID_BASE`: ids of stacks sent once, for one launch.
pub(crate) const INLINE_STACK_ID_BASE: i32 = 0x4000_0000;
/// `COPY_ID_BASE`: ids of stack copies, one per copy.
pub(crate) const COPY_ID_BASE: i32 = 0x2000_0000;
/// `FULL_ID_BASE`: ids of stacks unwound in user space.
pub(crate) const FULL_ID_BASE: i32 = 0x3000_0000;

/// `enum stack_origin`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Taken at the launch API's entry.
    Entry,
    /// Taken at the marker, inside the CUPTI callback.
    Marker,
}

/// One launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    pub pid: u32,
    pub tid: u32,
    pub cpu: u32,
    pub ts: u64,
    pub correlation_id: u64,
    pub callback: u64,
    pub stack_id: i32,
    pub origin: Origin,
    pub comm: String,
}

/// One frame as the kernel gave it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Frame {
    /// Build id and file offset.
    BuildId { build_id: Vec<u8>, offset: u64 },
    /// A raw address (anonymous memory, or the build id was unreadable).
    Ip(u64),
}

/// The frames of a stack id, leaf first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stack {
    pub stack_id: i32,
    pub pid: u32,
    pub frames: Vec<Frame>,
}

/// The top of a user stack and the registers at a probe (`struct copy_event`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Copy {
    pub copy_id: i32,
    pub pid: u32,
    pub tid: u32,
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    /// The frame-pointer stack taken at the same probe, or negative.
    pub fp_id: i32,
    /// Whether that walk read the caller at `[sp]` first.
    pub caller_at_sp: bool,
    /// Where that walk went (`walk_hash` in launch.h).
    pub walk_hash: u64,
    /// The stack from `sp` up.
    pub bytes: Vec<u8>,
}

/// A traced process called execve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exec {
    pub pid: u32,
    pub filename: String,
}

/// A traced process exec'd or mapped a file as code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileMapped {
    pub pid: u32,
    pub path: PathBuf,
    pub place: Place,
    /// Which file it is: a file found by `path` is this one only if it has
    /// the same inode number and size.
    pub identity: FileIdentity,
}

/// The inode number and size of a mapped file, as the kernel has them.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct FileIdentity {
    pub ino: u64,
    pub size: u64,
}

/// Where a mapped file sits in its process.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Place {
    /// Mapped at `start..end` from file offset `offset`.
    Mapping { start: u64, end: u64, offset: u64 },
    /// The executable; its lowest executable segment starts at `start_code`.
    Exec { start_code: u64 },
    /// Unknown.
    Unknown,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    Launch(Launch),
    Stack(Stack),
    Exec(Exec),
    File(FileMapped),
    Copy(Copy),
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

fn c_string(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// `BPF_STACK_BUILD_ID_VALID` / `_IP`.
const BUILD_ID_VALID: u32 = 1;
const BUILD_ID_IP: u32 = 2;
/// launch.h's `FRAME_CALLER_AT_SP`.
const CALLER_AT_SP: u32 = 0x100;

impl Event {
    /// Decodes one ring-buffer record; `None` when it is short or unknown.
    pub fn parse(b: &[u8]) -> Option<Self> {
        match u32_at(b, 0)? {
            EVENT_LAUNCH if b.len() >= LAUNCH_SIZE => Some(Self::Launch(Launch {
                pid: u32_at(b, 4)?,
                tid: u32_at(b, 8)?,
                cpu: u32_at(b, 12)?,
                ts: u64_at(b, 16)?,
                correlation_id: u64_at(b, 24)?,
                callback: u64_at(b, 32)?,
                stack_id: u32_at(b, 40)? as i32,
                origin: if u32_at(b, 44)? == 2 {
                    Origin::Marker
                } else {
                    Origin::Entry
                },
                comm: c_string(&b[48..64]),
            })),
            EVENT_STACK => {
                let size = u32_at(b, 12)? as usize;
                let n = (size / FRAME_SIZE).min(MAX_STACK_DEPTH);
                let mut frames = Vec::with_capacity(n);
                for i in 0..n {
                    let f = b.get(16 + i * FRAME_SIZE..16 + (i + 1) * FRAME_SIZE)?;
                    let addr = u64_at(f, 24)?;
                    match u32_at(f, 0)? {
                        BUILD_ID_VALID => frames.push(Frame::BuildId {
                            build_id: f[4..24].to_vec(),
                            offset: addr,
                        }),
                        BUILD_ID_IP => frames.push(Frame::Ip(addr)),
                        _ => {} // empty slot
                    }
                }
                // The caller a kernel's walk left out, in the last slot.
                let last = 16 + (MAX_STACK_DEPTH - 1) * FRAME_SIZE;
                if n < MAX_STACK_DEPTH
                    && !frames.is_empty()
                    && let Some(f) = b.get(last..last + FRAME_SIZE)
                    && u32_at(f, 0)? == CALLER_AT_SP
                {
                    frames.insert(1, Frame::Ip(u64_at(f, 24)?));
                }
                Some(Self::Stack(Stack {
                    stack_id: u32_at(b, 4)? as i32,
                    pid: u32_at(b, 8)?,
                    frames,
                }))
            }
            EVENT_EXEC if b.len() > 8 => Some(Self::Exec(Exec {
                pid: u32_at(b, 4)?,
                filename: c_string(&b[8..]),
            })),
            EVENT_COPY => {
                let len = u32_at(b, 44)? as usize;
                if len > COPY_BYTES {
                    return None;
                }
                let bytes = b.get(COPY_BYTES_AT..COPY_BYTES_AT + len)?.to_vec();
                Some(Self::Copy(Copy {
                    copy_id: u32_at(b, 4)? as i32,
                    pid: u32_at(b, 8)?,
                    tid: u32_at(b, 12)?,
                    ip: u64_at(b, 16)?,
                    sp: u64_at(b, 24)?,
                    bp: u64_at(b, 32)?,
                    fp_id: u32_at(b, 40)? as i32,
                    caller_at_sp: u32_at(b, 48)? != 0,
                    walk_hash: u64_at(b, 56)?,
                    bytes,
                }))
            }
            EVENT_FILE => {
                let len = u32_at(b, 8)? as usize;
                let path = b.get(FILE_PATH_AT..FILE_PATH_AT.checked_add(len)?)?;
                // d_path's length counts the closing NUL.
                let path = path.strip_suffix(&[0]).unwrap_or(path);
                if path.is_empty() || path.contains(&0) {
                    return None;
                }
                let (start, end, offset) = (u64_at(b, 16)?, u64_at(b, 24)?, u64_at(b, 32)?);
                let place = match u32_at(b, 12)? {
                    PLACE_MAPPING if start < end => Place::Mapping { start, end, offset },
                    PLACE_EXEC if start != 0 => Place::Exec { start_code: start },
                    _ => Place::Unknown,
                };
                Some(Self::File(FileMapped {
                    pid: u32_at(b, 4)?,
                    path: PathBuf::from(OsStr::from_bytes(path)),
                    place,
                    identity: FileIdentity {
                        ino: u64_at(b, 40)?,
                        size: u64_at(b, 48)?,
                    },
                }))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch_bytes() -> Vec<u8> {
        let mut b = Vec::new();
        for v in [EVENT_LAUNCH, 10, 11, 3] {
            b.extend(v.to_ne_bytes());
        }
        for v in [123_u64, 77, (2 << 32) | 211] {
            b.extend(v.to_ne_bytes());
        }
        b.extend(5_i32.to_ne_bytes());
        b.extend(2_u32.to_ne_bytes());
        let mut comm = [0u8; 16];
        comm[..4].copy_from_slice(b"app\0");
        b.extend(comm);
        b
    }

    #[test]
    fn launch_round_trip() {
        let b = launch_bytes();
        assert_eq!(b.len(), LAUNCH_SIZE);
        let Some(Event::Launch(l)) = Event::parse(&b) else {
            panic!()
        };
        assert_eq!(
            (l.pid, l.tid, l.cpu, l.ts, l.correlation_id),
            (10, 11, 3, 123, 77)
        );
        assert_eq!(l.callback, (2 << 32) | 211);
        assert_eq!(
            (l.stack_id, l.origin, l.comm.as_str()),
            (5, Origin::Marker, "app")
        );
        assert_eq!(Event::parse(&b[..40]), None, "short record");
        assert_eq!(Event::parse(&[9, 0, 0, 0]), None, "unknown kind");
        assert_eq!(Event::parse(&[]), None);
    }

    #[test]
    fn stack_frames_keep_build_ids_and_ips() {
        let mut b = Vec::new();
        for v in [EVENT_STACK, 4, 10, 3 * FRAME_SIZE as u32] {
            b.extend(v.to_ne_bytes());
        }
        let frame = |status: u32, id: u8, addr: u64| {
            let mut f = status.to_ne_bytes().to_vec();
            f.extend([id; 20]);
            f.extend(addr.to_ne_bytes());
            f
        };
        b.extend(frame(BUILD_ID_VALID, 0xab, 0x1234));
        b.extend(frame(BUILD_ID_IP, 0, 0x7f00_0000_1000));
        b.extend(frame(0, 0, 0));
        let Some(Event::Stack(s)) = Event::parse(&b) else {
            panic!()
        };
        assert_eq!(s.stack_id, 4);
        assert_eq!(
            s.frames,
            vec![
                Frame::BuildId {
                    build_id: vec![0xab; 20],
                    offset: 0x1234
                },
                Frame::Ip(0x7f00_0000_1000),
            ]
        );
        // A caller the kernel's walk left out, in the last slot of a whole
        // record, goes second; the slot of a full stack is a frame.
        let mut whole = b.clone();
        whole.resize(16 + (MAX_STACK_DEPTH - 1) * FRAME_SIZE, 0);
        whole.extend(frame(CALLER_AT_SP, 0, 0x5000));
        whole[12..16].copy_from_slice(&(2 * FRAME_SIZE as u32).to_ne_bytes());
        let Some(Event::Stack(r)) = Event::parse(&whole) else {
            panic!()
        };
        assert_eq!(r.frames.len(), 3, "{:?}", r.frames);
        assert_eq!(r.frames[1], Frame::Ip(0x5000), "{:?}", r.frames);
        let mut unmarked = whole.clone();
        let at = 16 + (MAX_STACK_DEPTH - 1) * FRAME_SIZE;
        unmarked[at..at + 4].copy_from_slice(&0u32.to_ne_bytes());
        let Some(Event::Stack(u)) = Event::parse(&unmarked) else {
            panic!()
        };
        assert_eq!(u.frames.len(), 2, "{:?}", u.frames);
        // A size beyond the record makes it unreadable.
        let mut short = b.clone();
        short[12..16].copy_from_slice(&(10 * FRAME_SIZE as u32).to_ne_bytes());
        assert_eq!(Event::parse(&short), None);
    }

    #[test]
    fn copies_carry_registers_and_exactly_len_bytes() {
        let mut b = Vec::new();
        for v in [EVENT_COPY, COPY_ID_BASE as u32 + 3, 10, 11] {
            b.extend(v.to_ne_bytes());
        }
        for v in [0x40_1000_u64, 0x7ffd_0000, 0x7ffd_0100] {
            b.extend(v.to_ne_bytes());
        }
        b.extend(7_i32.to_ne_bytes());
        b.extend(24_u32.to_ne_bytes());
        b.extend(1_u32.to_ne_bytes());
        b.extend(0_u32.to_ne_bytes());
        b.extend(0xabcd_u64.to_ne_bytes());
        assert_eq!(b.len(), COPY_BYTES_AT);
        b.extend((0..24).map(|i| i as u8));
        let Some(Event::Copy(c)) = Event::parse(&b) else {
            panic!()
        };
        assert_eq!((c.copy_id, c.pid, c.tid), (COPY_ID_BASE + 3, 10, 11));
        assert_eq!(
            (c.ip, c.sp, c.bp, c.fp_id),
            (0x40_1000, 0x7ffd_0000, 0x7ffd_0100, 7)
        );
        assert_eq!((c.caller_at_sp, c.walk_hash), (true, 0xabcd));
        assert_eq!(c.bytes, (0..24).map(|i| i as u8).collect::<Vec<_>>());
        assert_eq!(Event::parse(&b[..b.len() - 1]), None, "cut short");
        let mut huge = b.clone();
        huge[44..48].copy_from_slice(&(COPY_BYTES as u32 + 8).to_ne_bytes());
        assert_eq!(Event::parse(&huge), None, "longer than a copy can be");
    }

    #[test]
    fn file_mapped_keeps_the_path_bytes_and_the_place() {
        let path = b"/opt/app/bin/\xffapp\0";
        let mut b = Vec::new();
        for v in [EVENT_FILE, 42, path.len() as u32, PLACE_MAPPING] {
            b.extend(v.to_ne_bytes());
        }
        for v in [0x7f00_0000_1000_u64, 0x7f00_0000_3000, 0x1000, 77, 9000] {
            b.extend(v.to_ne_bytes());
        }
        b.extend(path);
        let Some(Event::File(f)) = Event::parse(&b) else {
            panic!()
        };
        assert_eq!(
            FILE_PATH_AT,
            std::mem::offset_of!(crate::skel::types::file_event, path)
        );
        assert_eq!(f.pid, 42);
        assert_eq!(
            f.identity,
            FileIdentity {
                ino: 77,
                size: 9000
            }
        );
        assert_eq!(f.path.as_os_str().as_bytes(), b"/opt/app/bin/\xffapp");
        assert_eq!(
            f.place,
            Place::Mapping {
                start: 0x7f00_0000_1000,
                end: 0x7f00_0000_3000,
                offset: 0x1000
            }
        );
        let mut exec = b.clone();
        exec[12..16].copy_from_slice(&PLACE_EXEC.to_ne_bytes());
        let Some(Event::File(f)) = Event::parse(&exec) else {
            panic!()
        };
        assert_eq!(
            f.place,
            Place::Exec {
                start_code: 0x7f00_0000_1000
            }
        );
        assert_eq!(Event::parse(&b[..b.len() - 1]), None, "cut short");
        let mut empty = b[..FILE_PATH_AT].to_vec();
        empty[8..12].copy_from_slice(&1u32.to_ne_bytes());
        empty.push(0);
        assert_eq!(Event::parse(&empty), None, "empty path");
    }
}
