//! `PositionBytes`: the bytes of the objects whose latest access came before a position,
//! exactly. Only a stream of unequal sizes needs it (with equal sizes the bytes are the
//! count times the size), so the stack builds it the first time a size differs.
//!
//! Each position keeps its object's size, zeroed when the object moves on, so the bytes
//! before a position are a plain sum, taken in three parts that each cost about one cache
//! line: whole blocks of 512 positions (as `LivePositions`' blocks) from a Fenwick tree over
//! blocks (64 KB at 10⁶ objects: it stays in L2, where one over every 64 positions did not),
//! whole words of 64 positions within the block from one line of the block's word sums,
//! and the rest from the sizes of the word, counted from whichever end of the word is
//! nearer (at most 32 adjacent sizes: two cache lines, both fetched ahead). As in
//! `LivePositions`, the block being filled stays out of the tree until it is full: a new
//! position costs no walk.

use crate::fenwick::SumTree;
use crate::mem::{filled, prefetch};

/// Positions per word (the sizes a partial sum may read: 256 bytes, four cache lines).
const WORD: usize = 64;
const WORDS: usize = 8;
/// Positions per leaf of the tree (as `LivePositions`' blocks).
const BLOCK: usize = WORD * WORDS;

/// The bytes of each word of a block: one cache line.
#[derive(Clone, Copy, Default)]
#[repr(align(64))]
struct Words([u64; WORDS]);

pub(super) struct PositionBytes {
    sizes: Vec<u32>, // position -> its object's size while it is that object's latest access, else 0
    words: Vec<Words>, // block -> the bytes of each of its words
    blocks: SumTree<u64>, // bytes of each block before `open`
    open: usize,     // the block new positions go to (no later one has any)
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
        for (pos, size) in live {
            sizes[pos] = size;
        }
        let mut bytes = PositionBytes {
            sizes,
            words: Vec::new(),
            blocks: SumTree::from_leaves(&[]),
            open: 0,
        };
        bytes.sum_up(next);
        bytes
    }

    /// The word sums and the tree from `sizes`, positions from `next` on being free.
    fn sum_up(&mut self, next: usize) {
        let n = self.sizes.len().div_ceil(BLOCK);
        let mut words = vec![Words::default(); n];
        let mut leaves = vec![0u64; n];
        for (k, chunk) in self.sizes.chunks(WORD).enumerate() {
            let sum: u64 = chunk.iter().map(|&s| s as u64).sum();
            words[k / WORDS].0[k % WORDS] = sum;
            leaves[k / WORDS] += sum;
        }
        self.open = next / BLOCK;
        if let Some(leaf) = leaves.get_mut(self.open) {
            *leaf = 0;
        }
        self.words = words;
        self.blocks = SumTree::from_leaves(&leaves);
    }

    /// Renumbers in place: the live positions, `order` (ascending), become `0..live`, over
    /// `capacity` positions (no fewer than before). One pass over the sizes, in order: no
    /// new table to fault in and zero, no scattered writes.
    pub(super) fn renumber(&mut self, capacity: usize, order: impl Iterator<Item = usize>) {
        let mut live = 0;
        for pos in order {
            self.sizes[live] = self.sizes[pos]; // live <= pos: not yet read
            live += 1;
        }
        if capacity > self.sizes.len() {
            let mut sizes = filled(capacity, 0u32);
            sizes[..live].copy_from_slice(&self.sizes[..live]);
            self.sizes = sizes;
        } else {
            self.sizes[live..].fill(0);
        }
        self.sum_up(live);
    }

    /// Asks the CPU to fetch what `before(pos)` and `remove(pos)` read: the block's word
    /// sums and the sizes from `pos` to the nearer end of its word (two cache lines at most).
    #[inline]
    pub(super) fn prefetch(&self, pos: usize) {
        if let (Some(size), Some(words)) = (self.sizes.get(pos), self.words.get(pos / BLOCK)) {
            prefetch(words);
            prefetch(size);
            let start = pos / WORD * WORD;
            let end = match pos - start <= WORD / 2 {
                true => start,
                false => (start + WORD - 1).min(self.sizes.len() - 1),
            };
            prefetch(&self.sizes[end]);
        }
    }

    /// `pos` must be free (zero), and after every position in use.
    #[inline]
    pub(super) fn insert(&mut self, pos: usize, size: u32) {
        if pos / BLOCK != self.open {
            self.close(pos / BLOCK);
        }
        self.sizes[pos] = size;
        self.words[pos / BLOCK].0[pos % BLOCK / WORD] += size as u64;
    }

    /// The open block's bytes go into the tree; `to` is open (the blocks between are empty).
    #[cold]
    fn close(&mut self, to: usize) {
        debug_assert!(to > self.open, "positions are taken in increasing order");
        self.blocks.add(self.open, self.block_sum(self.open));
        self.open = to;
    }

    fn block_sum(&self, block: usize) -> u64 {
        self.words.get(block).map_or(0, |w| w.0.iter().sum())
    }

    /// Frees `pos`; returns its size.
    #[inline]
    pub(super) fn remove(&mut self, pos: usize) -> u64 {
        let size = std::mem::take(&mut self.sizes[pos]) as u64;
        self.words[pos / BLOCK].0[pos % BLOCK / WORD] -= size;
        if pos / BLOCK < self.open {
            self.blocks.sub(pos / BLOCK, size);
        }
        size
    }

    /// Bytes of the live positions before `pos`.
    #[inline]
    pub(super) fn before(&self, pos: usize) -> u64 {
        let block = pos / BLOCK;
        if block > self.open || block >= self.words.len() {
            // every live position is before it (the blocks after the open one are empty)
            return self.blocks.prefix(self.open) + self.block_sum(self.open);
        }
        let words = &self.words[block].0;
        let word = pos % BLOCK / WORD;
        // whole words before `pos`'s: masked, not branched on, so the loop has a fixed length
        let mut within = 0;
        for (k, &w) in words.iter().enumerate() {
            within += if k < word { w } else { 0 };
        }
        let start = pos / WORD * WORD;
        let partial = match pos - start <= WORD / 2 {
            true => self.sum(start, pos),
            false => words[word] - self.sum(pos, start + WORD),
        };
        self.blocks.prefix(block) + within + partial
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
        // renumbered in place, into as many positions and into more
        for capacity in [capacity, 5_000] {
            let order: Vec<usize> = (0..plain.len()).filter(|&p| plain[p] > 0).collect();
            bytes.renumber(capacity, order.iter().copied());
            plain = order.iter().map(|&p| plain[p]).collect();
            plain.resize(capacity, 0);
            for at in (0..=capacity).step_by(7) {
                let want: u64 = plain[..at].iter().map(|&s| s as u64).sum();
                assert_eq!(bytes.before(at), want, "renumbered: bytes before {at}");
            }
            let next = order.len();
            bytes.insert(next, 9);
            plain[next] = 9;
            assert_eq!(
                bytes.before(next + 1),
                plain.iter().map(|&s| s as u64).sum::<u64>()
            );
        }
    }
}
