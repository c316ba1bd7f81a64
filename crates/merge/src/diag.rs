//! Diagnostics for malformed input: every bad line or record is counted, and the
//! first few are kept with their place (`file:line` or `file@byte-offset`) so the
//! CLI can report them once.

use std::fmt;

/// How many diagnostics are kept verbatim per input; the rest are only counted.
pub(crate) const KEPT: usize = 10;

/// One problem found in an input, with its place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// `path:line` or `path@offset`.
    pub location: String,
    /// What is wrong, lower case, no trailing period.
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.location, self.message)
    }
}

/// Counted problems of one input.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Diagnostics {
    /// Total number of problems.
    pub count: u64,
    /// The first few problems (ten at most).
    pub first: Vec<Diagnostic>,
}

impl Diagnostics {
    /// Counts a problem, keeping its text while fewer than ten are kept.
    pub fn push(&mut self, location: impl FnOnce() -> String, message: impl FnOnce() -> String) {
        self.count += 1;
        if self.first.len() < KEPT {
            self.first.push(Diagnostic {
                location: location(),
                message: message(),
            });
        }
    }

    /// Adds another input's problems.
    pub fn extend(&mut self, other: Diagnostics) {
        self.count += other.count;
        let room = KEPT.saturating_sub(self.first.len());
        self.first.extend(other.first.into_iter().take(room));
    }

    /// Whether nothing was wrong.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_first_and_counts_all() {
        let mut d = Diagnostics::default();
        for i in 0..25 {
            d.push(|| format!("f:{i}"), || "bad".into());
        }
        assert_eq!(d.count, 25);
        assert_eq!(d.first.len(), KEPT);
        assert_eq!(d.first[3].to_string(), "f:3: bad");
        let mut e = Diagnostics::default();
        e.push(|| "g:1".into(), || "x".into());
        e.extend(d);
        assert_eq!(e.count, 26);
        assert_eq!(e.first.len(), KEPT);
        assert_eq!(e.first[0].location, "g:1");
    }
}
