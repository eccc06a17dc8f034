//! Histograms of stack distances: the log-scale buckets that byte distances fall in, and
//! the helpers that fill and read the histograms (`Level` and `StackDistances` both keep
//! them), so that the bucket arithmetic lives in one place.

/// Log-scale buckets with 1/64 relative width: byte distances span ten orders of magnitude.
pub fn log_bucket(v: u64) -> usize {
    if v < 128 {
        return v as usize;
    }
    let e = 63 - v.leading_zeros(); // >= 7
    let shift = e - 6;
    let mantissa = (v >> shift) as usize; // 64..=127
    128 + (e as usize - 7) * 64 + (mantissa - 64)
}

/// The largest value of a bucket (a distance ≤ this hits in a cache of this size).
pub fn log_bucket_high(index: usize) -> u64 {
    if index < 128 {
        return index as u64;
    }
    let e = (index - 128) / 64 + 7;
    let mantissa = ((index - 128) % 64 + 64) as u64;
    let shift = e as u32 - 6;
    ((mantissa + 1) << shift) - 1
}

pub(super) fn bump(histogram: &mut Vec<u64>, at: usize) {
    if at >= histogram.len() {
        histogram.resize(at + 1, 0);
    }
    histogram[at] += 1;
}

/// Requests waiting to be counted in a histogram too large for the caches (exact distances
/// in objects: one bucket per distance, 8 MB at 10⁶ objects). Counted one at a time, each
/// count waits for its bucket's cache miss; counted in batches, the buckets are fetched ahead
/// and the misses overlap.
#[derive(Default)]
pub(super) struct Tally {
    pending: Vec<usize>,
}

impl Tally {
    const BATCH: usize = 1024;
    const AHEAD: usize = 16;

    #[inline]
    pub(super) fn push(&mut self, histogram: &mut Vec<u64>, at: usize) {
        self.pending.push(at);
        if self.pending.len() >= Self::BATCH {
            self.flush(histogram);
        }
    }

    /// Counts every pending request (`histogram` is complete after it).
    pub(super) fn flush(&mut self, histogram: &mut Vec<u64>) {
        let Some(&top) = self.pending.iter().max() else {
            return;
        };
        if top >= histogram.len() {
            histogram.resize(top + 1, 0);
        }
        for (i, &at) in self.pending.iter().enumerate() {
            if let Some(&ahead) = self.pending.get(i + Self::AHEAD) {
                crate::mem::prefetch(&histogram[ahead]);
            }
            histogram[at] += 1;
        }
        self.pending.clear();
    }
}

pub(super) fn cumulate(histogram: &[u64]) -> Vec<u64> {
    let mut sum = 0;
    let mut out: Vec<u64> = histogram
        .iter()
        .map(|n| {
            sum += n;
            sum
        })
        .collect();
    if out.is_empty() {
        out.push(0);
    }
    out
}

/// Requests of a log-bucketed histogram whose bucket lies wholly within `limit`.
pub(super) fn within_bytes(histogram: &[u64], limit: f64) -> f64 {
    histogram
        .iter()
        .enumerate()
        .take_while(|(i, _)| (log_bucket_high(*i) as f64) <= limit)
        .map(|(_, n)| *n)
        .sum::<u64>() as f64
}
