//! One trace event as the JSON holds it ([`Event`], [`Args`]), and the
//! conversion of its numbers: µs timestamps to exact ns, ids, sync kinds.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

#[derive(Deserialize, Default, Debug, PartialEq)]
pub(super) struct Event<'a> {
    #[serde(borrow, default)]
    pub(super) ph: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(super) cat: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(super) name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(super) pid: Option<Raw<'a>>,
    #[serde(borrow, default)]
    pub(super) tid: Option<Raw<'a>>,
    #[serde(borrow, default)]
    pub(super) ts: Option<Raw<'a>>,
    #[serde(borrow, default)]
    pub(super) dur: Option<Raw<'a>>,
    // Boxed: the event is moved several times on its way out of serde, and most
    // of its size is here.
    #[serde(borrow, default)]
    pub(super) args: Option<Box<Args<'a>>>,
    /// A flow event's id (`fwdbwd` flows link a forward op to its backward op).
    #[serde(borrow, default)]
    pub(super) id: Option<Raw<'a>>,
}

#[derive(Deserialize, Default, Debug, PartialEq)]
pub(super) struct Args<'a> {
    #[serde(borrow, default)]
    pub(super) correlation: Option<Raw<'a>>,
    #[serde(borrow, default)]
    pub(super) cbid: Option<Raw<'a>>,
    #[serde(borrow, default)]
    pub(super) device: Option<Raw<'a>>,
    #[serde(borrow, default)]
    pub(super) context: Option<Raw<'a>>,
    #[serde(borrow, default)]
    pub(super) stream: Option<Raw<'a>>,
    #[serde(borrow, default)]
    pub(super) bytes: Option<Raw<'a>>,
    #[serde(default)]
    pub(super) grid: Option<[u32; 3]>,
    #[serde(default)]
    pub(super) block: Option<[u32; 3]>,
    #[serde(borrow, default, rename = "Python id")]
    pub(super) python_id: Option<Raw<'a>>,
    #[serde(borrow, default, rename = "Python parent id")]
    pub(super) python_parent: Option<Raw<'a>>,
    #[serde(borrow, default, rename = "Call stack")]
    pub(super) call_stack: Option<Cow<'a, str>>,
    /// Metadata events' value.
    #[serde(borrow, default)]
    pub(super) name: Option<Cow<'a, str>>,
    /// A `cuda_sync` event's kind (`Stream Sync`, …), as its name.
    #[serde(borrow, default)]
    pub(super) cuda_sync_kind: Option<Cow<'a, str>>,
    /// An event sync's or stream wait's event: the stream it was recorded on,
    /// the correlation id of the `cudaEventRecord` call, CUPTI's event id (`-1`
    /// when Kineto does not know).
    #[serde(borrow, default)]
    pub(super) wait_on_stream: Option<Raw<'a>>,
    #[serde(borrow, default)]
    pub(super) wait_on_cuda_event_record_corr_id: Option<Raw<'a>>,
    #[serde(borrow, default)]
    pub(super) wait_on_cuda_event_id: Option<Raw<'a>>,
    /// An operator's autograd sequence number: a backward op carries its
    /// forward op's.
    #[serde(borrow, default, rename = "Sequence number")]
    pub(super) sequence_number: Option<Raw<'a>>,
    /// An operator's forward thread: `0` for forward ops, a small thread index
    /// (not an OS tid) for backward ops.
    #[serde(borrow, default, rename = "Fwd thread id")]
    pub(super) fwd_thread_id: Option<Raw<'a>>,
    #[serde(borrow, default, rename = "graph id")]
    pub(super) graph_id: Option<Raw<'a>>,
    #[serde(borrow, default, rename = "graph node id")]
    pub(super) graph_node_id: Option<Raw<'a>>,
    /// A peer-to-peer copy's devices: from, to, and the one that ran it.
    #[serde(borrow, default, rename = "fromDevice")]
    pub(super) from_device: Option<Raw<'a>>,
    #[serde(borrow, default, rename = "toDevice")]
    pub(super) to_device: Option<Raw<'a>>,
    #[serde(borrow, default, rename = "inDevice")]
    pub(super) in_device: Option<Raw<'a>>,
    /// The context of the device that ran a peer-to-peer copy.
    #[serde(borrow, default, rename = "inContext")]
    pub(super) in_context: Option<Raw<'a>>,
}

/// The text of a JSON value, as serde_json's `RawValue` gives it (the fast path
/// in [`scan`] makes it too).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Raw<'a>(pub(super) &'a str);

impl<'de: 'a, 'a> Deserialize<'de> for Raw<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        <&RawValue>::deserialize(d).map(|r| Raw(r.get()))
    }
}

/// The trace's `distributedInfo`: the rank of the process that wrote it.
#[derive(Deserialize, Default)]
pub(super) struct DistributedInfo {
    #[serde(default)]
    pub(super) rank: Option<u32>,
    #[serde(default)]
    pub(super) world_size: Option<u32>,
}

#[derive(Deserialize)]
pub(super) struct DeviceProp {
    #[serde(default)]
    pub(super) id: Option<u32>,
    #[serde(default)]
    pub(super) name: Option<String>,
    #[serde(default, rename = "computeMajor")]
    pub(super) major: Option<u16>,
    #[serde(default, rename = "computeMinor")]
    pub(super) minor: Option<u16>,
}

/// A JSON number's text, or a string holding one (Kineto writes some ids as
/// strings), without quotes.
pub(super) fn number_text(raw: Raw<'_>) -> &str {
    let t = raw.0;
    t.strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(t)
}

pub(super) fn parse_int(raw: Option<Raw<'_>>) -> Option<i64> {
    number_text(raw?).parse().ok()
}

pub(super) fn parse_u32(raw: Option<Raw<'_>>) -> Option<u32> {
    u32::try_from(parse_int(raw)?).ok()
}

/// An integer number of ns.
pub(super) fn parse_ns_int(t: &str) -> Option<u64> {
    t.trim_matches('"').parse().ok()
}

/// A non-negative decimal number of µs (`12`, `12.5`, `1.25e3`) as ns, from its
/// text: exact up to the ns, rounded half up below it.
pub(super) fn us_to_ns(text: &str) -> Option<u64> {
    // Twice per event: the usual forms, `123` and `123.456`, take one pass.
    let text = text.as_bytes();
    let mut ns: u64 = 0;
    let mut decimals: Option<u32> = None;
    let usual = text.first().is_some_and(u8::is_ascii_digit)
        && text.iter().all(|&b| match (b, &mut decimals) {
            (b'.', d @ None) => {
                *d = Some(0);
                true
            }
            (b'0'..=b'9', Some(3)) => false,
            (b'0'..=b'9', d) => {
                if let Some(d) = d {
                    *d += 1;
                }
                match ns
                    .checked_mul(10)
                    .and_then(|v| v.checked_add(u64::from(b - b'0')))
                {
                    Some(v) => {
                        ns = v;
                        true
                    }
                    None => false,
                }
            }
            _ => false,
        });
    if usual {
        return ns.checked_mul(10u64.pow(3 - decimals.unwrap_or(0)));
    }
    // Any other form, without allocating.
    let (mantissa, exp) = match text.iter().position(|&b| b == b'e' || b == b'E') {
        Some(i) => (
            &text[..i],
            std::str::from_utf8(&text[i + 1..])
                .ok()?
                .parse::<i32>()
                .ok()?,
        ),
        None => (text, 0),
    };
    let (int, frac) = match mantissa.iter().position(|&b| b == b'.') {
        Some(i) => (&mantissa[..i], &mantissa[i + 1..]),
        None => (mantissa, &mantissa[mantissa.len()..]),
    };
    if int.is_empty() && frac.is_empty()
        || !int.iter().all(u8::is_ascii_digit)
        || !frac.iter().all(u8::is_ascii_digit)
    {
        return None;
    }
    // value = digits × 10^(exp − len(frac)) µs = digits × 10^(exp − len(frac) + 3) ns,
    // where digits is int and frac written together, without leading zeros: the
    // bytes of `hi` then `lo`.
    let zeros = |d: &[u8]| d.iter().take_while(|&&b| b == b'0').count();
    let (hi, lo) = match zeros(int) {
        z if z < int.len() => (&int[z..], frac),
        _ => (&int[int.len()..], &frac[zeros(frac)..]),
    };
    let len = hi.len() + lo.len();
    // The first `n` digits as a number, if it fits.
    let value = |n: usize| -> Option<u64> {
        let (h, l) = (&hi[..n.min(hi.len())], &lo[..n.saturating_sub(hi.len())]);
        h.iter().chain(l).try_fold(0u64, |v, &d| {
            v.checked_mul(10)?.checked_add(u64::from(d - b'0'))
        })
    };
    let nth = |i: usize| {
        if i < hi.len() {
            hi[i]
        } else {
            lo[i - hi.len()]
        }
    };
    let shift = exp
        .checked_sub(i32::try_from(frac.len()).ok()?)?
        .checked_add(3)?;
    if len == 0 {
        return Some(0);
    }
    if shift >= 0 {
        return value(len)?.checked_mul(10u64.checked_pow(u32::try_from(shift).ok()?)?);
    }
    let cut = usize::try_from(-shift).ok()?;
    if cut > len {
        // Below 1 ns: rounds to 0 or 1.
        let first = if cut == len + 1 { nth(0) } else { b'0' };
        return Some(u64::from(first >= b'5'));
    }
    let keep = len - cut;
    value(keep)?.checked_add(u64::from(nth(keep) >= b'5'))
}

/// CUPTI's `CUpti_ActivitySynchronizationType` of a `cuda_sync` event, from the
/// name Kineto gives each type.
pub(super) fn sync_type(kind: &str) -> Option<u8> {
    match kind {
        "Unknown Sync" => Some(0),
        "Event Sync" => Some(1),
        "Stream Wait Event" => Some(2),
        "Stream Sync" => Some(3),
        "Context Sync" => Some(4),
        _ => None,
    }
}

pub(super) fn parse_us(raw: Option<Raw<'_>>) -> Option<u64> {
    us_to_ns(number_text(raw?))
}

/// Frames never hold `;` or line breaks (the folded format's separators).
pub(super) fn frame_text(s: &str) -> Cow<'_, str> {
    if s.contains([';', '\n', '\r']) {
        Cow::Owned(
            s.chars()
                .map(|c| match c {
                    ';' => ':',
                    '\n' | '\r' => ' ',
                    c => c,
                })
                .collect(),
        )
    } else {
        Cow::Borrowed(s)
    }
}
