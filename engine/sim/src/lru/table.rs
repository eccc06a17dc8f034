//! `IdTable`: object -> the position of its latest access, for the unbounded stack. It is
//! the one structure there that outgrows the caches, so a request costs one of its cache
//! lines; an open-addressed table of buckets of one cache line each (five objects, linear
//! probing over buckets) makes that line the home bucket's, known from the id alone, so it
//! can be fetched ahead (`prefetch`) while earlier requests are worked on. A slot holds no
//! size (the stack's sizes by position have it), so five fit a line where four did, and
//! buckets let the table fill to 80 %: 16 MB at 10⁶ objects, where slots of 16 bytes at most
//! half full took 32 MB — half the lines to miss in the caches. Objects never leave the
//! unbounded stack, so there is no deletion, and a bucket fills in order: a probe ends at
//! the first vacant slot.

use super::mix;
use crate::mem::{filled, prefetch};

const SLOTS: usize = 5;
const VACANT: u32 = u32::MAX;

/// Five objects and the positions of their latest accesses: one cache line.
#[derive(Clone, Copy)]
#[repr(align(64))]
struct Bucket {
    ids: [u64; SLOTS],
    pos: [u32; SLOTS],
}

const EMPTY: Bucket = Bucket {
    ids: [0; SLOTS],
    pos: [VACANT; SLOTS],
};

pub(super) struct IdTable {
    buckets: Vec<Bucket>,
    shift: u32, // home bucket: the hash's top bits
    len: usize,
}

impl Default for IdTable {
    fn default() -> Self {
        Self::with_buckets(256)
    }
}

impl IdTable {
    fn with_buckets(n: usize) -> Self {
        IdTable {
            buckets: filled(n, EMPTY),
            shift: 64 - n.trailing_zeros(),
            len: 0,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn home(&self, id: u64) -> usize {
        (mix(id) >> self.shift) as usize
    }

    /// Asks the CPU to fetch the bucket where `id`'s probe starts.
    #[inline]
    pub(super) fn prefetch(&self, id: u64) {
        prefetch(&self.buckets[self.home(id)]);
    }

    /// `id`'s slot (bucket, slot), or the vacant one where it would go.
    #[inline]
    fn probe(&self, id: u64) -> (usize, usize) {
        let mask = self.buckets.len() - 1;
        let mut b = self.home(id);
        loop {
            let bucket = &self.buckets[b];
            for k in 0..SLOTS {
                if bucket.pos[k] == VACANT || bucket.ids[k] == id {
                    return (b, k);
                }
            }
            b = (b + 1) & mask;
        }
    }

    /// The position of `id`'s latest access, if it is there (reads only: for fetching ahead).
    #[inline]
    pub(super) fn position(&self, id: u64) -> Option<usize> {
        let (b, k) = self.probe(id);
        let pos = self.buckets[b].pos[k];
        (pos != VACANT).then_some(pos as usize)
    }

    /// `id`'s position, and whether it was there; a new one is vacant (`u32::MAX`) and must
    /// be filled in.
    #[inline]
    pub(super) fn entry(&mut self, id: u64) -> (&mut u32, bool) {
        if 5 * (self.len + 1) > 4 * SLOTS * self.buckets.len() {
            self.grow();
        }
        let (b, k) = self.probe(id);
        let bucket = &mut self.buckets[b];
        let found = bucket.pos[k] != VACANT;
        if !found {
            self.len += 1;
            bucket.ids[k] = id;
        }
        (&mut bucket.pos[k], found)
    }

    fn grow(&mut self) {
        let old = std::mem::replace(self, Self::with_buckets(self.buckets.len() * 2));
        for bucket in &old.buckets {
            for k in (0..SLOTS).filter(|&k| bucket.pos[k] != VACANT) {
                let (b, j) = self.probe(bucket.ids[k]);
                self.buckets[b].ids[j] = bucket.ids[k];
                self.buckets[b].pos[j] = bucket.pos[k];
            }
        }
        self.len = old.len;
    }

    /// Every object's position.
    pub(super) fn positions_mut(&mut self) -> impl Iterator<Item = &mut u32> {
        self.buckets
            .iter_mut()
            .flat_map(|b| b.pos.iter_mut())
            .filter(|p| **p != VACANT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn finds_what_it_was_given_through_growth() {
        let mut table = IdTable::default();
        let mut plain = HashMap::new();
        for k in 0..50_000u64 {
            let id = mix(k) % 20_000;
            let (pos, found) = table.entry(id);
            assert_eq!(found, plain.contains_key(&id));
            if found {
                assert_eq!(*pos, plain[&id]);
            }
            *pos = k as u32;
            plain.insert(id, k as u32);
            let probe = mix(k ^ 5) % 20_000;
            assert_eq!(
                table.position(probe),
                plain.get(&probe).map(|&p| p as usize)
            );
        }
        assert_eq!(table.len(), plain.len());
        assert_eq!(table.positions_mut().count(), plain.len());
    }
}
