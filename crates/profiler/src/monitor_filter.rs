//! `gpuperf monitor`'s user-space filters of GPU driver events: the rings
//! asked for (`--ring`) and a rate limit (`--max-rate`), both deciding whole
//! jobs, and counting what each left out. Xid errors always pass.

use std::collections::HashSet;

use crate::driver::{DriverEvent, DriverKind};

/// The filters and what they left out.
#[derive(Debug, Default)]
pub struct Filter {
    /// Only jobs on these rings; empty: every ring. Default is empty.
    rings: Vec<String>,
    /// At most this many events per second of event time. Default: no limit.
    max_rate: Option<u64>,
    /// The current second of event time and the events let in during it.
    window: (u64, u64),
    /// Jobs the rate limit let in, or left out, at their queueing, until done.
    rated_in: HashSet<u64>,
    rated_out: HashSet<u64>,
    /// Events left out by the rate limit.
    pub over_rate: u64,
    /// Job events left out for their ring.
    pub off_ring: u64,
}

impl Filter {
    /// Keeps jobs on `rings` (all when empty) and at most `max_rate` events
    /// per second.
    pub fn new(rings: Vec<String>, max_rate: Option<u64>) -> Self {
        Self {
            rings,
            max_rate,
            window: (u64::MAX, 0),
            ..Self::default()
        }
    }

    /// Whether `e` passes, counting it where it does not.
    pub fn admit(&mut self, e: &DriverEvent) -> bool {
        let is_job = matches!(
            e.kind,
            DriverKind::JobQueued
                | DriverKind::JobRun
                | DriverKind::JobDone
                | DriverKind::JobWaitDep
        );
        if is_job && !self.rings.is_empty() && !self.rings.contains(&e.ring) {
            self.off_ring += 1;
            return false;
        }
        // A job's later events follow the decision made at its queueing.
        let later = matches!(
            e.kind,
            DriverKind::JobRun | DriverKind::JobDone | DriverKind::JobWaitDep
        );
        let admitted = if e.kind == DriverKind::Xid {
            true
        } else if later && self.rated_in.contains(&e.id) {
            if e.kind == DriverKind::JobDone {
                self.rated_in.remove(&e.id);
            }
            true
        } else if later && self.rated_out.contains(&e.id) {
            if e.kind == DriverKind::JobDone {
                self.rated_out.remove(&e.id);
            }
            false
        } else {
            let ok = self.within_rate(e);
            if e.kind == DriverKind::JobQueued && self.max_rate.is_some() {
                if ok {
                    self.rated_in.insert(e.id);
                } else {
                    self.rated_out.insert(e.id);
                }
            }
            ok
        };
        if !admitted {
            self.over_rate += 1;
        }
        admitted
    }

    /// Whether the rate limit lets `e` through: at most `max_rate` events in
    /// each second of event time.
    fn within_rate(&mut self, e: &DriverEvent) -> bool {
        let Some(max) = self.max_rate else {
            return true;
        };
        let second = e.ts_ns / 1_000_000_000;
        if self.window.0 != second {
            self.window = (second, 0);
        }
        if self.window.1 >= max {
            return false;
        }
        self.window.1 += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: DriverKind, ts_ns: u64, id: u64, ring: &str) -> DriverEvent {
        DriverEvent {
            ts_ns,
            dur_ns: 0,
            id,
            ret: 0,
            pid: 1,
            tid: 1,
            kind,
            arg: 0,
            comm: "app".into(),
            ring: ring.into(),
            msg: String::new(),
        }
    }

    #[test]
    fn max_rate_keeps_that_many_per_second_of_event_time() {
        let mut f = Filter::new(vec![], Some(3));
        // Five events in second 1, two in second 2.
        let kept = [1_000, 1_100, 1_200, 1_300, 1_400, 2_000, 2_100]
            .into_iter()
            .filter(|&ts| f.admit(&event(DriverKind::Ioctl, ts * 1_000_000, 0, "")))
            .count();
        assert_eq!((kept, f.over_rate), (5, 2));
    }

    #[test]
    fn a_job_is_kept_or_left_out_whole_and_xids_always_pass() {
        use DriverKind::{JobDone as D, JobQueued as Q, JobRun as R, Xid as X};
        let mut f = Filter::new(vec![], Some(1));
        let s = 1_000_000_000;
        // Job 1 fills second 1; job 2 is left out, its run and done too,
        // though they fall in second 2; so is the Xid's place in second 1.
        let got: Vec<bool> = [
            (Q, s, 1),
            (Q, s + 1, 2),
            (X, s + 2, 0),
            (R, 2 * s, 2),
            (D, 2 * s + 1, 2),
            (R, 2 * s + 2, 1),
            (D, 2 * s + 3, 1),
        ]
        .into_iter()
        .map(|(k, ts, id)| f.admit(&event(k, ts, id, "r")))
        .collect();
        assert_eq!(got, [true, false, true, false, false, true, true]);
        assert_eq!(f.over_rate, 3);
    }

    #[test]
    fn rings_filter_jobs_only() {
        let mut f = Filter::new(vec!["a".into()], None);
        assert!(f.admit(&event(DriverKind::JobQueued, 1, 1, "a")));
        assert!(!f.admit(&event(DriverKind::JobQueued, 2, 2, "b")));
        assert!(f.admit(&event(DriverKind::Ioctl, 3, 0, "b")));
        assert_eq!(f.off_ring, 1);
    }
}
