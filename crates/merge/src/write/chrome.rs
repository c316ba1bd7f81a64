//! Chrome-trace JSON (the Trace Event Format) for Perfetto and chrome://tracing:
//! an encoder of the timeline model (`write/timeline/`, which says
//! what is drawn where).
//!
//! - Slices are `X` events, markers `i` events, flows `s`/`f` pairs (the `f`
//!   bound to the slice that encloses its timestamp); a flow to or from an
//!   async track, whose slices those events cannot bind to, is a `bind_id`
//!   on its two slices with `flow_out` and `flow_in` (Perfetto's flow v2). Metadata events name
//!   every process and thread and give their order; a recorder's note is a
//!   process label.
//! - On an async track (the driver's) slices are `b`/`e` pairs and markers
//!   `n` events, named by their track (Perfetto names an async track by its
//!   events), an id per lane of it, their own name in `args.event`.
//! - A launch's CPU stack is in `args.stack` of its API slice only; GPU work
//!   points at it by its flow (work charged to another stack, as a replayed
//!   graph node's, carries that stack itself).
//! - Events are written in the model's order (by time).
//! - Timestamps are µs relative to the earliest timestamp, written from integer
//!   ns with three decimals, so sub-µs precision survives (absolute epoch µs
//!   would not fit a double's precision). `otherData.time_base_ns` holds the base.

use std::io::Write;

use crate::error::{Error, Result};
use crate::model::Clock;
pub use crate::write::timeline::gpu_pid;
use crate::write::timeline::{Arg, Event, Step, Timeline};
use crate::write::timeline_writer::TimelineWriter;

/// Writes a Chrome trace of what the join streams; a [`Sink`](crate::join::Sink). The document is
/// written when the join finishes.
pub type Writer<W> = TimelineWriter<W, Json>;

/// What the errors call this output.
const WHAT: &str = "Chrome trace";

/// The Chrome trace's format, for [`TimelineWriter`].
#[derive(Debug)]
pub enum Json {}

impl<W: Write> TimelineWriter<W, Json> {
    /// Starts the JSON document.
    pub fn new(mut out: W) -> Result<Self> {
        out.write_all(b"{\"traceEvents\":[\n")
            .map_err(|source| Error::Write { what: WHAT, source })?;
        Ok(Self::with_encoder(out, WHAT, |t, out, _| encode(t, out)))
    }
}

/// Writes the events of `t` and closes the document.
fn encode<W: Write>(t: &Timeline, out: &mut W) -> std::io::Result<()> {
    let mut e = Encoder {
        t,
        out,
        first: true,
        stacks: t.stacks.iter().map(|s| json(s)).collect(),
    };
    e.metadata()?;
    for &step in &t.steps {
        match step {
            Step::Begin(i) | Step::Instant(i) => {
                let outs = t.flows_out.get(&i).map_or(&[][..], Vec::as_slice);
                let ins = t.flows_in.get(&i).map_or(&[][..], Vec::as_slice);
                e.event(&t.events[i], &bind(t, outs, ins))?;
                // Right after the slice: at one instant the reader binds a
                // flow's end to the slice that is open on top of its thread.
                for &f in outs.iter().filter(|&&f| !bound(t, f)) {
                    e.flow_end(f, true)?;
                }
                for &f in ins.iter().filter(|&&f| !bound(t, f)) {
                    e.flow_end(f, false)?;
                }
            }
            Step::End(i) => e.async_end(&t.events[i])?,
        }
    }
    let clock = match t.clock {
        Clock::Monotonic => "CLOCK_MONOTONIC",
        Clock::Realtime => "CLOCK_REALTIME",
    };
    let notes = serde_json::to_string(&t.notes).unwrap_or_else(|_| "[]".into());
    write!(
        e.out,
        "\n],\"displayTimeUnit\":\"ns\",\"otherData\":{{\"generator\":\"gpuperf\",\"clock\":\"{clock}\",\"time_base_ns\":{},\"kernels\":{},\"kernels_matched\":{},\"notes\":{notes}}}}}\n",
        t.base_ns, t.kernels, t.kernels_matched
    )?;
    e.out.flush()
}

/// Whether flow `f` is written as bind ids on its slices (Perfetto's flow
/// v2) rather than as `s`/`f` events: the importer binds those to thread
/// slices only, and this flow ends on an async track.
fn bound(t: &Timeline, f: usize) -> bool {
    let f = &t.flows[f];
    t.tracks[t.events[f.from].track].is_async || t.tracks[t.events[f.to].track].is_async
}

/// `,"bind_id":…,"flow_out":true` (or `flow_in`) for the bound flow that an
/// event starting flows `outs` and ending flows `ins` starts or ends, if any
/// (a slice binds one); else nothing.
fn bind(t: &Timeline, outs: &[usize], ins: &[usize]) -> String {
    let find = |fs: &[usize]| fs.iter().copied().find(|&f| bound(t, f));
    if let Some(f) = find(outs) {
        format!(r#","bind_id":"{:#x}","flow_out":true"#, t.flows[f].id)
    } else if let Some(f) = find(ins) {
        format!(r#","bind_id":"{:#x}","flow_in":true"#, t.flows[f].id)
    } else {
        String::new()
    }
}

struct Encoder<'a, W: Write> {
    t: &'a Timeline,
    out: &'a mut W,
    first: bool,
    /// The stacks' texts, JSON-escaped once.
    stacks: Vec<String>,
}

impl<W: Write> Encoder<'_, W> {
    /// Starts one event object: writes the separator and `{`.
    fn open(&mut self) -> std::io::Result<&mut W> {
        let sep: &[u8] = if self.first { b"{" } else { b",\n{" };
        self.first = false;
        self.out.write_all(sep)?;
        Ok(&mut *self.out)
    }

    fn ts(&self, ns: u64) -> Us {
        Us(i128::from(ns) - i128::from(self.t.base_ns))
    }

    fn metadata(&mut self) -> std::io::Result<()> {
        let t = self.t;
        for p in &t.processes {
            let (pid, name, sort) = (p.pid, json(&p.name), p.sort);
            write!(
                self.open()?,
                r#""ph":"M","name":"process_name","pid":{pid},"tid":0,"args":{{"name":{name}}}}}"#
            )?;
            write!(
                self.open()?,
                r#""ph":"M","name":"process_sort_index","pid":{pid},"tid":0,"args":{{"sort_index":{sort}}}}}"#
            )?;
            for l in &p.labels {
                let l = json(l);
                write!(
                    self.open()?,
                    r#""ph":"M","name":"process_labels","pid":{pid},"tid":0,"args":{{"labels":{l}}}}}"#
                )?;
            }
        }
        // Async tracks are named by their events.
        for tr in t.tracks.iter().filter(|tr| !tr.is_async) {
            let (pid, tid, name) = (tr.pid, tr.tid, json(&tr.name));
            write!(
                self.open()?,
                r#""ph":"M","name":"thread_name","pid":{pid},"tid":{tid},"args":{{"name":{name}}}}}"#
            )?;
            if let Some(rank) = tr.rank {
                write!(
                    self.open()?,
                    r#""ph":"M","name":"thread_sort_index","pid":{pid},"tid":{tid},"args":{{"sort_index":{rank}}}}}"#
                )?;
            }
        }
        Ok(())
    }

    /// An event, with `bind` (from [`bind`]) among its fields.
    fn event(&mut self, e: &Event, bind: &str) -> std::io::Result<()> {
        let tr = &self.t.tracks[e.track];
        let (pid, tid, cat, name, ts) = (tr.pid, tr.tid, e.cat, json(&e.name), self.ts(e.start_ns));
        let mut args = String::new();
        for (i, (k, v)) in e.args.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            let v = match v {
                Arg::Uint(u) => u.to_string(),
                Arg::Str(s) => json(s),
                Arg::Dim(d) => format!("[{},{},{}]", d[0], d[1], d[2]),
                Arg::Stack(s) => self.stacks[*s as usize].clone(),
            };
            args += &format!("{sep}\"{k}\":{v}");
        }
        if tr.is_async {
            // Perfetto names an async track by its events' name and stacks
            // the tracks of one name; the event's own name is an argument.
            let ph = if e.dur_ns.is_some() { "b" } else { "n" };
            let (track, id) = (json(&tr.name), e.track);
            let sep = if args.is_empty() { "" } else { "," };
            return write!(
                self.open()?,
                r#""ph":"{ph}","cat":"{cat}","name":{track},"id2":{{"local":"{id:#x}"}},"pid":{pid},"tid":0,"ts":{ts}{bind},"args":{{"event":{name}{sep}{args}}}}}"#
            );
        }
        let out = self.open()?;
        match e.dur_ns {
            Some(d) => write!(
                out,
                r#""ph":"X","cat":"{cat}","name":{name},"pid":{pid},"tid":{tid},"ts":{ts},"dur":{}{bind},"args":{{{args}}}}}"#,
                Us(i128::from(d))
            ),
            None => write!(
                out,
                r#""ph":"i","s":"t","cat":"{cat}","name":{name},"pid":{pid},"tid":{tid},"ts":{ts},"args":{{{args}}}}}"#
            ),
        }
    }

    /// The end of a slice on an async track (the others are complete events).
    fn async_end(&mut self, e: &Event) -> std::io::Result<()> {
        let tr = &self.t.tracks[e.track];
        if !tr.is_async {
            return Ok(());
        }
        let (pid, cat, track, id) = (tr.pid, e.cat, json(&tr.name), e.track);
        let ts = self.ts(e.start_ns + e.dur_ns.unwrap_or(0));
        write!(
            self.open()?,
            r#""ph":"e","cat":"{cat}","name":{track},"id2":{{"local":"{id:#x}"}},"pid":{pid},"tid":0,"ts":{ts}}}"#
        )
    }

    /// One end of a flow: its start at the start of the call's slice, its end
    /// at the start of the work's. (From the call's middle, the arrow of a
    /// synchronous copy, or of any launch whose work starts before the call
    /// returns, would run backwards in time.)
    fn flow_end(&mut self, f: usize, start: bool) -> std::io::Result<()> {
        let t = self.t;
        let f = &t.flows[f];
        let (id, kind) = (f.id, f.cat);
        let e = &t.events[if start { f.from } else { f.to }];
        let tr = &t.tracks[e.track];
        let ts = self.ts(e.start_ns);
        let ph = if start {
            r#""ph":"s""#
        } else {
            r#""ph":"f","bp":"e""#
        };
        write!(
            self.open()?,
            r#"{ph},"cat":"{kind}","name":"{kind}","id":{id},"pid":{},"tid":{},"ts":{ts}}}"#,
            tr.pid,
            tr.tid
        )
    }
}

/// A signed ns count printed as µs with three decimals.
#[derive(Copy, Clone)]
struct Us(i128);

impl std::fmt::Display for Us {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sign = if self.0 < 0 { "-" } else { "" };
        let v = self.0.unsigned_abs();
        write!(f, "{sign}{}.{:03}", v / 1000, v % 1000)
    }
}

fn json(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn microseconds_keep_nanoseconds() {
        assert_eq!(Us(1_234_567).to_string(), "1234.567");
        assert_eq!(Us(-5).to_string(), "-0.005");
        assert_eq!(Us(0).to_string(), "0.000");
    }
}
