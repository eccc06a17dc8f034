//! Exact LRU stack distances in one pass, by object count and by bytes, optionally on a
//! spatially hashed sample of the objects (SHARDS, Waldspurger et al., FAST '15).
//!
//! The stack distance of a request is the number of distinct objects (or their bytes)
//! touched since the previous request for the same object, itself included: an LRU cache
//! of `c` objects hits exactly the requests with distance ≤ `c`, so one pass yields the
//! whole miss-ratio curve. Each object's latest access is a set position in a bitmap over
//! time; the set positions after an object's own count the distance (a rank: popcounts
//! and a Fenwick tree over blocks of the bitmap). Positions are renumbered when they run
//! out, so memory follows the objects, not the requests.
//!
//! With sampling (SHARDS: an object is kept when its hash falls under `rate × 2^24`), plain
//! SHARDS scales the sample's distances by `1 / rate`; at small sizes that leaves a handful of
//! sampled distances, and the few popular objects that fall in or out of the sample move the
//! whole curve (SHARDS-adj's correction only moves the error around). So a sampled run here
//! is a hybrid (see `StackDistances`): an exact stack of the most recent objects of every
//! request, samples conditioned on it for larger sizes, each with its standard error, and the
//! plain SHARDS-adj kept only to compare with (`near` = 0).
//!
//! Files by job: `hash` (the id hash), `histogram` (log-scale buckets and the
//! histogram helpers), `distinct` (the HyperLogLog object counter), `stack` (the unbounded
//! LRU stack) and its parts `table` (id -> position), `live` (ranks of positions) and
//! `sized` (ranks and bytes before a position, once sizes differ), `near` (the exact bounded stack of the most recent
//! objects), `level` (one sample of the hybrid); `StackDistances`, here, combines them.

mod distinct;
mod hash;
mod histogram;
mod level;
mod live;
mod near;
mod sized;
mod stack;
mod table;
#[cfg(test)]
mod tests;

pub use hash::mix;
pub use histogram::{log_bucket, log_bucket_high};

use distinct::Distinct;
use histogram::{bump, cumulate, within_bytes, Tally};
use level::Level;
use near::{Near, NearStack};
use stack::Stack;

const SAMPLE_BITS: u32 = 24;

/// Groups of the sampled objects (by other bits of their hash) whose spread gives the
/// sampled part of a curve its standard error (a delete-a-group jackknife).
const GROUPS: usize = 32;

/// The exact near stack's size when sampling (objects).
pub const NEAR: usize = 1 << 14;
/// Each bounded sample's stack (sampled objects): the sample at rate `r` reaches about
/// `0.9 × LEVEL / r` objects, with at least `0.9 × LEVEL / LEVEL_STEP` sampled objects
/// within any size it answers for.
pub const LEVEL: usize = 1 << 16;
/// The bounded samples are at 1/16, 1/256, … of the objects, down to twice the rate asked for.
const LEVEL_STEP: u64 = 16;

/// LRU stack distances of a stream, exact or sampled, and the miss-ratio curves they give.
///
/// Sampled (`rate` < 1) it is a hybrid. An exact stack of the `near` most recent objects of
/// every request gives the curve exactly up to `near` objects. Beyond it, samples estimate
/// the requests that the near stack missed: for a sampled request, the sampled objects
/// between it and the near stack (those above it minus those in the near stack) are
/// `Binomial(D - near - 1, rate)`, so `near + 1 + gap / rate` is an unbiased estimate of
/// its distance `D` whose spread grows with `D - near`, not with `D`; and the requests
/// beyond the near stack, counted exactly, are shared out in the proportions the sample
/// gives (a ratio estimator: the sample's few hot objects no longer weigh on it, which
/// SHARDS-adj only patched). Samples at 1/16, 1/256, … of the objects, in stacks of `LEVEL`
/// sampled objects each, answer the sizes they reach (about `LEVEL / rate`) with far more
/// samples than the rate asked for; the rate asked for, unbounded, answers the rest. Each
/// sampled object falls in one of `GROUPS` groups by its hash: their spread is the standard
/// error of each point of the curve.
pub struct StackDistances {
    threshold: u64,
    salt: u64,
    rate: f64,
    stack: Stack, // exact, or plain SHARDS: every object, or the sampled ones
    near: Option<NearStack>,
    levels: Vec<Level>, // highest rate first; the last is the rate asked for, unbounded
    distinct: Distinct, // with a near stack: every request's object
    /// exact distance in objects (1-based) -> requests: every request (exact), or those
    /// within the near stack; plain SHARDS: sampled distances
    pub by_objects: Vec<u64>,
    /// distances of the stack not yet in `by_objects` (none between calls)
    tally: Tally,
    /// log bucket of the distance in bytes -> requests (as `by_objects`)
    pub by_bytes: Vec<u64>,
    /// first requests of an object (exact and plain SHARDS)
    cold: u64,
    pub requests: u64,
    pub sampled: u64,
    /// requests beyond the near stack (exact count; new objects included)
    far: u64,
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
        Self::with_near(rate, seed, NEAR)
    }

    /// `near`: the exact stack's size when sampling (0: plain SHARDS-adj, for comparison).
    pub fn with_near(rate: f64, seed: u64, near: usize) -> Self {
        Self::with_stacks(rate, seed, near, LEVEL)
    }

    /// `level`: the size of each bounded sample's stack.
    pub fn with_stacks(rate: f64, seed: u64, near: usize, level: usize) -> Self {
        let rate = rate.clamp(1.0 / (1u64 << SAMPLE_BITS) as f64, 1.0);
        let threshold = (rate * (1u64 << SAMPLE_BITS) as f64).round() as u64;
        let rate = threshold as f64 / (1u64 << SAMPLE_BITS) as f64;
        let salt = mix(seed);
        let hybrid = rate < 1.0 && near > 0;
        let mut levels = Vec::new();
        if hybrid {
            let mut t = (1u64 << SAMPLE_BITS) / LEVEL_STEP;
            while t >= threshold * 2 {
                levels.push(Level::new(t, Some(level.max(1)), salt));
                t /= LEVEL_STEP;
            }
            levels.push(Level::new(threshold, None, salt));
        }
        StackDistances {
            threshold,
            salt,
            rate,
            stack: Stack::new(),
            near: hybrid.then(|| NearStack::new(near, salt)),
            levels,
            distinct: Distinct::new(),
            by_objects: vec![0; if hybrid { near + 1 } else { 1 }],
            tally: Tally::default(),
            by_bytes: Vec::new(),
            cold: 0,
            requests: 0,
            sampled: 0,
            far: 0,
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

    fn last(&self) -> &Level {
        self.levels
            .last()
            .expect("a hybrid has the asked-for level")
    }

    /// The curve is exact up to this many objects (every size when not sampled, or when the
    /// near stack never filled; none for plain SHARDS).
    pub fn exact_up_to(&self) -> f64 {
        match &self.near {
            _ if self.rate >= 1.0 => f64::INFINITY,
            Some(near) if !near.evicted => f64::INFINITY,
            Some(near) => near.capacity as f64,
            None => 0.0,
        }
    }

    /// Distinct objects: counted, or estimated (see `objects_exact`).
    pub fn objects(&self) -> f64 {
        match &self.near {
            Some(near) if !near.evicted => near.len as f64,
            Some(_) => self.distinct.estimate(),
            None => self.stack.len() as f64 / self.rate,
        }
    }

    /// Whether `objects` and `cold` are counts, not estimates.
    pub fn objects_exact(&self) -> bool {
        self.exact_up_to() == f64::INFINITY
    }

    /// First requests of an object (a miss at every size): counted, or estimated.
    pub fn cold(&self) -> f64 {
        match &self.near {
            // the near stack never forgot: every miss was a first request
            Some(near) if !near.evicted => self.far as f64,
            Some(_) if self.warmup == 0 => self.distinct.estimate(),
            Some(_) => self.far_share(self.last().cold as f64, self.last().far_sampled()),
            None => self.cold as f64 / self.rate,
        }
    }

    /// The group of a sampled object (None: not sampled), from `hash = mix(id ^ salt)`.
    fn group(&self, hash: u64) -> Option<usize> {
        let mask = (1u64 << SAMPLE_BITS) - 1;
        ((hash & mask) < self.threshold).then_some((hash >> SAMPLE_BITS) as usize % GROUPS)
    }

    /// Requests in order; the same as `access` on each, but the near stack's table is read
    /// ahead (its slots are where a sampled run spends its time waiting for memory).
    pub fn access_all(&mut self, requests: impl Iterator<Item = (u64, u32)>) {
        const BLOCK: usize = 256;
        const AHEAD: usize = 12;
        if self.rate >= 1.0 {
            return self.exact_all(requests);
        }
        if self.near.is_none() {
            requests.for_each(|(id, size)| self.access_one(id, size));
            return self.tally.flush(&mut self.by_objects);
        }
        let mut block = [(0u64, 0u32, 0u64); BLOCK];
        let mut requests = requests.peekable();
        while requests.peek().is_some() {
            let mut n = 0;
            for (slot, (id, size)) in block.iter_mut().zip(requests.by_ref()) {
                *slot = (id, size, mix(id ^ self.salt));
                n += 1;
            }
            for i in 0..n {
                if let (Some(near), Some(&(_, _, hash))) = (&self.near, block.get(i + AHEAD)) {
                    near.prefetch(hash);
                    let low = hash & ((1u64 << SAMPLE_BITS) - 1);
                    if let Some(level) = self.levels.first().filter(|l| low < l.threshold) {
                        if let Some(stack) = &level.bounded {
                            stack.prefetch(hash);
                        }
                    }
                }
                let (id, size, hash) = block[i];
                self.access_hashed(id, size, hash);
            }
        }
    }

    /// Exact, every request in order, read ahead in two steps: a request's table slot
    /// `AHEAD` requests before it (a slot of a table of every object is where an exact run
    /// waits for memory), then, half way, what its position leads to.
    fn exact_all(&mut self, requests: impl Iterator<Item = (u64, u32)>) {
        const AHEAD: usize = 16;
        let mut ring = [(0u64, 0u32); AHEAD];
        let mut requests = requests.fuse();
        let mut filled = 0;
        for (slot, request) in ring.iter_mut().zip(requests.by_ref()) {
            self.stack.prefetch(request.0);
            *slot = request;
            filled += 1;
        }
        let mut i = 0;
        for request in requests {
            let (id, size) = std::mem::replace(&mut ring[i], request);
            self.stack.prefetch(request.0);
            self.stack
                .prefetch_position(ring[(i + AHEAD / 2) % AHEAD].0);
            self.access_hashed(id, size, 0);
            i = (i + 1) % AHEAD;
        }
        for k in 0..filled {
            let (id, size) = ring[(i + k) % AHEAD];
            self.access_hashed(id, size, 0);
        }
        self.tally.flush(&mut self.by_objects);
    }

    pub fn access(&mut self, id: u64, size: u32) {
        self.access_one(id, size);
        self.tally.flush(&mut self.by_objects);
    }

    /// `access`, leaving the stack's distances in the tally.
    #[inline]
    fn access_one(&mut self, id: u64, size: u32) {
        let hash = if self.rate < 1.0 {
            mix(id ^ self.salt)
        } else {
            0
        };
        self.access_hashed(id, size, hash);
    }

    /// `hash`: `mix(id ^ salt)`.
    fn access_hashed(&mut self, id: u64, size: u32, hash: u64) {
        self.seen += 1;
        let counted = self.seen > self.warmup;
        self.requests += counted as u64;
        if self.rate >= 1.0 {
            return self.plain(id, size, counted);
        }
        let group = self.group(hash);
        self.sampled += (counted && group.is_some()) as u64;
        let Some(near) = self.near.as_mut() else {
            if group.is_some() {
                self.plain(id, size, counted);
            }
            return;
        };
        self.distinct.add(hash);
        let near_bytes = near.bytes;
        let low = hash & ((1u64 << SAMPLE_BITS) - 1);
        let group = (hash >> SAMPLE_BITS) as usize % GROUPS;
        match near.access(id, size, hash) {
            Near::Hit {
                objects,
                bytes,
                old,
            } => {
                if counted {
                    self.by_objects[objects as usize] += 1;
                    bump(&mut self.by_bytes, log_bucket(bytes));
                }
                for level in self.levels.iter_mut().take_while(|l| low < l.threshold) {
                    level.touch(id, size, hash);
                    level.near_sampled_bytes = level.near_sampled_bytes + size as u64 - old as u64;
                }
            }
            Near::Miss { evicted } => {
                self.far += counted as u64;
                for level in self.levels.iter_mut().take_while(|l| low < l.threshold) {
                    let above = level.touch(id, size, hash);
                    if counted {
                        level.far_request(group, above, size, near_bytes);
                    }
                    level.near_sampled += 1;
                    level.near_sampled_bytes += size as u64;
                }
                if let Some((gone, gone_size)) = evicted {
                    let low = mix(gone ^ self.salt) & ((1u64 << SAMPLE_BITS) - 1);
                    for level in self.levels.iter_mut().take_while(|l| low < l.threshold) {
                        level.near_sampled -= 1;
                        level.near_sampled_bytes -= gone_size as u64;
                    }
                }
            }
        }
    }

    /// Exact (rate 1), or plain SHARDS without a near stack: the distance in the stack.
    fn plain(&mut self, id: u64, size: u32, counted: bool) {
        match self.stack.touch(id, size) {
            Some((objects, bytes)) if counted => {
                self.tally.push(&mut self.by_objects, objects as usize + 1);
                bump(&mut self.by_bytes, log_bucket(bytes + size as u64));
            }
            None if counted => self.cold += 1,
            _ => {}
        }
    }

    /// Of the requests beyond the near stack (counted exactly), the share that `part` of the
    /// `of` sampled ones is.
    fn far_share(&self, part: f64, of: u64) -> f64 {
        if of == 0 {
            return 0.0;
        }
        self.far as f64 * part / of as f64
    }

    /// The sample that answers for a cache of `c` objects: the most detailed that reaches it.
    fn level_for(&self, c: f64) -> &Level {
        self.levels
            .iter()
            .find(|l| c <= l.reach())
            .expect("the last level reaches every size")
    }

    fn hits_to_miss_ratio(&self, hits: f64) -> f64 {
        if self.requests == 0 {
            return 1.0;
        }
        (1.0 - hits / self.requests as f64).clamp(0.0, 1.0)
    }

    /// Miss ratio of an LRU cache of each of `sizes` objects.
    pub fn miss_ratios_by_objects(&self, sizes: &[f64]) -> Vec<f64> {
        let cumulative = cumulate(&self.by_objects);
        let within = |c: f64| {
            let d = c.floor().max(0.0) as usize;
            cumulative[d.min(cumulative.len() - 1)] as f64
        };
        sizes
            .iter()
            .map(|&c| match &self.near {
                Some(near) => {
                    let mut hits = within(c);
                    if c > near.capacity as f64 {
                        let level = self.level_for(c);
                        hits +=
                            self.far_share(level.far_within(c, near.capacity), level.far_sampled());
                    }
                    self.hits_to_miss_ratio(hits)
                }
                None if self.rate < 1.0 => self.shards_adj(within(c * self.rate)),
                None => self.hits_to_miss_ratio(within(c)),
            })
            .collect()
    }

    /// Miss ratio of an LRU cache of each of `sizes` bytes (a distance hits when its
    /// bucket lies wholly within the size: within 1/64 of exact). Sampled, beyond the near
    /// stack the sample at the rate asked for answers.
    pub fn miss_ratios_by_bytes(&self, sizes: &[f64]) -> Vec<f64> {
        sizes
            .iter()
            .map(|&c| match &self.near {
                Some(_) => {
                    let last = self.last();
                    let far = self.far_share(within_bytes(&last.far_bytes, c), last.far_sampled());
                    self.hits_to_miss_ratio(within_bytes(&self.by_bytes, c) + far)
                }
                None if self.rate < 1.0 => {
                    self.shards_adj(within_bytes(&self.by_bytes, c * self.rate))
                }
                None => self.hits_to_miss_ratio(within_bytes(&self.by_bytes, c)),
            })
            .collect()
    }

    /// Plain SHARDS: sampled hits, plus the requests expected in the sample minus those seen
    /// (SHARDS-adj: counted as hits at the smallest size; it can be negative).
    fn shards_adj(&self, hits: f64) -> f64 {
        let expected = self.requests as f64 * self.rate;
        if expected <= 0.0 {
            return 1.0;
        }
        let adjusted = hits + expected - self.sampled as f64;
        (1.0 - adjusted / expected).clamp(0.0, 1.0)
    }

    /// Standard error of each miss ratio of `miss_ratios_by_objects` (0 where exact; plain
    /// SHARDS cannot tell: infinite).
    pub fn std_errors_by_objects(&self, sizes: &[f64]) -> Vec<f64> {
        let Some(near) = &self.near else {
            return vec![if self.rate < 1.0 { f64::INFINITY } else { 0.0 }; sizes.len()];
        };
        sizes
            .iter()
            .map(|&c| {
                if c <= near.capacity as f64 || !near.evicted {
                    return 0.0;
                }
                let level = self.level_for(c);
                let limit = ((c - near.capacity as f64 - 1.0) * level.rate).max(0.0);
                self.std_error(level, &level.group_objects, limit)
            })
            .collect()
    }

    /// Standard error of each miss ratio of `miss_ratios_by_bytes`.
    pub fn std_errors_by_bytes(&self, sizes: &[f64]) -> Vec<f64> {
        let Some(near) = &self.near else {
            return vec![if self.rate < 1.0 { f64::INFINITY } else { 0.0 }; sizes.len()];
        };
        let last = self.last();
        sizes
            .iter()
            .map(|&c| match near.evicted {
                true => self.std_error(last, &last.group_bytes, c),
                false => 0.0,
            })
            .collect()
    }

    /// The spread of a level's far share across its groups of sampled objects (a
    /// delete-a-group jackknife of the ratio estimate), with a binomial floor so that a few
    /// samples never look certain; as a share of all requests.
    fn std_error(&self, level: &Level, groups: &[Vec<u64>], limit: f64) -> f64 {
        if self.far == 0 || self.requests == 0 {
            return 0.0;
        }
        let within: Vec<f64> = groups.iter().map(|g| within_bytes(g, limit)).collect();
        let part: f64 = within.iter().sum();
        let of = level.far_sampled();
        let far = self.far as f64;
        if level.group_far.iter().filter(|&&n| n > 0).count() < 2 {
            return far / self.requests as f64; // nothing to tell the far requests apart
        }
        let leave_out: Vec<f64> = within
            .iter()
            .zip(&level.group_far)
            .map(|(w, &n)| far * (part - w) / (of - n) as f64)
            .collect();
        let mean = leave_out.iter().sum::<f64>() / GROUPS as f64;
        let jackknife = (GROUPS - 1) as f64 / GROUPS as f64
            * leave_out.iter().map(|x| (x - mean).powi(2)).sum::<f64>();
        let p = (part + 1.0) / (of as f64 + 2.0);
        let binomial = far * far * p * (1.0 - p) / of as f64;
        jackknife.max(binomial).sqrt() / self.requests as f64
    }
}
