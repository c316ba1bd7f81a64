//! The fast path for reading one event: the plain JSON that profilers write, read
//! field by field into an [`Event`] that borrows the text.
//!
//! serde_json reads events through a derived `Deserialize`, one call per field and
//! value, with checks for every case JSON allows; on the events of a large trace
//! (millions, each a few hundred bytes, most of them in strings) that was most of
//! the reading time. Here the usual case takes one pass with no calls per byte:
//! string ends are found with `memchr`, numbers and punctuation by hand.
//!
//! The fast path reads a subset of JSON and gives up ([`None`]) on anything else:
//! escapes (`\`) in strings, control characters in strings, numbers not in JSON's
//! grammar, nesting deeper than [`MAX_DEPTH`], a known field twice or of a type
//! serde_json would refuse. The caller then parses the same text with serde_json,
//! so that its values, errors and messages stay those of serde_json. Where the fast
//! path does give an event, it is the one serde_json gives, and it ends at the same
//! byte: the tests compare the two on every event of the real traces and on
//! mutated ones.

use std::borrow::Cow;

use super::{Args, Event, Raw};

/// Deeper values are left to serde_json (whose limit is 128).
const MAX_DEPTH: u32 = 64;

/// Reads the event that starts `text` (an object, at its first byte). Returns it
/// and the number of bytes it takes, or `None` where serde_json must decide.
pub(super) fn event(text: &str) -> Option<(Event<'_>, usize)> {
    let mut c = Cursor { text, i: 0 };
    let mut ev = Event::default();
    let mut seen = 0u32;
    c.object(|c, key| {
        let field = match key {
            "ph" => 0,
            "cat" => 1,
            "name" => 2,
            "pid" => 3,
            "tid" => 4,
            "ts" => 5,
            "dur" => 6,
            "args" => 7,
            "id" => 8,
            _ => return c.skip(1),
        };
        // serde refuses a field given twice.
        if seen & 1 << field != 0 {
            return None;
        }
        seen |= 1 << field;
        match field {
            0 => ev.ph = c.string()?,
            1 => ev.cat = c.string()?,
            2 => ev.name = c.string()?,
            3 => ev.pid = c.raw()?,
            4 => ev.tid = c.raw()?,
            5 => ev.ts = c.raw()?,
            6 => ev.dur = c.raw()?,
            7 => ev.args = c.args()?,
            _ => ev.id = c.raw()?,
        }
        Some(())
    })?;
    Some((ev, c.i))
}

/// Where the string whose text starts `s` stops: at its closing quote, or at a
/// byte that the fast path leaves to serde_json (`\\`, a control character).
fn string_end(s: &[u8]) -> Option<usize> {
    // Keys and most values are short: 8 bytes at a time in a register.
    const SHORT: usize = 32;
    let head = &s[..s.len().min(SHORT)];
    let mut words = head.chunks_exact(8);
    for (k, w) in words.by_ref().enumerate() {
        let m = special(u64::from_le_bytes(w.try_into().ok()?));
        if m != 0 {
            return Some(k * 8 + (m.trailing_zeros() / 8) as usize);
        }
    }
    let rest = words.remainder();
    let done = head.len() - rest.len();
    if let Some(n) = rest
        .iter()
        .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
    {
        return Some(done + n);
    }
    if head.len() < SHORT {
        return None;
    }
    // Long ones (Python call stacks): SIMD, with `memchr`.
    let end = SHORT + memchr::memchr2(b'"', b'\\', &s[SHORT..])?;
    match has_control(&s[SHORT..end]) {
        false => Some(end),
        true => s.iter().position(|&c| c < 0x20),
    }
}

/// The bytes of `w` that are `"`, `\\` or below 0x20: their high bit set, exactly
/// for the first one (lowest address) and maybe for some after it (the usual
/// trick for finding a zero byte in a word, three times).
fn special(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero = |x: u64| x.wrapping_sub(ONES) & !x;
    let quote = w ^ (ONES * u64::from(b'"'));
    let backslash = w ^ (ONES * u64::from(b'\\'));
    let control = w.wrapping_sub(ONES * 0x20) & !w;
    (zero(quote) | zero(backslash) | control) & HIGH
}

/// Whether `s` holds a control character (below 0x20).
fn has_control(s: &[u8]) -> bool {
    // Without an early exit, so that it is compiled to SIMD: 16 bytes at a time.
    s.iter().fold(false, |any, &c| any | (c < 0x20))
}

/// A position in text that is valid UTF-8 (so every slice between ASCII bytes is
/// too).
struct Cursor<'a> {
    text: &'a str,
    i: usize,
}

impl<'a> Cursor<'a> {
    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    /// The next byte that is not JSON whitespace, consumed.
    fn next(&mut self) -> Option<u8> {
        let b = self.bytes();
        while let Some(&c) = b.get(self.i) {
            self.i += 1;
            if !matches!(c, b' ' | b'\n' | b'\r' | b'\t') {
                return Some(c);
            }
        }
        None
    }

    /// The next byte that is not JSON whitespace, not consumed.
    fn peek(&mut self) -> Option<u8> {
        let c = self.next()?;
        self.i -= 1;
        Some(c)
    }

    /// `{ "key": value, … }`, calling `field` after each key's `:` to read its
    /// value.
    fn object(&mut self, mut field: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        if self.next()? != b'{' {
            return None;
        }
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        loop {
            if self.next()? != b'"' {
                return None;
            }
            let key = self.string_body()?;
            if self.next()? != b':' {
                return None;
            }
            field(self, key)?;
            match self.next()? {
                b',' => {}
                b'}' => return Some(()),
                _ => return None,
            }
        }
    }

    /// The rest of a string after its opening quote: its text, which needs no
    /// unescaping.
    fn string_body(&mut self) -> Option<&'a str> {
        let b = self.bytes();
        let start = self.i;
        let end = start + string_end(&b[start..])?;
        // JSON has no raw control characters in strings, and escapes are left to
        // serde_json.
        if b[end] != b'"' {
            return None;
        }
        self.i = end + 1;
        // The quotes are ASCII, so both ends are character boundaries.
        self.text.get(start..end)
    }

    /// `Option<Cow<str>>`: a string or `null`.
    fn string(&mut self) -> Option<Option<Cow<'a, str>>> {
        match self.next()? {
            b'"' => Some(Some(Cow::Borrowed(self.string_body()?))),
            b'n' => {
                self.literal("ull")?;
                Some(None)
            }
            _ => None,
        }
    }

    /// `Option<Raw>`: the text of any value, or `None` for `null`.
    fn raw(&mut self) -> Option<Option<Raw<'a>>> {
        let c = self.peek()?;
        let start = self.i;
        // Numbers and strings without the detour through `skip`.
        match c {
            b'-' | b'0'..=b'9' => self.number()?,
            b'"' => {
                self.i += 1;
                self.string_body()?;
            }
            _ => self.skip(1)?,
        }
        Some((c != b'n').then(|| Raw(&self.text[start..self.i])))
    }

    /// `Option<[u32; 3]>`: three integers that fit, or `null`.
    fn triple(&mut self) -> Option<Option<[u32; 3]>> {
        match self.next()? {
            b'[' => {
                let mut v = [0u32; 3];
                for (k, x) in v.iter_mut().enumerate() {
                    if k > 0 && self.next()? != b',' {
                        return None;
                    }
                    *x = self.u32()?;
                }
                (self.next()? == b']').then_some(Some(v))
            }
            b'n' => {
                self.literal("ull")?;
                Some(None)
            }
            _ => None,
        }
    }

    /// An integer in `u32`, written as JSON writes integers.
    fn u32(&mut self) -> Option<u32> {
        let b = self.bytes();
        self.peek()?;
        let start = self.i;
        let digits = b[start..].iter().take_while(|c| c.is_ascii_digit()).count();
        // No leading zeros, and no fraction or exponent (serde refuses a float).
        if digits == 0 || digits > 1 && b[start] == b'0' || digits > 10 {
            return None;
        }
        if matches!(b.get(start + digits), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        self.i = start + digits;
        self.text[start..self.i].parse().ok()
    }

    /// `args`: an object or `null`.
    fn args(&mut self) -> Option<Option<Box<Args<'a>>>> {
        if self.peek()? == b'n' {
            self.i += 1;
            self.literal("ull")?;
            return Some(None);
        }
        let mut a = Box::<Args<'a>>::default();
        let mut seen = 0u32;
        self.object(|c, key| {
            let field = match key {
                "correlation" => 0,
                "cbid" => 1,
                "device" => 2,
                "context" => 3,
                "stream" => 4,
                "bytes" => 5,
                "grid" => 6,
                "block" => 7,
                "Python id" => 8,
                "Python parent id" => 9,
                "Call stack" => 10,
                "name" => 11,
                "cuda_sync_kind" => 12,
                "graph id" => 13,
                "graph node id" => 14,
                "fromDevice" => 15,
                "toDevice" => 16,
                "inDevice" => 17,
                "inContext" => 18,
                "wait_on_stream" => 19,
                "wait_on_cuda_event_record_corr_id" => 20,
                "wait_on_cuda_event_id" => 21,
                "Sequence number" => 22,
                "Fwd thread id" => 23,
                _ => return c.skip(2),
            };
            if seen & 1 << field != 0 {
                return None;
            }
            seen |= 1 << field;
            match field {
                0 => a.correlation = c.raw()?,
                1 => a.cbid = c.raw()?,
                2 => a.device = c.raw()?,
                3 => a.context = c.raw()?,
                4 => a.stream = c.raw()?,
                5 => a.bytes = c.raw()?,
                6 => a.grid = c.triple()?,
                7 => a.block = c.triple()?,
                8 => a.python_id = c.raw()?,
                9 => a.python_parent = c.raw()?,
                10 => a.call_stack = c.string()?,
                11 => a.name = c.string()?,
                12 => a.cuda_sync_kind = c.string()?,
                13 => a.graph_id = c.raw()?,
                14 => a.graph_node_id = c.raw()?,
                15 => a.from_device = c.raw()?,
                16 => a.to_device = c.raw()?,
                17 => a.in_device = c.raw()?,
                18 => a.in_context = c.raw()?,
                19 => a.wait_on_stream = c.raw()?,
                20 => a.wait_on_cuda_event_record_corr_id = c.raw()?,
                21 => a.wait_on_cuda_event_id = c.raw()?,
                22 => a.sequence_number = c.raw()?,
                _ => a.fwd_thread_id = c.raw()?,
            }
            Some(())
        })?;
        Some(Some(a))
    }

    /// The rest of a literal whose first byte was read.
    fn literal(&mut self, rest: &str) -> Option<()> {
        let end = self.i + rest.len();
        (self.bytes().get(self.i..end)? == rest.as_bytes()).then(|| self.i = end)
    }

    /// Skips one value, checking it is JSON, at nesting `depth`.
    fn skip(&mut self, depth: u32) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.next()? {
            b'"' => self.string_body().map(drop),
            b'{' => {
                self.i -= 1;
                self.object(|c, _| c.skip(depth + 1))
            }
            b'[' => {
                if self.peek()? == b']' {
                    self.i += 1;
                    return Some(());
                }
                loop {
                    self.skip(depth + 1)?;
                    match self.next()? {
                        b',' => {}
                        b']' => return Some(()),
                        _ => return None,
                    }
                }
            }
            b't' => self.literal("rue"),
            b'f' => self.literal("alse"),
            b'n' => self.literal("ull"),
            b'-' | b'0'..=b'9' => {
                self.i -= 1;
                self.number()
            }
            _ => None,
        }
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`, followed by a byte that
    /// can end a number.
    fn number(&mut self) -> Option<()> {
        let b = self.bytes();
        let digits = |mut i: usize| {
            while b.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            i
        };
        let mut i = self.i + usize::from(b.get(self.i) == Some(&b'-'));
        let end = digits(i);
        if end == i || end > i + 1 && b[i] == b'0' {
            return None;
        }
        i = end;
        if b.get(i) == Some(&b'.') {
            let end = digits(i + 1);
            if end == i + 1 {
                return None;
            }
            i = end;
        }
        if matches!(b.get(i), Some(b'e' | b'E')) {
            i += 1 + usize::from(matches!(b.get(i + 1), Some(b'+' | b'-')));
            let end = digits(i);
            if end == i {
                return None;
            }
            i = end;
        }
        // The number must end here, with the text: a number cut by the window's
        // end may go on after it.
        if !matches!(
            b.get(i),
            Some(b' ' | b'\n' | b'\r' | b'\t' | b',' | b'}' | b']')
        ) {
            return None;
        }
        self.i = i;
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use proptest::prelude::*;
    use serde_json::value::RawValue;

    use super::*;
    use crate::read::kineto::stream::{Step, parse_one_str};

    /// The fast path agrees with serde_json on `text`: where it gives an event,
    /// serde_json gives the same one, ending at the same byte. Returns whether the
    /// fast path gave one.
    fn agrees(text: &str) -> Result<bool, TestCaseError> {
        let Some((fast, n)) = event(text) else {
            return Ok(false);
        };
        match parse_one_str::<Event<'_>>(text) {
            Step::Value(slow, m) => {
                prop_assert_eq!(&fast, &slow, "{}", text);
                prop_assert_eq!(n, m, "{}", text);
            }
            Step::NeedMore => prop_assert!(false, "serde_json needs more: {text}"),
            Step::Bad(e) => prop_assert!(false, "serde_json: {e}: {text}"),
        }
        Ok(true)
    }

    fn events_of(bytes: &[u8]) -> Vec<String> {
        #[derive(serde::Deserialize)]
        struct Trace<'a> {
            #[serde(borrow, rename = "traceEvents")]
            events: Vec<&'a RawValue>,
        }
        let t: Trace<'_> = serde_json::from_slice(bytes).unwrap();
        // With a byte after each, as in the window (a bare number at the very end
        // is left to serde_json).
        t.events.iter().map(|e| format!("{} ", e.get())).collect()
    }

    fn real(name: &str) -> Vec<u8> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../samples/recordings/real")
            .join(name);
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
            .read_to_end(&mut out)
            .unwrap();
        out
    }

    const SMALL: &[u8] = include_bytes!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/kineto/small.pt.trace.json"
    ));

    #[test]
    fn every_event_of_the_real_traces_reads_as_serde_json_reads_it() {
        for name in [
            "v100_resnet50_kineto2021.pt.trace.json.gz",
            "b200_vllm_gpt_oss.pt.trace.json.gz",
            "a100_alexnet_kineto_syncs.pt.trace.json.gz",
            "a100_event_sync_kineto.pt.trace.json.gz",
        ] {
            let events = events_of(&real(name));
            let mut fast = 0;
            for e in &events {
                fast += usize::from(agrees(e).unwrap());
            }
            // The fast path is the usual one (it leaves only events with escapes).
            assert!(
                fast * 1000 >= events.len() * 999,
                "{name}: {fast} of {} events on the fast path",
                events.len()
            );
        }
    }

    #[test]
    fn string_ends_are_found_at_every_offset() {
        // Fillers next to the special bytes: `!`, `#`, `[`, `]` and a byte ≥ 0x80.
        for (len, fill) in
            (0..80).flat_map(|n| [b'a', b'!', b'#', b'[', b']', 0xe9].map(|f| (n, f)))
        {
            for (stop, byte) in [
                (true, b'"'),
                (true, b'\\'),
                (true, 0x1f),
                (true, 0),
                (false, 0x20),
                (false, 0x7f),
                (false, 0xc3),
            ] {
                let mut s = vec![fill; len];
                s.push(byte);
                s.extend_from_slice(b"x\"\\\x01");
                // Else the quote after the `x`.
                let want = if stop { len } else { len + 2 };
                assert_eq!(string_end(&s), Some(want), "{len} {byte:#x}");
            }
            assert_eq!(string_end(&vec![fill; len]), None);
        }
    }

    #[test]
    fn what_the_fast_path_leaves_to_serde_json() {
        for text in [
            r#"{"name": "a\"b"} "#,
            r#"{"name": "a	b"} "#,
            r#"{"ph": "X", "ph": "X"} "#,
            r#"{"ph": 1} "#,
            r#"{"args": {"grid": [1, 2]}} "#,
            r#"{"args": {"grid": [1, 2, 3, 4]}} "#,
            r#"{"args": {"grid": [1, 2, 3.0]}} "#,
            r#"{"args": {"grid": [1, 2, -0]}} "#,
            r#"{"args": {"grid": [01, 2, 3]}} "#,
            r#"{"args": {"grid": [1, 2, 4294967296]}} "#,
            r#"{"args": [1]} "#,
            r#"{"ts": 01} "#,
            r#"{"ts": 1.} "#,
            r#"{"ts": 1e} "#,
            r#"{"ts": .5} "#,
            r#"{"x": [1,]} "#,
            r#"{"x": {"a": 1,}} "#,
            r#"{"x": tru} "#,
            r#"{"a": 1,} "#,
            r#"{"a" 1} "#,
            "[] ",
            r#"{"ts": 12"#,
        ] {
            assert_eq!(event(text), None, "{text}");
        }
        let deep = format!("{{\"x\": {}1{}}} ", "[".repeat(70), "]".repeat(70));
        assert_eq!(event(&deep), None);
        // And what it reads.
        for text in [
            "{} ",
            " { } ",
            r#"{"ph": null, "args": null, "pid": null} "#,
            r#"{"ts": -0.5e+3, "tid": "stream 7", "x": [true, false, null, {}, [], "é"]} "#,
            r#"{"args": {"grid": [0, 4294967295, 7], "Call stack": "a;b", "Python id": "3"}} "#,
        ] {
            assert!(agrees(text).unwrap(), "{text}");
        }
    }

    /// Pieces that make mutations reach the fast path's edges.
    const TOKENS: &[&str] = &[
        "{",
        "}",
        "[",
        "]",
        "\"",
        ",",
        ":",
        " ",
        "\t",
        "null",
        "true",
        "-",
        "0",
        "1e5",
        ".5",
        "\\",
        "\\\"",
        "\u{1}",
        "é",
        "\"ph\": \"X\", ",
        "\"pid\": 1, ",
        "\"args\": {",
        "\"grid\": [1, 2, 3], ",
        "\"Call stack\": \"a;b\", ",
        "\"cat\": \"kernel\", ",
        "\"ts\": 1.5, ",
        "\"correlation\": 7, ",
        "\"name\": \"n\", ",
        "\"cat\": \"cuda_sync\", ",
        "\"cuda_sync_kind\": \"Stream Sync\", ",
        "\"graph id\": 3, ",
        "\"graph node id\": 8589934592, ",
        "\"fromDevice\": 1, ",
        "\"wait_on_stream\": -1, ",
        "\"wait_on_cuda_event_record_corr_id\": 5, ",
    ];

    /// `{"key": value, …}` from pools, where the value `ARGS` stands for `args`.
    fn object(
        keys: &[&str],
        pairs: &[(prop::sample::Index, prop::sample::Index)],
        args: &str,
    ) -> String {
        const VALUES: &[&str] = &[
            "\"X\"",
            "\"kernel\"",
            "1",
            "-2.5e3",
            "\"7\"",
            "null",
            "true",
            "[1, 2, 3]",
            "[1,2]",
            "{}",
            "\"a;b\"",
            "[4294967296, 0, 1]",
            "[0, 1, 2.0]",
            "[01, 2, 3]",
            "[ 7 ,8,\n9 ]",
            "01",
            "\"\\u00e9\"",
            "\"x\\\"y\"",
            "[[], {\"a\": [null]}]",
            "ARGS",
            "ARGS",
        ];
        let fields: Vec<String> = pairs
            .iter()
            .map(|(k, v)| {
                let v = VALUES[v.index(VALUES.len())];
                let v = if v == "ARGS" { args } else { v };
                format!("\"{}\": {v}", keys[k.index(keys.len())])
            })
            .collect();
        format!("{{{}}}", fields.join(", "))
    }

    proptest! {
        #[test]
        fn generated_events_read_as_serde_json_reads_them(
            top in proptest::collection::vec(any::<(prop::sample::Index, prop::sample::Index)>(), 0..8),
            args in proptest::collection::vec(any::<(prop::sample::Index, prop::sample::Index)>(), 0..8),
        ) {
            // Known fields of both levels, given twice or with other types, among
            // unknown ones.
            const TOP: &[&str] = &["ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "x"];
            const ARGS: &[&str] = &[
                "correlation", "cbid", "device", "context", "stream", "bytes", "grid", "block",
                "Python id", "Python parent id", "Call stack", "name", "cuda_sync_kind",
                "graph id", "graph node id", "fromDevice", "toDevice", "inDevice", "inContext", "wait_on_stream",
                "wait_on_cuda_event_record_corr_id", "wait_on_cuda_event_id", "x",
            ];
            let args = object(ARGS, &args, "{}");
            agrees(&format!("{} ", object(TOP, &top, &args)))?;
            agrees(&format!("{{\"args\": {args}}} "))?;
        }

        #[test]
        fn mutated_events_read_as_serde_json_reads_them(
            line in proptest::sample::select(events_of(SMALL)),
            edits in proptest::collection::vec(
                (any::<proptest::sample::Index>(), 0u8..8, proptest::collection::vec(any::<u8>(), 0..6),
                 any::<proptest::sample::Index>()),
                0..8,
            )
        ) {
            let mut text = line.into_bytes();
            crate::golden::apply_edits(&mut text, edits, TOKENS);
            agrees(&String::from_utf8_lossy(&text))?;
        }
    }
}
