//! Reading: the JSON is streamed through a window over the input that grows
//! until one value fits; the top-level object and the `traceEvents` array are
//! walked by hand, and each event is handed to the [`Builder`] on its own.

use std::borrow::Cow;
use std::io::{self, Read};

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;

use super::event::{DeviceProp, parse_ns_int};
use super::{Builder, Event, scan};

/// A sliding window over the input: `buf[pos..end]` is unread.
pub(super) struct Window<R> {
    input: R,
    pub(super) buf: Vec<u8>,
    pos: usize,
    end: usize,
    /// File offset of `buf[0]`.
    base: u64,
    eof: bool,
    /// `buf[text_at..checked]` is valid UTF-8 (see [`Window::check_text`]).
    checked: usize,
    /// `pos` when `check_text` last ran, `usize::MAX` once the content moved.
    text_at: usize,
}

/// How far the walk got.
#[derive(Debug)]
pub(super) enum Walk {
    Done,
    /// The input ended inside a value that starts at this offset.
    Cut(u64),
    /// Not JSON at this offset.
    Malformed(u64, String),
}

/// What parsing one value from the window gave.
pub(super) enum Step<T> {
    Value(T, usize),
    NeedMore,
    Bad(serde_json::Error),
}

/// A serde_json error without its line and column, which count from the window's
/// start, not the file's (the message names the byte offset instead).
pub(super) fn message(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.rfind(" at line ") {
        Some(i) => text[..i].to_owned(),
        None => text,
    }
}

/// Where in `slice` serde_json stopped with `e` (it reports a line and column).
pub(super) fn error_offset(slice: &[u8], e: &serde_json::Error) -> usize {
    let mut start = 0;
    for _ in 1..e.line() {
        match memchr::memchr(b'\n', &slice[start..]) {
            Some(i) => start += i + 1,
            None => return slice.len(),
        }
    }
    (start + e.column()).min(slice.len())
}

pub(super) fn parse_one<'a, T: Deserialize<'a>>(slice: &'a [u8]) -> Step<T> {
    step(
        slice,
        serde_json::Deserializer::from_slice(slice).into_iter::<T>(),
    )
}

/// [`parse_one`] on text known to be UTF-8: serde_json then need not check each
/// string again, which was a fifth of the reading time.
pub(super) fn parse_one_str<'a, T: Deserialize<'a>>(text: &'a str) -> Step<T> {
    step(
        text.as_bytes(),
        serde_json::Deserializer::from_str(text).into_iter::<T>(),
    )
}

pub(super) fn step<'a, R: serde_json::de::Read<'a>, T: Deserialize<'a>>(
    slice: &[u8],
    mut it: serde_json::StreamDeserializer<'a, R, T>,
) -> Step<T> {
    match it.next() {
        Some(Ok(v)) => {
            let n = it.byte_offset();
            Step::Value(v, n)
        }
        Some(Err(e)) if e.is_eof() => Step::NeedMore,
        // A value cut by the window's end can look malformed (`12.` is an invalid
        // number); only an error before the end is one.
        Some(Err(e)) if error_offset(slice, &e) + 1 >= slice.len() => Step::NeedMore,
        Some(Err(e)) => Step::Bad(e),
        None => Step::NeedMore,
    }
}

impl<R: Read> Window<R> {
    const CHUNK: usize = 4 << 20;

    pub(super) fn new(input: R) -> Self {
        Self {
            input,
            buf: vec![0; Self::CHUNK],
            pos: 0,
            end: 0,
            base: 0,
            eof: false,
            checked: 0,
            text_at: usize::MAX,
        }
    }

    /// Checks the unread input as UTF-8, for [`Window::text`]. Each byte is checked
    /// once.
    pub(super) fn check_text(&mut self) {
        let (pos, end) = (self.pos, self.end);
        // `pos` moved past what was checked, or into a character (only in input
        // that is not JSON): check again from `pos`.
        if self.checked < pos || self.checked > pos && (0x80..0xc0).contains(&self.buf[pos]) {
            self.checked = pos;
        }
        if self.checked < end {
            let more = match std::str::from_utf8(&self.buf[self.checked..end]) {
                Ok(_) => end - self.checked,
                Err(e) => e.valid_up_to(),
            };
            self.checked += more;
        }
        self.text_at = pos;
    }

    /// The unread input as text, as far as [`Window::check_text`] found it valid
    /// UTF-8: all of it but a character cut by the window's end, unless the input
    /// is not UTF-8.
    pub(super) fn text(&self) -> &str {
        if self.text_at != self.pos {
            return "";
        }
        let valid = &self.buf[self.pos..self.checked];
        // SAFETY: `check_text` ran at this `pos` and the content has not moved
        // since (`fill` resets `text_at`); it left `buf[pos..checked]` valid
        // UTF-8: every byte in it was checked by `from_utf8`, now or at an earlier
        // call (since the content last moved, `fill` shifting `checked` with it),
        // the checked runs join at character boundaries (`valid_up_to` ends on
        // one), and `pos` is not a continuation byte (`10xxxxxx`), so the slice
        // starts on a boundary too.
        unsafe { std::str::from_utf8_unchecked(valid) }
    }

    pub(super) fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    pub(super) fn unread(&self) -> &[u8] {
        &self.buf[self.pos..self.end]
    }

    /// Reads more input after what is unread; false at the end of the input.
    pub(super) fn fill(&mut self) -> io::Result<bool> {
        if self.eof {
            return Ok(false);
        }
        if self.pos > 0 {
            self.buf.copy_within(self.pos..self.end, 0);
            self.base += self.pos as u64;
            self.end -= self.pos;
            self.checked = self.checked.saturating_sub(self.pos);
            self.text_at = usize::MAX;
            self.pos = 0;
        }
        if self.end == self.buf.len() {
            // One value larger than the window: grow it.
            self.buf.resize(self.buf.len() * 2, 0);
        }
        loop {
            match self.input.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(false);
                }
                Ok(n) => {
                    self.end += n;
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // A gzip stream cut off early: the data simply ends here.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    self.eof = true;
                    return Ok(false);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The next byte that is not whitespace, without consuming it.
    pub(super) fn peek(&mut self) -> io::Result<Option<u8>> {
        loop {
            if let Some(i) = self.unread().iter().position(|b| !b.is_ascii_whitespace()) {
                self.pos += i;
                return Ok(Some(self.buf[self.pos]));
            }
            self.pos = self.end;
            if !self.fill()? {
                return Ok(None);
            }
        }
    }

    /// Parses one value, reading more input until it is whole, and hands it to `f`.
    /// `Ok(Err(walk))` when the input ends or is not JSON.
    pub(super) fn value<T, F>(&mut self, f: F) -> io::Result<Result<(), Walk>>
    where
        T: for<'a> Deserialize<'a>,
        F: FnOnce(T),
    {
        let at = self.offset();
        loop {
            match parse_one::<T>(self.unread()) {
                // A number that ends with the window may go on after it.
                Step::Value(_, n) if n == self.end - self.pos && !self.eof => {
                    if !self.fill()? {
                        continue;
                    }
                }
                Step::Value(v, n) => {
                    f(v);
                    self.pos += n;
                    return Ok(Ok(()));
                }
                Step::NeedMore => {
                    if !self.fill()? {
                        return Ok(Err(Walk::Cut(at)));
                    }
                }
                Step::Bad(e) => return Ok(Err(Walk::Malformed(at, message(&e)))),
            }
        }
    }
}

/// Walks `{ …, "traceEvents": [ event, … ], … }`.
pub(super) fn walk<R: Read>(w: &mut Window<R>, b: &mut Builder<'_>) -> io::Result<Walk> {
    macro_rules! next {
        ($e:expr) => {
            match $e? {
                Ok(()) => {}
                Err(walk) => return Ok(walk),
            }
        };
    }
    match w.peek()? {
        Some(b'{') => w.pos += 1,
        Some(_) => return Ok(Walk::Malformed(w.offset(), "not a JSON object".into())),
        None => return Ok(Walk::Cut(w.offset())),
    }
    loop {
        match w.peek()? {
            Some(b'}') => return Ok(Walk::Done),
            Some(b',') => w.pos += 1,
            Some(b'"') => {
                let mut key = String::new();
                next!(w.value::<Cow<'_, str>, _>(|k| key = k.into_owned()));
                match w.peek()? {
                    Some(b':') => w.pos += 1,
                    Some(_) => return Ok(Walk::Malformed(w.offset(), "expected `:`".into())),
                    None => return Ok(Walk::Cut(w.offset())),
                }
                match key.as_str() {
                    "traceEvents" => {
                        b.saw_events = true;
                        if let done @ (Walk::Cut(_) | Walk::Malformed(..)) = events(w, b)? {
                            return Ok(done);
                        }
                    }
                    "deviceProperties" => {
                        next!(w.value::<Option<Vec<DeviceProp>>, _>(|d| {
                            b.devices = d.unwrap_or_default();
                        }))
                    }
                    "distributedInfo" => {
                        // A field of another type is ignored, not an error: the
                        // trace's events are what matter.
                        next!(w.value::<Box<RawValue>, _>(|v| {
                            b.distributed = serde_json::from_str(v.get()).ok();
                        }))
                    }
                    "baseTimeNanoseconds" => {
                        next!(w.value::<Box<RawValue>, _>(|v| {
                            b.base_ns = parse_ns_int(v.get());
                        }))
                    }
                    _ => next!(w.value::<IgnoredAny, _>(|_| ())),
                }
            }
            Some(_) => return Ok(Walk::Malformed(w.offset(), "expected a key or `}`".into())),
            None => return Ok(Walk::Cut(w.offset())),
        }
    }
}

/// Walks `[ event, … ]`, one event at a time.
pub(super) fn events<R: Read>(w: &mut Window<R>, b: &mut Builder<'_>) -> io::Result<Walk> {
    match w.peek()? {
        Some(b'[') => w.pos += 1,
        Some(b'n') => {
            // `null`: no events.
            return Ok(match w.value::<IgnoredAny, _>(|_| ())? {
                Ok(()) => Walk::Done,
                Err(e) => e,
            });
        }
        Some(_) => {
            return Ok(Walk::Malformed(
                w.offset(),
                "`traceEvents` is not an array".into(),
            ));
        }
        None => return Ok(Walk::Cut(w.offset())),
    }
    loop {
        match w.peek()? {
            Some(b']') => {
                w.pos += 1;
                return Ok(Walk::Done);
            }
            Some(b',') => w.pos += 1,
            Some(_) => {
                let at = w.offset();
                // Parsed in place so that the event's strings borrow the window.
                loop {
                    let whole = w.end - w.pos;
                    // The UTF-8 text first; where the event goes on past it (cut by
                    // the window, or around bytes that are not UTF-8), the bytes.
                    w.check_text();
                    let text = w.text();
                    let step = match scan::event(text) {
                        Some((ev, n)) if n < text.len() => Step::Value(ev, n),
                        _ => match parse_one_str::<Event<'_>>(text) {
                            Step::Value(ev, n) if n < text.len() => Step::Value(ev, n),
                            Step::Bad(e)
                                if e.classify() != serde_json::error::Category::Eof
                                    && error_offset(text.as_bytes(), &e) + 1 < text.len() =>
                            {
                                Step::Bad(e)
                            }
                            _ => parse_one::<Event<'_>>(w.unread()),
                        },
                    };
                    match step {
                        Step::Value(_, n) if n == whole && !w.eof => {
                            w.fill()?;
                        }
                        Step::Value(ev, n) => {
                            b.event(&ev, at);
                            w.pos += n;
                            break;
                        }
                        Step::NeedMore => {
                            if !w.fill()? {
                                return Ok(Walk::Cut(at));
                            }
                        }
                        Step::Bad(e) if e.classify() == serde_json::error::Category::Data => {
                            // Valid JSON of an unexpected shape: skip this event only.
                            let msg = format!("event skipped: {}", message(&e));
                            match w.value::<IgnoredAny, _>(|_| ())? {
                                Ok(()) => b.bad(at, msg),
                                Err(walk) => return Ok(walk),
                            }
                            break;
                        }
                        Step::Bad(e) => return Ok(Walk::Malformed(at, message(&e))),
                    }
                }
            }
            None => return Ok(Walk::Cut(w.offset())),
        }
    }
}
