//! Reader for the reference tooling's CUPTI text log: the activity records that
//! NVIDIA's CUPTI sample printer (`helper_cupti_activity.h`, `PrintActivity`)
//! writes, one record per header line plus indented continuation lines.
//!
//! # Format
//!
//! ```text
//! RUNTIME [ 1761183645346161185, 1761183645346437073 ] duration 275888, "cudaLaunchKernel_v7000", cbid 211, processId 2384094, threadId 2830733312, correlationId 166
//! CONCURRENT_KERNEL [ 1761183645346438172, 1761183645346759804 ] duration 321632, "_Z12attentionQKTPfS_S_iii", correlationId 166, cacheConfigRequested 0, cacheConfigExecuted 0
//! <TAB>grid [ 32, 32, 8 ], block [ 16, 16, 1 ], cluster [ 0, 0, 0 ], sharedMemory (static 0, dynamic 0)
//! <TAB>deviceId 0, contextId 1, streamId 13, graphId 0, graphNodeId 0, channelId 1, channelType COMPUTE
//! MEMCPY "HtoD" [ 1761183645336312834, 1761183645336313570 ] duration 736, size 4096, copyCount 1, srcKind PAGEABLE, dstKind DEVICE, correlationId 132
//! <TAB>deviceId 0, contextId 1, streamId 7, graphId 0, graphNodeId 0, channelId 0, channelType COMPUTE
//! MEMSET [ 3000, 3100 ] duration 100, value 255, size 4096, correlationId 4
//! <TAB>deviceId 0, contextId 1, streamId 7, graphId 0, graphNodeId 0, channelId 0, channelType COMPUTE
//! SYNCHRONIZATION [ 5000, 5200 ] duration 200, type STREAM_SYNCHRONIZE, contextId 1, streamId 13, correlationId 8, eventId -1, cudaEventSyncId 0
//! OVERHEAD LAZY_FUNCTION_LOADING [ 1761183645346438502, 1761183645346448118 ] duration 9616, THREAD, id 2830733312, correlation id 167
//! MEMORY2 [ 1761183645310290248 ] memoryOperationType ALLOCATE, memoryKind DEVICE, size 4, address 131367933313024, pc 0,
//!   deviceId 0, contextId 1, streamId 4294967295, processId 2384094, correlationId 119, isAsync 0,
//!   memoryPool INVALID, memoryPoolAddress 0,  memoryPoolThreshold 0
//!   source (null)
//! <empty line>
//! ```
//!
//! A header line is `KIND [prefix] [ start, end ] items`: the prefix is the copy
//! direction for `MEMCPY` (`"HtoD"`) and the overhead kind for `OVERHEAD`. Items are
//! comma-separated at bracket and parenthesis depth 0, so `grid [ 32, 32, 8 ]` and
//! `sharedMemory (static 0, dynamic 0)` are single items; each is `key value`,
//! except the quoted API or kernel name, which is taken whole even when it holds
//! commas, spaces and quotes (a demangled name): it ends at the last `"` on the line
//! that is followed by a comma or the end of the line. Continuation lines start with a tab
//! (kernels, copies, memsets) or two spaces (`MEMORY2`). Timestamps are epoch
//! nanoseconds (`CLOCK_REALTIME`, CUPTI's default clock). Activity records usually
//! come before the API record that caused them: the printer writes CUPTI's buffer
//! order, not time order.
//!
//! # What is read
//!
//! | kind | becomes |
//! |---|---|
//! | `RUNTIME`, `DRIVER` | [`Record::Api`], name without its `_v7000` suffix ([`api_base_name`]) |
//! | `CONCURRENT_KERNEL`, `KERNEL` | [`ActivityKind::Kernel`], mangled name as printed |
//! | `MEMCPY`, `MEMCPY2` | [`ActivityKind::Memcpy`] |
//! | `MEMSET` | [`ActivityKind::Memset`] |
//! | `SYNCHRONIZATION` | [`ActivityKind::Sync`], `type` mapped to CUPTI's numbering |
//! | `OVERHEAD` | [`Record::Overhead`] |
//! | `MEMORY2`, `MEMORY`, `DEVICE`, `CONTEXT`, `NAME`, `MARKER`, ... | skipped, counted in [`CuptiLog::skipped_kinds`] |
//!
//! Things the log does not say, and what this reader does about them:
//!
//! - Activity records carry no process id. Every activity and overhead record gets
//!   the `processId` of the first API record in the file (0 if there is none); the
//!   reference tooling writes one log per process.
//! - `threadId` is CUPTI's `threadId`, a truncated `pthread_self()`, not a Linux
//!   TID. It is printed as an unsigned number that may exceed `u32` in other
//!   printers; only its low 32 bits are kept in [`ApiCall::tid`].
//! - Ids that the printer writes with `%d` (a synchronization's `streamId`) can be
//!   `-1`; negative values are read as their `u32` bit pattern (`u32::MAX`).
//! - A record whose continuation lines are missing (a file cut off mid-record) is
//!   still emitted, with the missing fields 0, and counted as a diagnostic.
//!
//! The reference injection library also writes its own lines to the same stdout
//! (`Calling CUPTI API: cuptiSubscribe(...)`, `Enabling CUPTI_ACTIVITY_KIND_MEMCPY.`,
//! `Found 2 devices`), so saved logs hold such lines before, between and after the
//! records. A line that is neither a record header (`KIND [ … ]`) nor a continuation
//! is one of those: it is skipped and counted in [`CuptiLog::other_lines`], and it
//! does not end the record before it.
//!
//! Every malformed line is counted in [`CuptiLog::diagnostics`] with its place
//! (`path:line`, 1-based) and parsing goes on. A line is counted at most once, plus
//! once more if it starts a record whose continuation lines never came. Invalid UTF-8
//! is read lossily and CRLF line ends are accepted.

//! # Modules
//!
//! - `kinds`: which record kinds the printer writes and how each header is read.
//! - `items`: one line's parts: the header's `[ start, end ]` and the `key value` items.
//! - `parser`: the line-by-line state machine: open record, continuation lines, diagnostics.
//! - `record`: a header line turned into the model's record (API call, activity, overhead).
//!
//! [`api_base_name`]: crate::model::api_base_name
//! [`ActivityKind::Kernel`]: crate::model::ActivityKind::Kernel
//! [`ActivityKind::Memcpy`]: crate::model::ActivityKind::Memcpy
//! [`ActivityKind::Memset`]: crate::model::ActivityKind::Memset
//! [`ActivityKind::Sync`]: crate::model::ActivityKind::Sync
//! [`ApiCall::tid`]: crate::model::ApiCall::tid

mod items;
mod kinds;
mod parser;
mod record;
#[cfg(test)]
mod tests;

use std::path::Path;

use crate::diag::Diagnostics;
use crate::model::{Record, StringTable};

use self::kinds::kind_of;
use self::parser::{Open, Parser};

/// A parsed reference log: all records in file order, plus problems found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CuptiLog {
    /// API calls, GPU activities and CUPTI overhead, in file order.
    pub records: Vec<Record>,
    /// Malformed lines and records cut short, with the first few places.
    pub diagnostics: Diagnostics,
    /// Lines in the file, blank ones included.
    pub lines: u64,
    /// Records of kinds the printer knows but gpuperf does not use (`MEMORY2`,
    /// `DEVICE`, `MARKER`, ...), skipped with their continuation lines.
    pub skipped_kinds: u64,
    /// Lines that are not records: what the reference injection library itself
    /// prints (`Calling CUPTI API: …`, `Found 2 devices`), skipped.
    pub other_lines: u64,
}

/// Whether the start of a file looks like a reference CUPTI text log: one of its
/// lines, wherever it is, starts with a record kind that the CUPTI sample printer
/// writes, followed by a space. Lines that the reference tooling prints besides
/// the records may come first.
pub(crate) fn looks_like_cupti_log(head: &[u8]) -> bool {
    let head = head.strip_prefix(b"\xef\xbb\xbf").unwrap_or(head);
    head.split(|&b| b == b'\n').any(|line| {
        let Some(space) = line.iter().position(|&b| b == b' ') else {
            return false;
        };
        let word = &line[..space];
        let word = word.strip_suffix(b":").unwrap_or(word);
        std::str::from_utf8(word).is_ok_and(|w| kind_of(w).is_some())
    })
}

/// Whether a line that starts with an unknown word still has a record header's
/// shape, `WORD [ …`: then it is a record of a kind this reader does not know,
/// not a line of the tool's own output.
fn is_record_shaped(word: &str, rest: &str) -> bool {
    !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        && rest.trim_start().starts_with('[')
}

/// Parses a whole log. `path` only names the file in diagnostics. Names are interned
/// into `strings`.
///
/// Never fails: malformed lines are counted in [`CuptiLog::diagnostics`] and skipped.
pub fn parse(text: &[u8], path: &Path, strings: &mut StringTable) -> CuptiLog {
    let mut p = Parser {
        path,
        strings,
        log: CuptiLog::default(),
        open: Open::Nothing,
        trailer: &[],
        first_pid: None,
        api_without_pid: Vec::new(),
    };
    let body = text.strip_suffix(b"\n").unwrap_or(text);
    if !text.is_empty() {
        for raw in body.split(|&b| b == b'\n') {
            p.log.lines += 1;
            let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
            p.line(p.log.lines, &String::from_utf8_lossy(raw));
        }
    }
    p.finish()
}
