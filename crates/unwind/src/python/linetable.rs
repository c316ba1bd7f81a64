//! Line numbers from a copied line table.

/// 3.10 `co_linetable`: pairs of (bytecode bytes, signed line delta); a delta of
/// -128 means "no line". `offset` is in bytes.
pub(crate) fn line_310(table: &[u8], first_line: i32, offset: u32) -> Option<u32> {
    let mut line = first_line;
    let mut start = 0u32;
    for pair in table.chunks_exact(2) {
        let end = start + u32::from(pair[0]);
        let delta = pair[1] as i8;
        let this = if delta == -128 {
            None
        } else {
            line += i32::from(delta);
            Some(line)
        };
        if start <= offset && offset < end {
            return this.and_then(|l| u32::try_from(l).ok());
        }
        start = end;
    }
    None
}

/// 3.11+ location table: entries of (code, length in code units, data); `index`
/// is in code units.
pub(crate) fn line_locations(table: &[u8], first_line: i32, index: u32) -> Option<u32> {
    let mut line = first_line;
    let mut start = 0u32;
    let mut i = 0;
    while i < table.len() {
        let first = table[i];
        i += 1;
        let code = (first >> 3) & 15;
        let len = u32::from(first & 7) + 1;
        let delta = match code {
            15 => None,
            14 => {
                let d = svarint(table, &mut i);
                for _ in 0..3 {
                    varint(table, &mut i);
                }
                Some(d)
            }
            13 => Some(svarint(table, &mut i)),
            10..=12 => {
                i += 2;
                Some(i32::from(code) - 10)
            }
            _ => {
                i += 1;
                Some(0)
            }
        };
        let this = delta.map(|d| {
            line += d;
            line
        });
        if start <= index && index < start + len {
            return this.and_then(|l| u32::try_from(l).ok());
        }
        start += len;
    }
    None
}

fn varint(t: &[u8], i: &mut usize) -> u32 {
    let mut v = 0u32;
    let mut shift = 0;
    while let Some(&b) = t.get(*i) {
        *i += 1;
        v |= u32::from(b & 63).checked_shl(shift).unwrap_or(0);
        shift += 6;
        if b & 64 == 0 {
            break;
        }
    }
    v
}

fn svarint(t: &[u8], i: &mut usize) -> i32 {
    let v = varint(t, i);
    if v & 1 != 0 {
        -((v >> 1) as i32)
    } else {
        (v >> 1) as i32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v310_pairs() {
        // 6 bytes at line +1, 4 bytes without a line, 2 bytes at line +2.
        let t = [6, 1, 4, 0x80, 2, 2];
        assert_eq!(line_310(&t, 10, 0), Some(11));
        assert_eq!(line_310(&t, 10, 7), None);
        assert_eq!(line_310(&t, 10, 10), Some(13));
        assert_eq!(line_310(&t, 10, 12), None);
    }

    #[test]
    fn locations_short_one_line_long_and_none() {
        let t = [
            0x80 | (1 << 3) | 1, // short form, 2 units, line +0
            0,                   // column byte
            0x80 | (11 << 3),    // one-line form, 1 unit, line +1
            0,
            0,
            0x80 | (13 << 3) | 2, // no-column form, 3 units, line delta svarint
            4,                    // +2
            0x80 | (14 << 3),     // long form, 1 unit
            3,                    // -1
            0,
            0,
            0,
            0x80 | (15 << 3), // no location
        ];
        assert_eq!(line_locations(&t, 5, 0), Some(5));
        assert_eq!(line_locations(&t, 5, 2), Some(6));
        assert_eq!(line_locations(&t, 5, 5), Some(8));
        assert_eq!(line_locations(&t, 5, 6), Some(7));
        assert_eq!(line_locations(&t, 5, 7), None);
    }
}
