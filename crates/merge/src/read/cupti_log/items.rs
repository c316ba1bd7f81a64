//! One line's parts: a header's prefix and `[ start, end ]`, and the
//! comma-separated `key value` items of header and continuation lines.

use std::borrow::Cow;

/// What a line is wrong with; becomes a diagnostic message.
pub(super) type Bad = Cow<'static, str>;

pub(super) struct Placement {
    pub(super) device: u32,
    pub(super) context: u32,
    pub(super) stream: u32,
    pub(super) graph_id: u32,
    pub(super) graph_node_id: u64,
}

/// The parts of a header line after its kind word.
pub(super) struct Header<'a> {
    /// Text between the kind and `[`: `"HtoD"`, `CUPTI_INSTRUMENTATION`, or nothing.
    pub(super) prefix: &'a str,
    pub(super) start: u64,
    pub(super) end: u64,
    /// Text after `]`.
    pub(super) items: &'a str,
}

impl<'a> Header<'a> {
    pub(super) fn parse(rest: &'a str) -> Result<Self, Bad> {
        let open = rest.find('[').ok_or("missing `[ start, end ]`")?;
        let prefix = rest[..open].trim();
        let after = &rest[open + 1..];
        let close = after.find(']').ok_or("missing `]` after timestamps")?;
        let mut ts = after[..close].split(',').map(str::trim);
        let mut stamp = |what: &str| -> Result<u64, Bad> {
            let s = ts.next().unwrap_or("");
            parse_u64(s).ok_or_else(|| format!("bad {what} timestamp `{}`", clip(s)).into())
        };
        let start = stamp("start")?;
        let end = stamp("end")?;
        if ts.next().is_some() {
            return Err("more than two timestamps".into());
        }
        Ok(Self {
            prefix,
            start,
            end,
            items: &after[close + 1..],
        })
    }
}

/// Most items a line can have that are looked at; later ones are ignored.
pub(super) const MAX_ITEMS: usize = 24;

/// The items of one line: `key value` pairs and at most one quoted name.
pub(super) struct Items<'a> {
    pub(super) pairs: ArrayVec<(&'a str, &'a str)>,
    /// `Some(Err(()))` when a quoted name is not closed.
    pub(super) quoted: Option<Result<&'a str, ()>>,
}

/// A fixed-capacity list, so that reading a line allocates nothing.
pub(super) struct ArrayVec<T> {
    pub(super) items: [T; MAX_ITEMS],
    pub(super) len: usize,
}

impl<T: Copy> ArrayVec<T> {
    pub(super) fn push(&mut self, v: T) {
        if let Some(slot) = self.items.get_mut(self.len) {
            *slot = v;
            self.len += 1;
        }
    }
    pub(super) fn as_slice(&self) -> &[T] {
        self.items.get(..self.len).unwrap_or(&[])
    }
    pub(super) fn first(&self) -> Option<&T> {
        self.as_slice().first()
    }
}

impl<'a> Items<'a> {
    /// Splits `s` at commas at bracket and parenthesis depth 0.
    pub(super) fn parse(s: &'a str) -> Self {
        let mut items = Items {
            pairs: ArrayVec {
                items: [("", ""); MAX_ITEMS],
                len: 0,
            },
            quoted: None,
        };
        let mut rest = s;
        loop {
            rest = rest.trim_start_matches([' ', '\t', ',']);
            if rest.is_empty() {
                break;
            }
            if let Some(body) = rest.strip_prefix('"') {
                // The printer writes no quote after the name, so the last candidate
                // is the end even when the name holds `", `.
                let close = body.rmatch_indices('"').map(|(i, _)| i).find(|&i| {
                    let after = body[i + 1..].trim_start();
                    after.is_empty() || after.starts_with(',')
                });
                match close {
                    Some(i) => {
                        items.quoted.get_or_insert(Ok(&body[..i]));
                        rest = &body[i + 1..];
                    }
                    None => {
                        items.quoted.get_or_insert(Err(()));
                        break;
                    }
                }
                continue;
            }
            let mut depth = 0i32;
            let end = rest
                .bytes()
                .position(|b| {
                    match b {
                        b'[' | b'(' => depth += 1,
                        b']' | b')' => depth -= 1,
                        b',' if depth <= 0 => return true,
                        _ => {}
                    }
                    false
                })
                .unwrap_or(rest.len());
            let item = rest[..end].trim();
            rest = &rest[end..];
            let (key, value) = item.split_once([' ', '\t']).unwrap_or((item, ""));
            items.pairs.push((key, value.trim()));
        }
        items
    }

    pub(super) fn get(&self, key: &str) -> Option<&'a str> {
        self.pairs
            .as_slice()
            .iter()
            .find(|p| p.0 == key)
            .map(|p| p.1)
    }

    pub(super) fn name(&self) -> Result<&'a str, Bad> {
        match self.quoted {
            Some(Ok(name)) => Ok(name),
            Some(Err(())) => Err("unterminated quoted name".into()),
            None => Err("missing quoted name".into()),
        }
    }

    pub(super) fn optional<T>(
        &self,
        key: &'static str,
        parse: fn(&str) -> Option<T>,
    ) -> Result<Option<T>, Bad> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => parse(v)
                .map(Some)
                .ok_or_else(|| format!("bad `{key}` value `{}`", clip(v)).into()),
        }
    }

    pub(super) fn required<T>(
        &self,
        key: &'static str,
        parse: fn(&str) -> Option<T>,
    ) -> Result<T, Bad> {
        self.optional(key, parse)?
            .ok_or_else(|| format!("missing `{key}`").into())
    }

    /// `grid [ x, y, z ], block [ x, y, z ], ...`
    pub(super) fn grid(&self) -> Result<([u32; 3], [u32; 3]), Bad> {
        Ok((
            self.required("grid", parse_dim3)?,
            self.required("block", parse_dim3)?,
        ))
    }

    /// `deviceId D, contextId C, streamId S, graphId G, graphNodeId N, ...`
    pub(super) fn device(&self) -> Result<Placement, Bad> {
        Ok(Placement {
            device: self.required("deviceId", parse_u32)?,
            context: self.required("contextId", parse_u32)?,
            stream: self.required("streamId", parse_u32)?,
            graph_id: self.optional("graphId", parse_u32)?.unwrap_or(0),
            graph_node_id: self.optional("graphNodeId", parse_u64)?.unwrap_or(0),
        })
    }
}

pub(super) fn parse_u64(s: &str) -> Option<u64> {
    s.parse().ok()
}

/// A `u32`, or a negative `i32` (printed with `%d`) as its bit pattern.
pub(super) fn parse_u32(s: &str) -> Option<u32> {
    s.parse()
        .ok()
        .or_else(|| s.parse::<i32>().ok().map(|v| v as u32))
}

/// `[ x, y, z ]`
pub(super) fn parse_dim3(s: &str) -> Option<[u32; 3]> {
    let inner = s.strip_prefix('[')?.strip_suffix(']')?;
    let mut it = inner.split(',').map(|v| v.trim().parse::<u32>());
    let dims = [it.next()?.ok()?, it.next()?.ok()?, it.next()?.ok()?];
    it.next().is_none().then_some(dims)
}

/// At most 40 characters of user text, for messages.
pub(super) fn clip(s: &str) -> Cow<'_, str> {
    match s.char_indices().nth(40) {
        Some((i, _)) => format!("{}...", &s[..i]).into(),
        None => s.into(),
    }
}
