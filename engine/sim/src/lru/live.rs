//! `LivePositions`: which positions in time hold an object's latest access, and how many
//! come before a given one. The unbounded stack's distance is a rank in this set. A Fenwick
//! tree over every position walks ~20 cache lines per rank at 10⁶ objects, most of them
//! missing the caches; here the set is a bitmap (one bit per position) and only the blocks
//! of 512 positions — one cache line of bitmap each — are counted in a Fenwick tree, 1/512
//! the size, which stays in L1/L2. A rank is that tree's walk plus popcounts in one line.
//! Positions are set in increasing order (time), so the block being filled is kept out of
//! the tree until it is full: setting a position costs no walk.

use crate::fenwick::SumTree;

const WORDS: usize = 8;
/// Positions per block: one 64-byte cache line of bitmap.
pub(super) const BLOCK: usize = 64 * WORDS;

#[derive(Clone, Copy, Default)]
#[repr(align(64))]
struct Block([u64; WORDS]);

/// A set of positions `0..capacity` with ranks: a bitmap, and the live count of each block
/// of `BLOCK` positions before `open` in a Fenwick tree.
pub(super) struct LivePositions {
    blocks: Vec<Block>,
    counts: SumTree<u32>,
    /// the block new positions go to (no later one has any): its count is not in the tree
    open: usize,
}

impl LivePositions {
    /// Positions `0..live` set, the rest of `capacity` (rounded up to a block) clear.
    pub(super) fn first(live: usize, capacity: usize) -> Self {
        let n = capacity.max(live).div_ceil(BLOCK).max(1);
        let mut blocks = vec![Block::default(); n];
        let mut counts = vec![0u32; n];
        for pos in (0..live).step_by(64) {
            let bits = (live - pos).min(64);
            blocks[pos / BLOCK].0[pos % BLOCK / 64] = u64::MAX >> (64 - bits);
            counts[pos / BLOCK] += bits as u32;
        }
        let open = live / BLOCK;
        if let Some(count) = counts.get_mut(open) {
            *count = 0;
        }
        LivePositions {
            blocks,
            counts: SumTree::from_leaves(&counts),
            open,
        }
    }

    pub(super) fn capacity(&self) -> usize {
        self.blocks.len() * BLOCK
    }

    /// Sets `pos`, which must lie after every set position.
    #[inline]
    pub(super) fn insert(&mut self, pos: usize) {
        if pos / BLOCK != self.open {
            self.close(pos / BLOCK);
        }
        self.blocks[pos / BLOCK].0[pos % BLOCK / 64] |= 1 << (pos % 64);
    }

    /// The open block's count goes into the tree; `to` is open (the blocks between are empty).
    #[cold]
    fn close(&mut self, to: usize) {
        debug_assert!(to > self.open, "positions are set in increasing order");
        self.counts.add(self.open, self.count(self.open));
        self.open = to;
    }

    /// `pos` must be set.
    #[inline]
    pub(super) fn remove(&mut self, pos: usize) {
        self.blocks[pos / BLOCK].0[pos % BLOCK / 64] &= !(1 << (pos % 64));
        if pos / BLOCK < self.open {
            self.counts.sub(pos / BLOCK, 1);
        }
    }

    /// Set positions before `pos`.
    #[inline]
    pub(super) fn rank(&self, pos: usize) -> u64 {
        let block = pos / BLOCK;
        let before = match block <= self.open {
            true => self.counts.prefix(block),
            false => self.counts.prefix(self.open) + self.count(self.open), // empty between
        };
        before as u64 + self.rank_in_block(pos)
    }

    fn count(&self, block: usize) -> u32 {
        self.blocks[block].0.iter().map(|w| w.count_ones()).sum()
    }

    /// Set positions before `pos` within its block: whole words before its word (masked,
    /// not branched on, so the loop has a fixed length), then its word's lower bits.
    #[inline]
    fn rank_in_block(&self, pos: usize) -> u64 {
        let words = &self.blocks[pos / BLOCK].0;
        let word = pos % BLOCK / 64;
        let mut n = 0;
        for (k, w) in words.iter().enumerate() {
            let keep = if k < word { u64::MAX } else { 0 };
            n += (w & keep).count_ones();
        }
        let low = (1u64 << (pos % 64)) - 1;
        (n + (words[word] & low).count_ones()) as u64
    }

    /// The set positions, ascending.
    #[cfg(test)]
    fn positions(&self) -> impl Iterator<Item = usize> + '_ {
        self.blocks.iter().enumerate().flat_map(|(b, block)| {
            block.0.iter().enumerate().flat_map(move |(k, &w)| {
                let base = b * BLOCK + k * 64;
                std::iter::successors((w != 0).then_some(w), |&w| {
                    let rest = w & (w - 1);
                    (rest != 0).then_some(rest)
                })
                .map(move |w| base + w.trailing_zeros() as usize)
            })
        })
    }

    /// The rank of every position, cheaply, while the set does not change: for renumbering
    /// (`rank` walks the tree; this reads a flat prefix of the block counts).
    pub(super) fn ranker(&self) -> impl Fn(usize) -> u64 + '_ {
        let mut sum = 0u64;
        let before: Vec<u64> = self
            .blocks
            .iter()
            .map(|b| {
                let here = sum;
                sum += b.0.iter().map(|w| w.count_ones() as u64).sum::<u64>();
                here
            })
            .collect();
        move |pos| before[pos / BLOCK] + self.rank_in_block(pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lru::mix;

    #[test]
    fn ranks_match_a_plain_set_through_inserts_and_removes() {
        // as the stack uses it: each step sets the next position and may clear an older one
        let capacity = 7 * BLOCK + 77;
        let start = 1_000;
        let mut live = LivePositions::first(start, capacity);
        let mut plain = vec![false; live.capacity()];
        plain[..start].fill(true);
        for next in start..capacity {
            let k = next as u64;
            let older = (mix(k) % next as u64) as usize;
            if plain[older] && !mix(k ^ 1).is_multiple_of(4) {
                live.remove(older);
                plain[older] = false;
            }
            if !mix(k ^ 2).is_multiple_of(50) {
                live.insert(next); // now and then a position is skipped
                plain[next] = true;
            }
            let at = (mix(k ^ 0xABC) % (next as u64 + 2)) as usize;
            let want = plain[..at].iter().filter(|&&b| b).count() as u64;
            assert_eq!(live.rank(at), want, "rank of {at}");
        }
        let set: Vec<usize> = (0..plain.len()).filter(|&p| plain[p]).collect();
        assert_eq!(live.positions().collect::<Vec<_>>(), set);
        let ranker = live.ranker();
        let mut want = 0;
        for (pos, &set) in plain.iter().enumerate() {
            assert_eq!(ranker(pos), want);
            want += set as u64;
        }
    }

    #[test]
    fn the_first_positions_are_set() {
        for live in [0, 1, 63, 64, 65, BLOCK, BLOCK + 1, 3 * BLOCK - 1] {
            let set = LivePositions::first(live, 4 * BLOCK);
            assert_eq!(set.capacity(), 4 * BLOCK);
            for pos in [0, live / 2, live, 4 * BLOCK - 1] {
                assert_eq!(set.rank(pos), pos.min(live) as u64, "{live} {pos}");
            }
        }
    }
}
