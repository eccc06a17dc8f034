//! `PositionBytes`: the bytes of the objects whose latest access came before a position,
//! exactly. Only a stream of unequal sizes needs it (with equal sizes the bytes are the
//! count times the size), so the stack builds it the first time a size differs.
//!
//! Each position keeps its object's size, zeroed when the object moves on, so the bytes
//! before a position are a plain sum: whole words of 64 positions from a Fenwick tree over
//! words (1/64 of the positions), the rest a sum of at most 63 adjacent sizes (a few cache
//! lines, vectorised), not a walk over every position.

use crate::fenwick::SumTree;
use crate::mem::prefetch;

/// Positions per leaf of the tree.
const WORD: usize = 64;

pub(super) struct PositionBytes {
    sizes: Vec<u32>, // position -> its object's size while it is that object's latest access, else 0
    words: SumTree<u64>,
}

impl PositionBytes {
    /// From `(position, size)` of every live object, over `capacity` positions.
    pub(super) fn new(capacity: usize, live: impl Iterator<Item = (usize, u32)>) -> Self {
        let mut sizes = vec![0u32; capacity];
        let mut sums = vec![0u64; capacity.div_ceil(WORD)];
        for (pos, size) in live {
            sizes[pos] = size;
            sums[pos / WORD] += size as u64;
        }
        PositionBytes {
            sizes,
            words: SumTree::from_leaves(&sums),
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

    /// `pos` must be free (zero).
    #[inline]
    pub(super) fn insert(&mut self, pos: usize, size: u32) {
        self.sizes[pos] = size;
        self.words.add(pos / WORD, size as u64);
    }

    #[inline]
    pub(super) fn remove(&mut self, pos: usize) {
        let size = std::mem::take(&mut self.sizes[pos]);
        self.words.sub(pos / WORD, size as u64);
    }

    /// Bytes of the live positions before `pos`.
    #[inline]
    pub(super) fn before(&self, pos: usize) -> u64 {
        let start = pos / WORD * WORD;
        let within: u64 = self.sizes[start..pos].iter().map(|&s| s as u64).sum();
        self.words.prefix(pos / WORD) + within
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lru::mix;

    #[test]
    fn bytes_before_match_a_plain_array() {
        let capacity = 1_000;
        let mut plain: Vec<u32> = (0..capacity)
            .map(|p| (p % 3 == 0) as u32 * p as u32)
            .collect();
        let mut bytes =
            PositionBytes::new(capacity, plain.iter().enumerate().map(|(p, &s)| (p, s)));
        for k in 0..20_000u64 {
            let pos = (mix(k) % capacity as u64) as usize;
            if plain[pos] != 0 {
                bytes.remove(pos);
                plain[pos] = 0;
            } else {
                let size = (mix(k ^ 7) % 100_000) as u32;
                bytes.insert(pos, size);
                plain[pos] = size;
            }
            let at = (mix(k ^ 0xABC) % (capacity as u64 + 1)) as usize;
            let want: u64 = plain[..at].iter().map(|&s| s as u64).sum();
            assert_eq!(bytes.before(at), want, "bytes before {at}");
        }
    }
}
