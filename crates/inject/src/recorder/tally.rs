//! How often each runtime and driver callback fired. The exit log names the
//! calls a program makes most: what recording costs a program is mostly its
//! number of callbacks, and the calls it makes around each launch (queries,
//! the libraries' own driver calls) are not in the trace.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

use super::MAX_CBID;

/// Counters are striped by thread, so that threads launching at once do not
/// share a cache line of counters.
const STRIPES: usize = 8;
const PER_STRIPE: usize = 2 * MAX_CBID as usize;

pub(super) struct Tally {
    counts: Box<[AtomicU32]>,
}

impl Tally {
    pub(super) fn new() -> Self {
        Self {
            counts: (0..STRIPES * PER_STRIPE)
                .map(|_| AtomicU32::new(0))
                .collect(),
        }
    }

    /// One callback entered. `stripe` is any per-thread number (the address
    /// of the thread's own state); `domain` is 0 for the runtime, 1 for the
    /// driver.
    pub(super) fn add(&self, stripe: usize, domain: usize, cbid: u32) {
        let cbid = cbid as usize;
        if cbid < MAX_CBID as usize {
            let i = (stripe % STRIPES) * PER_STRIPE + domain * MAX_CBID as usize + cbid;
            self.counts[i].fetch_add(1, Relaxed);
        }
    }

    /// Entries by domain and callback id, summed over the stripes.
    fn totals(&self) -> Vec<u64> {
        let mut t = vec![0u64; PER_STRIPE];
        for (i, c) in self.counts.iter().enumerate() {
            t[i % PER_STRIPE] += u64::from(c.load(Relaxed));
        }
        t
    }

    /// The log line: callbacks per domain and the `top` calls made most,
    /// named by `name(domain, cbid)`.
    pub(super) fn summary(&self, top: usize, name: &dyn Fn(usize, u32) -> String) -> String {
        let t = self.totals();
        let max = MAX_CBID as usize;
        let runtime: u64 = t[..max].iter().sum();
        let driver: u64 = t[max..].iter().sum();
        let mut most: Vec<(u64, usize)> = t
            .iter()
            .enumerate()
            .filter(|&(_, &n)| n > 0)
            .map(|(i, &n)| (n, i))
            .collect();
        most.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let list: Vec<String> = most
            .iter()
            .take(top)
            .map(|&(n, i)| format!("{} {n}", name(i / max, (i % max) as u32)))
            .collect();
        format!(
            "callbacks entered: {runtime} runtime, {driver} driver; most often: {}",
            if list.is_empty() {
                "none".to_owned()
            } else {
                list.join(", ")
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_summed_over_threads_and_ranked() {
        let t = Tally::new();
        for stripe in 0..20 {
            t.add(stripe, 0, 7);
        }
        t.add(3, 1, 7);
        t.add(3, 1, 7);
        t.add(1, 0, 9);
        t.add(1, 0, MAX_CBID); // out of range: ignored
        let name = |d: usize, c: u32| format!("{}{c}", ["rt", "drv"][d]);
        assert_eq!(
            t.summary(2, &name),
            "callbacks entered: 21 runtime, 2 driver; most often: rt7 20, drv7 2"
        );
        assert_eq!(
            Tally::new().summary(3, &name),
            "callbacks entered: 0 runtime, 0 driver; most often: none"
        );
    }
}
