//! `SizedPositions`: the live positions in time and their objects' sizes together, for a
//! stream whose sizes differ (with equal sizes, `LivePositions` counts and the bytes are the
//! count times the size). One call gives both what an object's distance needs: the live
//! positions before its own and their bytes.
//!
//! Each block of 512 positions is one record of two cache lines: its bitmap and the bytes of
//! each of its words of 64 positions. One Fenwick tree over the blocks holds count and bytes
//! together, so a request walks it once for the prefix and once for the update, where a tree
//! of counts and another of bytes took two walks each. Each position keeps its object's
//! size, zeroed when the object moves on, in 128-byte lines of the 32 sizes of half a word
//! (aligned: 4-byte-aligned sizes put the half word across three cache lines, of which two
//! were fetched ahead); the bytes before a position within its word come from its own half
//! alone (counted from the word's start in the first half, else from the word's end). As in
//! `LivePositions`, the block being filled stays out of the tree until it is full: a new
//! position costs no walk.

use crate::fenwick::Fenwick;
use crate::mem::{filled, prefetch};

const WORDS: usize = 8;
/// Positions per block (as `LivePositions`': the renumbering window is counted in them).
pub(super) const BLOCK: usize = 64 * WORDS;
/// Positions per byte sum of a block: a word.
const WORD: usize = 64;
const SUMS: usize = BLOCK / WORD;
/// Sizes per line of `sizes`: half a word, two cache lines.
const LINE: usize = 32;

/// A block: which of its positions are live, and the bytes of each word (two cache lines).
#[derive(Clone, Copy, Default)]
#[repr(C, align(128))]
struct Block {
    bits: [u64; WORDS],
    sums: [u64; SUMS], // bytes of each word
}

/// A position's size as kept: `u16` while every size fits (a half word's sizes are then one
/// cache line, and the array half as large), `u32` once one does not.
pub(super) trait Size: Copy + Default + Into<u64> {
    fn narrow(size: u32) -> Option<Self>;
}

impl Size for u16 {
    #[inline]
    fn narrow(size: u32) -> Option<Self> {
        u16::try_from(size).ok()
    }
}

impl Size for u32 {
    #[inline]
    fn narrow(size: u32) -> Option<Self> {
        Some(size)
    }
}

/// Half a word's sizes: one cache line (u16) or two (u32).
#[derive(Clone, Copy)]
#[repr(align(64))]
struct Line<T>([T; LINE]);

impl<T: Size> Default for Line<T> {
    fn default() -> Self {
        Line([T::default(); LINE])
    }
}

pub(super) struct SizedPositions<T: Size> {
    blocks: Vec<Block>,
    sizes: Vec<Line<T>>, // position -> its object's size while it is that object's latest access, else 0
    tree: Fenwick,       // (live count, bytes) of each block before `open`
    open: usize,         // the block new positions go to (no later one has any)
}

impl<T: Size> SizedPositions<T> {
    /// From `(position, size)` of every live object, all before `next`, over `capacity`
    /// positions (rounded up to a block).
    pub(super) fn new(
        capacity: usize,
        next: usize,
        live: impl Iterator<Item = (usize, u32)>,
    ) -> Self {
        let n = capacity.max(next).div_ceil(BLOCK).max(1);
        let mut s = SizedPositions {
            blocks: filled(n, Block::default()),
            sizes: filled(n * BLOCK / LINE, Line::default()),
            tree: Fenwick::new(n),
            open: 0,
        };
        for (pos, size) in live {
            let block = &mut s.blocks[pos / BLOCK];
            block.bits[pos % BLOCK / WORD] |= 1 << (pos % 64);
            block.sums[pos % BLOCK / WORD] += size as u64;
            s.sizes[pos / LINE].0[pos % LINE] = T::narrow(size).expect("a size that fits");
        }
        s.sum_up(next);
        s
    }

    pub(super) fn capacity(&self) -> usize {
        self.blocks.len() * BLOCK
    }

    /// The tree from the blocks, positions from `next` on being free.
    fn sum_up(&mut self, next: usize) {
        self.open = next / BLOCK;
        let open = self.open;
        let leaves = self.blocks.iter().enumerate().map(|(k, b)| match k < open {
            true => [count(b) as u64, bytes(b)],
            false => [0, 0],
        });
        self.tree.rebuild(leaves);
    }

    /// Asks the CPU to fetch what `before(pos)` and `remove(pos)` read: the block's record
    /// (bitmap and word sums) and `pos`'s half word of sizes.
    #[inline]
    pub(super) fn prefetch(&self, pos: usize) {
        if let (Some(block), Some(line)) =
            (self.blocks.get(pos / BLOCK), self.sizes.get(pos / LINE))
        {
            prefetch(&block.bits);
            prefetch(&block.sums);
            prefetch(&line.0[0]);
            if std::mem::size_of::<Line<T>>() > 64 {
                prefetch(&line.0[LINE / 2]);
            }
        }
    }

    /// `pos` must be free, and after every live position; `size` must fit `T`.
    #[inline]
    pub(super) fn insert(&mut self, pos: usize, size: T) {
        if pos / BLOCK != self.open {
            self.close(pos / BLOCK);
        }
        let block = &mut self.blocks[pos / BLOCK];
        block.bits[pos % BLOCK / WORD] |= 1 << (pos % 64);
        block.sums[pos % BLOCK / WORD] += size.into();
        self.sizes[pos / LINE].0[pos % LINE] = size;
    }

    /// The open block goes into the tree; `to` is open (the blocks between are empty).
    #[cold]
    fn close(&mut self, to: usize) {
        debug_assert!(to > self.open, "positions are taken in increasing order");
        let b = &self.blocks[self.open];
        self.tree.add(self.open, [count(b) as u64, bytes(b)]);
        self.open = to;
    }

    /// Frees `pos`, which must be live; returns its size.
    #[inline]
    pub(super) fn remove(&mut self, pos: usize) -> u64 {
        let size: u64 = std::mem::take(&mut self.sizes[pos / LINE].0[pos % LINE]).into();
        let block = &mut self.blocks[pos / BLOCK];
        block.bits[pos % BLOCK / WORD] &= !(1 << (pos % 64));
        block.sums[pos % BLOCK / WORD] -= size;
        if pos / BLOCK < self.open {
            self.tree
                .add(pos / BLOCK, [1u64.wrapping_neg(), size.wrapping_neg()]);
        }
        size
    }

    /// The live positions before `pos`, and their bytes.
    #[inline]
    pub(super) fn before(&self, pos: usize) -> (u64, u64) {
        let block = pos / BLOCK;
        if block > self.open || block >= self.blocks.len() {
            // every live position is before it (the blocks after the open one are empty)
            let [n, b] = self.tree.prefix(self.open);
            let open = &self.blocks[self.open.min(self.blocks.len() - 1)];
            return match self.open < self.blocks.len() {
                true => (n + count(open) as u64, b + bytes(open)),
                false => (n, b),
            };
        }
        let [n, b] = self.tree.prefix(block);
        let rec = &self.blocks[block];
        // within the block, masked, not branched on, so the loops have a fixed length
        let word = pos % BLOCK / WORD;
        let mut live = 0;
        for (k, w) in rec.bits.iter().enumerate() {
            live += (w & if k < word { u64::MAX } else { 0 }).count_ones();
        }
        live += (rec.bits[word] & ((1u64 << (pos % 64)) - 1)).count_ones();
        let mut within = 0;
        for (k, &h) in rec.sums.iter().enumerate() {
            within += if k < word { h } else { 0 };
        }
        // within the word: from pos's own half word, counted from the nearer end of the word
        let line = &self.sizes[pos / LINE].0;
        let at = pos % LINE;
        let (mut low, mut high) = (0u64, 0u64);
        for (k, &s) in line.iter().enumerate() {
            if k < at {
                low += s.into();
            } else {
                high += s.into();
            }
        }
        let partial = match pos % WORD < LINE {
            true => low,
            false => rec.sums[word] - high,
        };
        (n + live as u64, b + within + partial)
    }

    /// The live positions, ascending.
    #[cfg(test)]
    fn positions(&self) -> impl Iterator<Item = usize> + '_ {
        self.blocks.iter().enumerate().flat_map(|(b, block)| {
            block.bits.iter().enumerate().flat_map(move |(k, &w)| {
                let base = b * BLOCK + k * 64;
                std::iter::successors((w != 0).then_some(w), |&w| {
                    let rest = w & (w - 1);
                    (rest != 0).then_some(rest)
                })
                .map(move |w| base + w.trailing_zeros() as usize)
            })
        })
    }

    /// The rank of every live position, cheaply, while the set does not change: for
    /// renumbering (a flat prefix of the block counts, no tree walks).
    pub(super) fn ranker(&self) -> impl Fn(usize) -> u64 + '_ {
        let mut sum = 0u64;
        let before: Vec<u64> = self
            .blocks
            .iter()
            .map(|b| {
                let here = sum;
                sum += count(b) as u64;
                here
            })
            .collect();
        move |pos| {
            let bits = &self.blocks[pos / BLOCK].bits;
            let word = pos % BLOCK / WORD;
            let whole: u32 = bits[..word].iter().map(|w| w.count_ones()).sum();
            let low = (bits[word] & ((1u64 << (pos % 64)) - 1)).count_ones();
            before[pos / BLOCK] + (whole + low) as u64
        }
    }

    /// Renumbers in place: the live positions (ascending) become
    /// `0..live`, over `capacity` positions (rounded up to a block). One pass over the sizes,
    /// in order; the arrays are reused when they are large enough (no new pages to fault in).
    pub(super) fn renumber(&mut self, capacity: usize) {
        // in order of the bitmap, not collected first (a list of every object, to fault in)
        let mut live = 0;
        for b in 0..self.blocks.len() {
            for k in 0..WORDS {
                let mut w = self.blocks[b].bits[k];
                while w != 0 {
                    let from = b * BLOCK + k * 64 + w.trailing_zeros() as usize;
                    w &= w - 1;
                    // live <= from: not yet read
                    let size = self.sizes[from / LINE].0[from % LINE];
                    self.sizes[live / LINE].0[live % LINE] = size;
                    live += 1;
                }
            }
        }
        let n = capacity.max(live).div_ceil(BLOCK).max(1);
        if n > self.blocks.len() {
            let mut sizes = filled(n * BLOCK / LINE, Line::default());
            let lines = live.div_ceil(LINE);
            sizes[..lines].copy_from_slice(&self.sizes[..lines]);
            self.sizes = sizes;
            self.blocks = filled(n, Block::default());
            self.tree = Fenwick::new(n);
        } else {
            self.blocks.fill(Block::default());
        }
        // clear what follows the live positions (the rest of their last line, and beyond)
        if !live.is_multiple_of(LINE) {
            self.sizes[live / LINE].0[live % LINE..].fill(T::default());
        }
        self.sizes[live.div_ceil(LINE)..].fill(Line::default());
        for pos in (0..live).step_by(64) {
            let bits = (live - pos).min(64);
            self.blocks[pos / BLOCK].bits[pos % BLOCK / 64] = u64::MAX >> (64 - bits);
        }
        for (k, line) in self.sizes[..live.div_ceil(LINE)].iter().enumerate() {
            let pos = k * LINE;
            self.blocks[pos / BLOCK].sums[pos % BLOCK / WORD] +=
                line.0.iter().map(|&s| s.into()).sum::<u64>();
        }
        self.sum_up(live);
    }
}

impl SizedPositions<u16> {
    /// The same positions with room for any size.
    pub(super) fn widen(self) -> SizedPositions<u32> {
        let mut sizes = filled(self.sizes.len(), Line::<u32>::default());
        for (wide, narrow) in sizes.iter_mut().zip(&self.sizes) {
            for (w, &n) in wide.0.iter_mut().zip(&narrow.0) {
                *w = n as u32;
            }
        }
        SizedPositions {
            blocks: self.blocks,
            sizes,
            tree: self.tree,
            open: self.open,
        }
    }
}

fn count(b: &Block) -> u32 {
    b.bits.iter().map(|w| w.count_ones()).sum()
}

fn bytes(b: &Block) -> u64 {
    b.sums.iter().sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lru::mix;

    /// (live positions before `at`, their bytes) in a plain array of `Option<size>`.
    fn plain_before(plain: &[Option<u32>], at: usize) -> (u64, u64) {
        let live = plain[..at.min(plain.len())].iter().flatten();
        (live.clone().count() as u64, live.map(|&s| s as u64).sum())
    }

    /// As the stack uses it: each step takes the next position and may free an older one.
    fn steps<T: Size>(
        sized: &mut SizedPositions<T>,
        plain: &mut [Option<u32>],
        steps: std::ops::Range<usize>,
        capacity: usize,
    ) {
        for next in steps {
            let k = next as u64;
            let older = (mix(k) % next as u64) as usize;
            if let Some(size) = plain[older] {
                assert_eq!(sized.remove(older), size as u64);
                plain[older] = None;
            }
            if !mix(k ^ 2).is_multiple_of(50) {
                // now and then a position is skipped; sizes of every magnitude that fits, zero too
                let size = (mix(k ^ 7) >> (mix(k ^ 9) % 64)) as u32;
                let size = T::narrow(size).unwrap_or_else(|| T::narrow(size % 65_536).unwrap());
                sized.insert(next, size);
                plain[next] = Some(size.into() as u32);
            }
            let at = (mix(k ^ 0xABC) % (next as u64 + 100).min(capacity as u64 + 1)) as usize;
            assert_eq!(sized.before(at), plain_before(plain, at), "before {at}");
        }
    }

    /// Renumbered in place, into as many positions and into more.
    fn renumbered<T: Size>(sized: &mut SizedPositions<T>, mut plain: Vec<Option<u32>>) {
        for capacity in [plain.len(), 12 * BLOCK + 5] {
            let order: Vec<usize> = (0..plain.len()).filter(|&p| plain[p].is_some()).collect();
            assert_eq!(sized.positions().collect::<Vec<_>>(), order);
            {
                let ranker = sized.ranker();
                for (rank, &pos) in order.iter().enumerate() {
                    assert_eq!(ranker(pos), rank as u64);
                }
            }
            sized.renumber(capacity);
            plain = order.iter().map(|&p| plain[p]).collect();
            plain.resize(sized.capacity(), None);
            assert!(sized.capacity() >= capacity);
            for at in (0..=sized.capacity()).step_by(7) {
                assert_eq!(
                    sized.before(at),
                    plain_before(&plain, at),
                    "renumbered: {at}"
                );
            }
            let next = order.len();
            sized.insert(next, T::narrow(9).unwrap());
            plain[next] = Some(9);
            assert_eq!(
                sized.before(next + 1),
                plain_before(&plain, sized.capacity())
            );
        }
    }

    #[test]
    fn counts_and_bytes_before_match_a_plain_array() {
        let capacity = 7 * BLOCK + 77;
        let start = 500;
        let mut plain: Vec<Option<u32>> = (0..capacity)
            .map(|p| (p < start && p % 3 == 0).then_some(p as u32 % 4))
            .collect();
        let live: Vec<(usize, u32)> = plain
            .iter()
            .enumerate()
            .filter_map(|(p, s)| s.map(|s| (p, s)))
            .collect();
        // sizes as u32 throughout
        let mut wide = SizedPositions::<u32>::new(capacity, start, live.iter().copied());
        let mut wide_plain = plain.clone();
        wide_plain.resize(wide.capacity(), None);
        steps(&mut wide, &mut wide_plain, start..capacity, capacity);
        renumbered(&mut wide, wide_plain);
        // as u16 while they fit, then widened
        let mut narrow = SizedPositions::<u16>::new(capacity, start, live.iter().copied());
        plain.resize(narrow.capacity(), None);
        let half = (start + capacity) / 2;
        steps(&mut narrow, &mut plain, start..half, capacity);
        let mut wide = narrow.widen();
        steps(&mut wide, &mut plain, half..capacity, capacity);
        renumbered(&mut wide, plain);
    }
}
