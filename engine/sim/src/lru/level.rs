//! `Level`: one sample of the hybrid, its stack and the histograms of what it saw beyond
//! the near stack (by group, for the standard errors). `StackDistances` keeps one per rate.

use super::histogram::{bump, log_bucket};
use super::near::{Near, NearStack};
use super::stack::Stack;
use super::{GROUPS, SAMPLE_BITS};

/// One sample of the hybrid: the objects whose hash falls under `rate`, in an LRU stack of
/// their own — bounded (the `capacity` most recent sampled objects: it resolves distances
/// up to about `capacity / rate`) or not (the last, at the rate asked for) — and what it
/// saw of the requests beyond the near stack.
pub(super) struct Level {
    pub(super) threshold: u64,
    pub(super) rate: f64,
    pub(super) bounded: Option<NearStack>,
    unbounded: Stack,
    /// sampled objects in the near stack, and their bytes
    pub(super) near_sampled: u64,
    pub(super) near_sampled_bytes: u64,
    /// sampled requests beyond the near stack and within this stack: gap -> requests
    far_objects: Vec<u64>,
    /// ... log bucket of their estimated distance in bytes -> requests
    pub(super) far_bytes: Vec<u64>,
    /// per group of sampled objects: log bucket of the gap, and of the bytes -> requests
    pub(super) group_objects: Vec<Vec<u64>>,
    pub(super) group_bytes: Vec<Vec<u64>>,
    /// per group: sampled requests beyond the near stack (beyond this stack and new ones too)
    pub(super) group_far: [u64; GROUPS],
    /// sampled first requests of an object (only an unbounded stack tells them apart)
    pub(super) cold: u64,
}

impl Level {
    pub(super) fn new(threshold: u64, capacity: Option<usize>, salt: u64) -> Self {
        Level {
            threshold,
            rate: threshold as f64 / (1u64 << SAMPLE_BITS) as f64,
            bounded: capacity.map(|c| NearStack::new(c, salt)),
            unbounded: Stack::new(),
            near_sampled: 0,
            near_sampled_bytes: 0,
            far_objects: Vec::new(),
            far_bytes: Vec::new(),
            group_objects: vec![Vec::new(); GROUPS],
            group_bytes: vec![Vec::new(); GROUPS],
            group_far: [0; GROUPS],
            cold: 0,
        }
    }

    /// The largest size (objects) this sample resolves: well within its stack's reach.
    pub(super) fn reach(&self) -> f64 {
        match &self.bounded {
            Some(stack) => 0.9 * stack.capacity as f64 / self.rate,
            None => f64::INFINITY,
        }
    }

    pub(super) fn far_sampled(&self) -> u64 {
        self.group_far.iter().sum()
    }

    /// Moves a sampled object to the top: the objects above it and their bytes, or None when
    /// it was not in the stack.
    pub(super) fn touch(&mut self, id: u64, size: u32, hash: u64) -> Option<(u64, u64)> {
        match &mut self.bounded {
            Some(stack) => match stack.access(id, size, hash) {
                Near::Hit { objects, bytes, .. } => Some((objects - 1, bytes - size as u64)),
                Near::Miss { .. } => None,
            },
            None => self.unbounded.touch(id, size),
        }
    }

    /// A sampled request beyond the near stack (of `near` objects and `near_bytes`): the
    /// gap between the two, and its distance in bytes estimated.
    pub(super) fn far_request(
        &mut self,
        group: usize,
        above: Option<(u64, u64)>,
        size: u32,
        near_bytes: u64,
    ) {
        self.group_far[group] += 1;
        let Some((objects, bytes)) = above else {
            self.cold += self.bounded.is_none() as u64;
            return;
        };
        let gap = objects - self.near_sampled;
        let gap_bytes = bytes - self.near_sampled_bytes;
        let estimated = near_bytes + (gap_bytes as f64 / self.rate) as u64 + size as u64;
        bump(&mut self.far_objects, gap as usize);
        bump(&mut self.far_bytes, log_bucket(estimated));
        bump(&mut self.group_objects[group], log_bucket(gap));
        bump(&mut self.group_bytes[group], log_bucket(estimated));
    }

    /// The sampled far requests whose estimated distance is at most `c` objects: gaps up to
    /// `(c - near - 1) × rate`, the last one in part (a continuity correction: a gap stands
    /// for the distances around it).
    pub(super) fn far_within(&self, c: f64, near: usize) -> f64 {
        let u = (c - near as f64 - 1.0) * self.rate + 0.5;
        if u < 0.0 {
            return 0.0;
        }
        let whole = u.floor() as usize;
        let full: u64 = self.far_objects.iter().take(whole).sum();
        full as f64 + (u - whole as f64) * self.far_objects.get(whole).copied().unwrap_or(0) as f64
    }
}
