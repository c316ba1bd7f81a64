//! The last merge of one thread's native and Python frames, replayed when the
//! next capture's inputs are the same.
//!
//! `splice`'s merge is a function of its inputs alone: the native frames, how
//! the native walk ended, the Python frames as read (code, instruction, and
//! which ends its eval-loop group), whether the Python chain was cut at the
//! depth cap, and the room in the caller's buffer. When every one of them
//! equals the last merge's (each compared; nothing is taken from an address
//! or a depth alone), the output is the last merge's output, and is copied
//! instead of merged again. A launch loop takes the same stack launch after
//! launch: the comparison reads each input once, where the merge wrote every
//! frame of the output, and the caller learns that the stack is the one it
//! identified last time ([`Captured::unchanged`](crate::Captured)).

use super::chunks::Raw;
use crate::MAX_FRAMES;
use crate::frame::{Frame, StackEnd};

/// What a merge produced: `(frames, Python frames, cut)`.
pub(super) type Merged = (usize, usize, bool);

/// The last merge of one thread (see the module docs); part of its
/// [`crate::Trail`].
pub(crate) struct LastMerge {
    /// The trail's capture number of the merge kept here; 0: none.
    serial: u64,
    native: Box<[Frame]>,
    native_len: usize,
    walk_end: StackEnd,
    /// `(code, instruction, group end)` per Python frame, innermost first.
    raw: Box<[(u32, u32, bool)]>,
    raw_len: usize,
    truncated: bool,
    room: usize,
    out: Box<[Frame]>,
    merged: Merged,
    /// Set by the capture before the merge: the native frames from here on,
    /// and their number, are the capture just before's (the walk took them
    /// from its trail at the same depth).
    pub(crate) native_same_from: Option<usize>,
}

impl LastMerge {
    pub(crate) fn new() -> LastMerge {
        LastMerge::try_new().expect("memory for a merge")
    }

    /// [`LastMerge::new`], or `None` when memory is short.
    fn try_new() -> Option<LastMerge> {
        use crate::fallible::slice;
        Some(LastMerge {
            serial: 0,
            native: slice(MAX_FRAMES, Frame::default())?,
            native_len: 0,
            walk_end: StackEnd::Root,
            raw: slice(MAX_FRAMES, (0, 0, false))?,
            raw_len: 0,
            truncated: false,
            room: 0,
            out: slice(MAX_FRAMES, Frame::default())?,
            merged: (0, 0, false),
            native_same_from: None,
        })
    }

    /// If the inputs (`out[..native_len]` the native frames, `walk_end`,
    /// `raw`, `truncated`, and `out.len()`) are the last merge's, writes its
    /// output into `out`, keeps it as that of capture `serial`, and returns
    /// it with whether the merge replayed was capture `serial - 1`'s (the
    /// output is then that capture's). Nothing is written otherwise.
    pub(super) fn replay(
        &mut self,
        out: &mut [Frame],
        (native_len, walk_end): (usize, StackEnd),
        raw: &[Raw],
        truncated: bool,
        serial: u64,
    ) -> Option<(Merged, bool)> {
        let follows = self.serial != 0 && self.serial.checked_add(1) == Some(serial);
        // The native frames kept here are the capture just before's only if
        // this merge was (made or replayed) by that capture.
        let compared = self
            .native_same_from
            .filter(|_| follows)
            .map_or(native_len, |j| j.min(native_len));
        // The Python frames first, innermost first: where consecutive
        // captures differ (another operator's launch), they differ there.
        let same = self.serial != 0
            && self.room == out.len()
            && self.native_len == native_len
            && self.raw_len == raw.len()
            && self.walk_end == walk_end
            && self.truncated == truncated
            && self
                .raw
                .get(..raw.len())?
                .iter()
                .zip(raw)
                .all(|(k, r)| (k.0 == r.code) & (k.1 == r.instruction) & (k.2 == r.group_end))
            && self.native.get(..compared)? == out.get(..compared)?;
        if !same {
            return None;
        }
        let w = self.merged.0;
        out.get_mut(..w)?.copy_from_slice(self.out.get(..w)?);
        self.serial = serial;
        Some((self.merged, follows))
    }

    /// The output of the merge of capture `serial`, if it is the one kept.
    pub(crate) fn output(&self, serial: u64) -> Option<&[Frame]> {
        (serial != 0 && self.serial == serial)
            .then(|| self.out.get(..self.merged.0))
            .flatten()
    }

    /// Keeps the inputs of a merge about to be made (`out[..native_len]` is
    /// still the native frames); [`LastMerge::keep_output`] completes it.
    pub(super) fn keep_input(
        &mut self,
        out: &[Frame],
        native_len: usize,
        walk_end: StackEnd,
        raw: &[Raw],
        truncated: bool,
    ) {
        self.serial = 0;
        let (Some(native), Some(src), Some(dst)) = (
            self.native.get_mut(..native_len),
            out.get(..native_len),
            self.raw.get_mut(..raw.len()),
        ) else {
            return;
        };
        native.copy_from_slice(src);
        for (d, r) in dst.iter_mut().zip(raw) {
            *d = (r.code, r.instruction, r.group_end);
        }
        self.native_len = native_len;
        self.raw_len = raw.len();
        self.walk_end = walk_end;
        self.truncated = truncated;
        self.room = out.len();
    }

    /// Completes [`LastMerge::keep_input`] with the merge's output
    /// `out[..merged.0]`, kept as capture `serial` (0: not kept).
    pub(super) fn keep_output(&mut self, out: &[Frame], merged: Merged, serial: u64) {
        let (Some(dst), Some(src)) = (self.out.get_mut(..merged.0), out.get(..merged.0)) else {
            self.serial = 0;
            return;
        };
        dst.copy_from_slice(src);
        self.merged = merged;
        self.serial = serial;
    }
}

impl LastMerge {
    /// A new one on the heap: the trail that holds it may be made on an
    /// 8 KiB signal stack, where unoptimized builds keep a copy of each
    /// temporary (a boxed one costs the trail a pointer).
    /// A merge on the heap, or `None` when memory is short.
    pub(crate) fn try_boxed() -> Option<Box<LastMerge>> {
        crate::fallible::boxed(LastMerge::try_new()?)
    }
}

impl Default for LastMerge {
    fn default() -> Self {
        LastMerge::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{CodeId, ModuleId};

    fn native(m: u32, offset: u64) -> Frame {
        Frame::Native {
            module: ModuleId(m),
            offset,
            return_address: true,
        }
    }

    fn raw(code: u32, instruction: u32, group_end: bool) -> Raw {
        Raw {
            code,
            instruction,
            group_end,
            ..Raw::default()
        }
    }

    /// Native frames, walk end, Python frames, truncated, room.
    type Inputs<'a> = (&'a [Frame], StackEnd, &'a [Raw], bool, usize);

    /// A merge of `native` and `py` as `splice` would make it, kept.
    fn kept(native: &[Frame], py: &[Raw], serial: u64) -> (LastMerge, Vec<Frame>) {
        let mut last = LastMerge::new();
        let mut out = vec![Frame::default(); 16];
        out[..native.len()].copy_from_slice(native);
        last.keep_input(&out, native.len(), StackEnd::Root, py, false);
        let merged: Vec<Frame> = py
            .iter()
            .map(|r| Frame::Python {
                code: CodeId(r.code),
                instruction: r.instruction,
            })
            .chain(native.iter().copied())
            .collect();
        out[..merged.len()].copy_from_slice(&merged);
        last.keep_output(&out, (merged.len(), py.len(), false), serial);
        (last, merged)
    }

    #[test]
    fn the_last_merge_is_replayed_only_when_every_input_is_the_same() {
        let n = [native(1, 0x10), native(2, 0x20), native(3, 0x30)];
        let p = [raw(7, 4, false), raw(8, 6, false), raw(9, 8, true)];
        let (mut last, merged) = kept(&n, &p, 5);
        let mut try_with = |n: &[Frame], end: StackEnd, p: &[Raw], truncated: bool, room: usize| {
            let mut out = vec![Frame::default(); room];
            out[..n.len()].copy_from_slice(n);
            last.replay(&mut out, (n.len(), end), p, truncated, 6)
                .map(|(m, follows)| (out[..m.0].to_vec(), m, follows))
        };
        let replayed = try_with(&n, StackEnd::Root, &p, false, 16).unwrap();
        assert_eq!(replayed, (merged.clone(), (6, 3, false), true));
        // Each differs in one input only; the outermost native and Python
        // frames too (a replay that compared only the inner ones would take
        // them).
        let mut outer = n;
        outer[2] = native(3, 0x34);
        let mut other_module = n;
        other_module[1] = native(4, 0x20);
        let mut deep = p;
        deep[2] = raw(9, 10, true);
        let mut code = p;
        code[2] = raw(10, 8, true);
        let mut group = p;
        group[1] = raw(8, 6, true);
        let cases: [Inputs; 9] = [
            (&outer, StackEnd::Root, &p, false, 16),
            (&other_module, StackEnd::Root, &p, false, 16),
            (&n[..2], StackEnd::Root, &p, false, 16),
            (&n, StackEnd::PythonCut, &p, false, 16),
            (&n, StackEnd::Root, &deep, false, 16),
            (&n, StackEnd::Root, &code, false, 16),
            (&n, StackEnd::Root, &group, false, 16),
            (&n, StackEnd::Root, &p, true, 16),
            (&n, StackEnd::Root, &p, false, 15),
        ];
        for (i, (n, end, p, truncated, room)) in cases.into_iter().enumerate() {
            assert!(try_with(n, end, p, truncated, room).is_none(), "case {i}");
        }
        // Replayed again as capture 6 (kept so above), by capture 8: the
        // same output, but not that of the capture just before (7 was made
        // otherwise).
        let mut out = n.to_vec();
        out.resize(16, Frame::default());
        let (m, follows) = last
            .replay(&mut out, (3, StackEnd::Root), &p, false, 8)
            .unwrap();
        assert_eq!((&out[..m.0], follows), (&merged[..], false));
        out[..3].copy_from_slice(&n);
        let (_, follows) = last
            .replay(&mut out, (3, StackEnd::Root), &p, false, 9)
            .unwrap();
        assert!(follows);
        // Native frames the walk took from its trail at the same depth are
        // not compared, but only when the merge kept is the capture just
        // before's: a replay by capture 7 of capture 5's merge compares all.
        let mut deep = n.to_vec();
        deep[2] = native(3, 0x34);
        deep.resize(16, Frame::default());
        let (mut last, _) = kept(&n, &p, 5);
        last.native_same_from = Some(1);
        assert!(
            last.replay(&mut deep.clone(), (3, StackEnd::Root), &p, false, 7)
                .is_none()
        );
        let (m, follows) = last
            .replay(&mut deep, (3, StackEnd::Root), &p, false, 6)
            .unwrap();
        assert!(follows && m.0 == 6);
        // Never completed (a merge made otherwise): nothing to replay.
        let mut out = n.to_vec();
        out.resize(16, Frame::default());
        let mut half = LastMerge::new();
        half.keep_input(&out, 3, StackEnd::Root, &p, false);
        assert!(
            half.replay(&mut out, (3, StackEnd::Root), &p, false, 1)
                .is_none()
        );
    }
}
