//! `PositionBytes`: the bytes of the objects whose latest access came before a position,
//! exactly. Only a stream of unequal sizes needs it (with equal sizes the bytes are the
//! count times the size), so the stack builds it the first time a size differs.
//!
//! Each position keeps its object's size, zeroed when the object moves on, so the bytes
//! before a position are a plain sum: whole words of 64 positions from a Fenwick tree over
//! words (1/64 of the positions), the rest a sum of at most 63 adjacent sizes (a few cache
//! lines, vectorised), not a walk over every position. As in `LivePositions`, the word being
//! filled stays out of the tree until it is full: a new position costs no walk.

use crate::fenwick::SumTree;
use crate::mem::{filled, prefetch};

/// Positions per leaf of the tree.
const WORD: usize = 64;

pub(super) struct PositionBytes {
    sizes: Vec<u32>, // position -> its object's size while it is that object's latest access, else 0
    words: SumTree<u64>, // bytes of each word before `open`
    open: usize,     // the word new positions go to (no later one has any)
}

impl PositionBytes {
    /// From `(position, size)` of every live object, all before `next`, over `capacity`
    /// positions.
    pub(super) fn new(
        capacity: usize,
        next: usize,
        live: impl Iterator<Item = (usize, u32)>,
    ) -> Self {
        let mut sizes = filled(capacity, 0u32);
        let mut sums = vec![0u64; capacity.div_ceil(WORD)];
        for (pos, size) in live {
            sizes[pos] = size;
            sums[pos / WORD] += size as u64;
        }
        let open = next / WORD;
        if let Some(sum) = sums.get_mut(open) {
            *sum = 0;
        }
        PositionBytes {
            sizes,
            words: SumTree::from_leaves(&sums),
            open,
        }
    }

    /// Asks the CPU to fetch the sizes that `before(pos)` and `remove(pos)` read: from the
    /// start of `pos`'s leaf up to `pos` (at most four cache lines; the first and last).
    #[inline]
    pub(super) fn prefetch(&self, pos: usize) {
        if let Some(size) = self.sizes.get(pos) {
            prefetch(&self.sizes[pos / WORD * WORD]);
            prefetch(size);
        }
    }

    /// `pos` must be free (zero), and after every position in use.
    #[inline]
    pub(super) fn insert(&mut self, pos: usize, size: u32) {
        if pos / WORD != self.open {
            self.close(pos / WORD);
        }
        self.sizes[pos] = size;
    }

    /// The open word's bytes go into the tree; `to` is open (the words between are empty).
    #[cold]
    fn close(&mut self, to: usize) {
        debug_assert!(to > self.open, "positions are taken in increasing order");
        self.words.add(
            self.open,
            self.sum(self.open * WORD, (self.open + 1) * WORD),
        );
        self.open = to;
    }

    #[inline]
    pub(super) fn remove(&mut self, pos: usize) {
        let size = std::mem::take(&mut self.sizes[pos]);
        if pos / WORD < self.open {
            self.words.sub(pos / WORD, size as u64);
        }
    }

    /// Bytes of the live positions before `pos`.
    #[inline]
    pub(super) fn before(&self, pos: usize) -> u64 {
        let word = pos / WORD;
        let whole = match word <= self.open {
            true => self.words.prefix(word),
            false => {
                self.words.prefix(self.open) + self.sum(self.open * WORD, (self.open + 1) * WORD)
            }
        };
        whole + self.sum(word * WORD, pos)
    }

    fn sum(&self, from: usize, to: usize) -> u64 {
        self.sizes[from..to.min(self.sizes.len())]
            .iter()
            .map(|&s| s as u64)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lru::mix;

    #[test]
    fn bytes_before_match_a_plain_array() {
        // as the stack uses it: each step takes the next position and may free an older one
        let capacity = 3_000;
        let start = 500;
        let mut plain: Vec<u32> = (0..capacity)
            .map(|p| (p < start && p % 3 == 0) as u32 * p as u32)
            .collect();
        let live = plain.iter().enumerate().map(|(p, &s)| (p, s));
        let mut bytes = PositionBytes::new(capacity, start, live.filter(|&(_, s)| s > 0));
        for next in start..capacity {
            let k = next as u64;
            let older = (mix(k) % next as u64) as usize;
            if plain[older] != 0 {
                bytes.remove(older);
                plain[older] = 0;
            }
            if !mix(k ^ 2).is_multiple_of(50) {
                let size = (mix(k ^ 7) % 100_000) as u32; // now and then a position is skipped
                bytes.insert(next, size);
                plain[next] = size;
            }
            let at = (mix(k ^ 0xABC) % (next as u64 + 100).min(capacity as u64 + 1)) as usize;
            let want: u64 = plain[..at].iter().map(|&s| s as u64).sum();
            assert_eq!(bytes.before(at), want, "bytes before {at}");
        }
    }
}
