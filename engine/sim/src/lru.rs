//! Exact LRU stack distances in one pass, by object count and by bytes, optionally on a
//! spatially hashed sample of the objects (SHARDS, Waldspurger et al., FAST '15).
//!
//! The stack distance of a request is the number of distinct objects (or their bytes)
//! touched since the previous request for the same object, itself included: an LRU cache
//! of `c` objects hits exactly the requests with distance ≤ `c`, so one pass yields the
//! whole miss-ratio curve. Each object's latest access is a marker in a Fenwick tree over
//! time; the markers after an object's own count the distance in O(log n). Positions are
//! renumbered when the tree fills, so memory follows the objects, not the requests.
//!
//! With sampling, an object is kept when its hash falls under `rate × 2^24`; distances in
//! the sample are scaled by `1 / rate`, and the difference between the requests expected in
//! the sample and those seen is added to the nearest bucket ("SHARDS-adj"), which removes
//! most of the bias a few very popular objects cause.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::fenwick::Fenwick;

const SAMPLE_BITS: u32 = 24;

/// splitmix64: a fast, well-mixed hash of an object id (sampling must not follow id order).
pub fn mix(id: u64) -> u64 {
    let mut z = id.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Object ids are hashed with `mix` (SipHash, the default, costs more than the rest of a
/// request's bookkeeping on a warm cache).
#[derive(Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = mix(self.0 ^ b as u64);
        }
    }
    fn write_u64(&mut self, id: u64) {
        self.0 = mix(id);
    }
}

pub type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;

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

pub struct StackDistances {
    threshold: u64,
    salt: u64,
    rate: f64,
    last: IdMap<(u32, u32)>, // object -> (position of its latest marker, its size then)
    markers: Fenwick,        // (1, size) at each object's latest access
    next: usize,
    live_bytes: u64,
    /// distance in objects (1-based, in the sample) -> requests
    pub by_objects: Vec<u64>,
    /// log bucket of the distance in bytes (in the sample) -> requests
    pub by_bytes: Vec<u64>,
    /// first requests of an object: a miss at every size
    pub cold: u64,
    pub requests: u64,
    pub sampled: u64,
    /// requests that only fill the stack, before any is counted (a synthetic stream's start)
    warmup: u64,
    seen: u64,
}

impl StackDistances {
    /// `rate` in (0, 1]: 1 is exact; 0.01 keeps about 1 % of the objects.
    pub fn new(rate: f64) -> Self {
        Self::with_seed(rate, 0)
    }

    /// Another `seed` samples another set of objects (to see the sampling's own spread).
    pub fn with_seed(rate: f64, seed: u64) -> Self {
        let rate = rate.clamp(1.0 / (1u64 << SAMPLE_BITS) as f64, 1.0);
        let threshold = (rate * (1u64 << SAMPLE_BITS) as f64).round() as u64;
        StackDistances {
            threshold,
            salt: mix(seed),
            rate: threshold as f64 / (1u64 << SAMPLE_BITS) as f64,
            last: IdMap::default(),
            markers: Fenwick::new(1024),
            next: 0,
            live_bytes: 0,
            by_objects: vec![0],
            by_bytes: Vec::new(),
            cold: 0,
            requests: 0,
            sampled: 0,
            warmup: 0,
            seen: 0,
        }
    }

    /// The first `requests` requests fill the cache without being counted: the curve is then
    /// of a cache that runs on (steady state), not of one that starts empty.
    pub fn set_warmup(&mut self, requests: u64) {
        self.warmup = requests;
    }

    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// Distinct objects seen in the sample (divide by `rate` for the trace's estimate).
    pub fn objects(&self) -> usize {
        self.last.len()
    }

    pub fn access(&mut self, id: u64, size: u32) {
        self.seen += 1;
        let counted = self.seen > self.warmup;
        self.requests += counted as u64;
        if self.threshold < (1u64 << SAMPLE_BITS)
            && (mix(id ^ self.salt) & ((1u64 << SAMPLE_BITS) - 1)) >= self.threshold
        {
            return;
        }
        self.sampled += counted as u64;
        if self.next == self.markers.capacity() {
            self.compact();
        }
        let live = self.last.len() as u64;
        match self.last.get(&id).copied() {
            Some((pos, old)) => {
                let pos = pos as usize;
                let [older, older_bytes] = self.markers.prefix(pos + 1);
                if counted {
                    self.record(
                        live - older + 1,
                        self.live_bytes - older_bytes + size as u64,
                    );
                }
                self.markers
                    .add(pos, [u64::MAX, 0u64.wrapping_sub(old as u64)]); // -1, -old
                self.live_bytes -= old as u64;
            }
            None if counted => self.cold += 1,
            None => {}
        }
        let at = self.next;
        self.markers.add(at, [1, size as u64]);
        self.live_bytes += size as u64;
        self.last.insert(id, (at as u32, size));
        self.next += 1;
    }

    fn record(&mut self, objects: u64, bytes: u64) {
        let d = objects as usize;
        if d >= self.by_objects.len() {
            self.by_objects.resize(d + 1, 0);
        }
        self.by_objects[d] += 1;
        let b = log_bucket(bytes);
        if b >= self.by_bytes.len() {
            self.by_bytes.resize(b + 1, 0);
        }
        self.by_bytes[b] += 1;
    }

    /// Renumber the live markers 0..live in time order, in a tree twice that size.
    fn compact(&mut self) {
        let mut order: Vec<(u32, u64)> =
            self.last.iter().map(|(id, (pos, _))| (*pos, *id)).collect();
        order.sort_unstable();
        let len = (order.len() * 2).max(1024);
        self.markers = Fenwick::new(len);
        for (i, (_, id)) in order.iter().enumerate() {
            let entry = self.last.get_mut(id).expect("live object");
            entry.0 = i as u32;
            self.markers.add(i, [1, entry.1 as u64]);
        }
        self.next = order.len();
    }

    /// Requests expected in the sample minus those seen (SHARDS-adj), counted as hits at the
    /// smallest size: it can be negative.
    fn adjustment(&self) -> f64 {
        self.requests as f64 * self.rate - self.sampled as f64
    }

    fn miss_ratio(&self, hits: f64) -> f64 {
        let expected = self.requests as f64 * self.rate;
        if expected <= 0.0 {
            return 1.0;
        }
        let adjusted = if self.rate < 1.0 {
            hits + self.adjustment()
        } else {
            hits
        };
        (1.0 - adjusted / expected).clamp(0.0, 1.0)
    }

    /// Miss ratio of an LRU cache of each of `sizes` objects.
    pub fn miss_ratios_by_objects(&self, sizes: &[f64]) -> Vec<f64> {
        let mut cumulative = Vec::with_capacity(self.by_objects.len());
        let mut sum = 0u64;
        for n in &self.by_objects {
            sum += n;
            cumulative.push(sum);
        }
        sizes
            .iter()
            .map(|&c| {
                let d = (c * self.rate).floor().max(0.0) as usize;
                let hits = cumulative[d.min(cumulative.len() - 1)] as f64;
                self.miss_ratio(hits)
            })
            .collect()
    }

    /// Miss ratio of an LRU cache of each of `sizes` bytes (a distance hits when its
    /// bucket lies wholly within the size: within 1/64 of exact).
    pub fn miss_ratios_by_bytes(&self, sizes: &[f64]) -> Vec<f64> {
        sizes
            .iter()
            .map(|&c| {
                let limit = c * self.rate;
                let hits: u64 = self
                    .by_bytes
                    .iter()
                    .enumerate()
                    .take_while(|(i, _)| (log_bucket_high(*i) as f64) <= limit)
                    .map(|(_, n)| *n)
                    .sum();
                self.miss_ratio(hits as f64)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The textbook LRU: a list, most recent first.
    fn naive_miss_ratio(trace: &[u64], capacity: usize) -> f64 {
        let mut stack: Vec<u64> = Vec::new();
        let mut misses = 0;
        for &id in trace {
            match stack.iter().position(|&x| x == id) {
                Some(i) if i < capacity => {
                    stack.remove(i);
                }
                Some(i) => {
                    stack.remove(i);
                    misses += 1;
                }
                None => misses += 1,
            }
            stack.insert(0, id);
        }
        misses as f64 / trace.len() as f64
    }

    fn trace(n: usize, objects: u64, seed: u64) -> Vec<u64> {
        // a skewed trace from a cheap generator: squaring a uniform draw favours low ids
        let mut state = seed;
        (0..n)
            .map(|_| {
                state = mix(state);
                let u = (state >> 11) as f64 / (1u64 << 53) as f64;
                (u * u * objects as f64) as u64
            })
            .collect()
    }

    #[test]
    fn exact_curve_equals_a_plain_lru_at_every_size() {
        let t = trace(20_000, 700, 1);
        let mut sd = StackDistances::new(1.0);
        for &id in &t {
            sd.access(id, 100);
        }
        let sizes: Vec<f64> = [1, 2, 5, 10, 50, 100, 300, 699, 700, 5000]
            .iter()
            .map(|&c| c as f64)
            .collect();
        let got = sd.miss_ratios_by_objects(&sizes);
        for (c, g) in sizes.iter().zip(got) {
            assert!(
                (g - naive_miss_ratio(&t, *c as usize)).abs() < 1e-12,
                "size {c}"
            );
        }
    }

    #[test]
    fn compaction_keeps_distances_exact() {
        // few objects, many requests: the tree is renumbered hundreds of times
        let t = trace(200_000, 50, 7);
        let mut sd = StackDistances::new(1.0);
        for &id in &t {
            sd.access(id, 1);
        }
        let got = sd.miss_ratios_by_objects(&[10.0, 25.0]);
        assert!((got[0] - naive_miss_ratio(&t, 10)).abs() < 1e-12);
        assert!((got[1] - naive_miss_ratio(&t, 25)).abs() < 1e-12);
    }

    #[test]
    fn bytes_curve_with_equal_sizes_is_the_objects_curve_scaled() {
        let t = trace(30_000, 2_000, 3);
        let mut sd = StackDistances::new(1.0);
        for &id in &t {
            sd.access(id, 1);
        }
        // size 1 per object: byte distance == object distance, buckets exact below 128
        let objects = sd.miss_ratios_by_objects(&[10.0, 100.0]);
        let bytes = sd.miss_ratios_by_bytes(&[10.0, 100.0]);
        assert_eq!(objects, bytes);
    }

    #[test]
    fn shards_is_close_to_exact() {
        let t = trace(2_000_000, 200_000, 11);
        let mut exact = StackDistances::new(1.0);
        let mut sampled = StackDistances::new(0.1);
        for &id in &t {
            exact.access(id, 1);
            sampled.access(id, 1);
        }
        let sizes: Vec<f64> = (1..=40).map(|i| i as f64 * 5_000.0).collect();
        let a = exact.miss_ratios_by_objects(&sizes);
        let b = sampled.miss_ratios_by_objects(&sizes);
        let mae: f64 =
            a.iter().zip(&b).map(|(x, y)| (x - y).abs()).sum::<f64>() / sizes.len() as f64;
        // 20,000 sampled objects; at 1 % (2,000) the error is ~0.02 here, ~0.004 with 1 M objects
        // and 10 M requests (tests/test_size.py checks that scale against the exact curve)
        assert!(mae < 0.01, "mean absolute error {mae}");
        assert!(sampled.objects() < exact.objects() / 5);
    }

    #[test]
    fn warmup_requests_fill_the_stack_but_are_not_counted() {
        let t = trace(40_000, 1_000, 5);
        let mut warm = StackDistances::new(1.0);
        warm.set_warmup(20_000);
        for &id in &t {
            warm.access(id, 1);
        }
        assert_eq!(warm.requests, 20_000);
        // the counted half sees the same distances as a plain LRU that ran the first half untimed
        let mut stack: Vec<u64> = Vec::new();
        let mut misses = 0;
        for (i, &id) in t.iter().enumerate() {
            let at = stack.iter().position(|&x| x == id);
            if i >= 20_000 && at.is_none_or(|p| p >= 100) {
                misses += 1;
            }
            if let Some(p) = at {
                stack.remove(p);
            }
            stack.insert(0, id);
        }
        let got = warm.miss_ratios_by_objects(&[100.0])[0];
        assert!((got - misses as f64 / 20_000.0).abs() < 1e-12);
    }

    #[test]
    fn log_buckets_are_monotone_and_tight() {
        let mut last = 0;
        for v in (0..1_000_000u64).step_by(37) {
            let b = log_bucket(v);
            assert!(b >= last);
            last = b;
            assert!(log_bucket_high(b) >= v);
            assert!((log_bucket_high(b) - v) as f64 <= v as f64 / 64.0 + 1.0);
        }
    }
}
