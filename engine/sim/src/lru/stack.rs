//! `Stack`: an unbounded LRU stack of every object it sees, compacted so memory follows the
//! objects. The exact engine and plain SHARDS run on it, and so does the hybrid's sample at
//! the rate asked for.
//!
//! Each request takes the next position in time; an object's latest access is a set
//! position in `LivePositions`, and the objects above it are the set positions after its
//! own: `live - 1 - rank(pos)`, one walk of a tree small enough to stay in cache. Bytes
//! above are `count × size` while every size seen is equal (a stream without sizes); once
//! one differs, `SizedPositions` takes over from `LivePositions`, giving the count and the
//! bytes before a position together (one tree walk). When the positions run out they are
//! renumbered `0..live` in time order into a window of `WINDOW` times the objects.

use super::live::{LivePositions, BLOCK};
use super::sized::{Size, SizedPositions};
use super::table::IdTable;

/// Positions per object after a renumbering: each renumbering reads the whole table, and
/// comes after `WINDOW - 1` times the objects in requests (4 against 2: 4 % faster at 10⁶
/// objects, for 4 bits and, once sizes differ, 8 bytes more per object).
const WINDOW: usize = 4;

/// The live positions: counted while every size is equal, with their sizes once two differed
/// (as u16 while every size fits, then as u32).
enum Positions {
    Counted(LivePositions),
    Narrow(SizedPositions<u16>),
    Wide(SizedPositions<u32>),
}

impl Positions {
    fn capacity(&self) -> usize {
        match self {
            Positions::Counted(live) => live.capacity(),
            Positions::Narrow(sized) => sized.capacity(),
            Positions::Wide(sized) => sized.capacity(),
        }
    }
}

/// An LRU stack of every object seen.
pub(super) struct Stack {
    table: IdTable,
    positions: Positions,
    /// the size of every request so far, while they are all equal
    unit: u32,
    next: usize,
    live_bytes: u64,
}

impl Stack {
    pub(super) fn new() -> Self {
        Stack {
            table: IdTable::default(),
            positions: Positions::Counted(LivePositions::first(0, BLOCK)),
            unit: 0,
            next: 0,
            live_bytes: 0,
        }
    }

    /// Distinct objects seen.
    pub(super) fn len(&self) -> usize {
        self.table.len()
    }

    /// Asks the CPU to fetch what a request for `id` will read first: its table slot.
    #[inline]
    pub(super) fn prefetch(&self, id: u64) {
        self.table.prefetch(id);
    }

    /// Asks the CPU to fetch what a request for `id` reads next when sizes differ: its
    /// position's block and line of sizes (with equal sizes the bitmap alone mostly stays in
    /// L2, and reading the slot early costs more than it saves: measured). Reads its slot,
    /// so call it once that has been fetched (`prefetch` some requests before); a position
    /// that moves before the request only wastes the hint.
    #[inline]
    pub(super) fn prefetch_position(&self, id: u64) {
        let pos = || self.table.position(id);
        match &self.positions {
            Positions::Counted(_) => {}
            Positions::Narrow(sized) => pos().into_iter().for_each(|p| sized.prefetch(p)),
            Positions::Wide(sized) => pos().into_iter().for_each(|p| sized.prefetch(p)),
        }
    }

    /// Moves `id` to the top. Returns how many objects were above it, and their bytes, or
    /// None when it is new.
    #[inline]
    pub(super) fn touch(&mut self, id: u64, size: u32) -> Option<(u64, u64)> {
        if self.next == self.positions.capacity() {
            self.compact();
        }
        if size != self.unit {
            match self.positions {
                Positions::Counted(_) => self.unequal_sizes(size),
                Positions::Narrow(_) if size > u16::MAX as u32 => self.widen(),
                _ => {}
            }
        }
        let at = self.next;
        self.next += 1;
        let objects = self.table.len() as u64;
        let (slot, found) = self.table.entry(id);
        let pos = *slot as usize;
        *slot = at as u32;
        match &mut self.positions {
            Positions::Counted(live) => {
                let above = found.then(|| {
                    let objects_above = objects - 1 - live.rank(pos);
                    live.remove(pos);
                    (objects_above, objects_above * self.unit as u64)
                });
                live.insert(at);
                above
            }
            Positions::Narrow(sized) => {
                let size = u16::narrow(size).expect("widened for a larger size");
                sized_touch(sized, &mut self.live_bytes, found.then_some(pos), at, size)
                    .map(|(older, bytes)| (objects - 1 - older, bytes))
            }
            Positions::Wide(sized) => {
                sized_touch(sized, &mut self.live_bytes, found.then_some(pos), at, size)
                    .map(|(older, bytes)| (objects - 1 - older, bytes))
            }
        }
    }

    /// The first size that does not fit u16.
    #[cold]
    fn widen(&mut self) {
        let narrow = std::mem::replace(
            &mut self.positions,
            Positions::Counted(LivePositions::first(0, BLOCK)),
        );
        if let Positions::Narrow(sized) = narrow {
            self.positions = Positions::Wide(sized.widen());
        }
    }

    /// The first request of all fixes the unit size; the first of another size switches to
    /// exact bytes by position.
    #[cold]
    fn unequal_sizes(&mut self, size: u32) {
        if self.table.len() == 0 {
            self.unit = size;
            return;
        }
        // every object so far is of the unit size
        let (capacity, unit) = (self.positions.capacity(), self.unit);
        let live = self.table.positions_mut().map(|p| (*p as usize, unit));
        self.positions = match u16::narrow(unit.max(size)) {
            Some(_) => Positions::Narrow(SizedPositions::new(capacity, self.next, live)),
            None => Positions::Wide(SizedPositions::new(capacity, self.next, live)),
        };
        self.live_bytes = self.table.len() as u64 * unit as u64;
    }

    /// Renumber the live positions 0..live in time order, in a window `WINDOW` times that size.
    #[cold]
    fn compact(&mut self) {
        let len = self.table.len();
        assert!(
            len < (u32::MAX / 4) as usize,
            "too many objects for u32 positions"
        );
        let capacity = (WINDOW * len).max(BLOCK);
        match &mut self.positions {
            Positions::Counted(live) => {
                {
                    let rank = live.ranker();
                    for pos in self.table.positions_mut() {
                        *pos = rank(*pos as usize) as u32;
                    }
                }
                *live = LivePositions::first(len, capacity);
            }
            Positions::Narrow(sized) => renumber(sized, &mut self.table, capacity),
            Positions::Wide(sized) => renumber(sized, &mut self.table, capacity),
        }
        self.next = len;
    }
}

/// `Stack::touch` once sizes differ: the object at `pos` (None: new) moves to `at`; the live
/// positions above it and their bytes.
#[inline]
fn sized_touch<T: Size>(
    sized: &mut SizedPositions<T>,
    live_bytes: &mut u64,
    pos: Option<usize>,
    at: usize,
    size: T,
) -> Option<(u64, u64)> {
    let above = pos.map(|pos| {
        let (older, before) = sized.before(pos);
        // the object's size until now: its position's
        let old = sized.remove(pos);
        let bytes_above = *live_bytes - before - old;
        *live_bytes -= old;
        (older, bytes_above)
    });
    sized.insert(at, size);
    *live_bytes += size.into();
    above
}

/// The table's positions renumbered by their rank, then the positions themselves.
fn renumber<T: Size>(sized: &mut SizedPositions<T>, table: &mut IdTable, capacity: usize) {
    {
        let rank = sized.ranker();
        for pos in table.positions_mut() {
            *pos = rank(*pos as usize) as u32;
        }
    }
    sized.renumber(capacity);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lru::mix;

    /// The textbook stack, most recent first: (objects above, their bytes), or None when new.
    fn naive(stack: &mut Vec<(u64, u32)>, id: u64, size: u32) -> Option<(u64, u64)> {
        let found = stack.iter().position(|&(x, _)| x == id);
        let above = found.map(|i| (i as u64, stack[..i].iter().map(|&(_, s)| s as u64).sum()));
        if let Some(i) = found {
            stack.remove(i);
        }
        stack.insert(0, (id, size));
        above
    }

    /// Requests over a set of objects that grows (new objects keep the window moving) and
    /// a skewed popularity (short and long distances), with sizes from `size`.
    fn check(requests: u64, objects: u64, size: impl Fn(u64, u64) -> u32) {
        let mut stack = Stack::new();
        let mut plain = Vec::new();
        for k in 0..requests {
            let reach = 1 + objects * (k + 1) / requests;
            let u = (mix(k) >> 11) as f64 / (1u64 << 53) as f64;
            let id = (u * u * reach as f64) as u64;
            let s = size(k, id);
            assert_eq!(stack.touch(id, s), naive(&mut plain, id, s), "request {k}");
        }
        assert_eq!(stack.len(), plain.len());
    }

    #[test]
    fn distances_match_a_plain_stack_with_equal_sizes() {
        check(60_000, 3_000, |_, _| 1);
        check(30_000, 2_000, |_, _| 4_096);
    }

    #[test]
    fn distances_match_a_plain_stack_when_sizes_start_to_differ() {
        // equal sizes first (count × size), then each object's own, then sizes that change
        check(60_000, 3_000, |k, id| {
            if k < 20_000 {
                7
            } else {
                (mix(id) % 5_000) as u32
            }
        });
        check(40_000, 1_500, |k, id| (mix(id ^ (k / 10_000)) % 300) as u32);
        check(20_000, 50, |k, _| (k % 3) as u32); // few objects: renumbered hundreds of times
    }

    #[test]
    fn distances_match_a_plain_stack_when_sizes_outgrow_u16() {
        // kept as u16, then a size beyond it: widened to u32 on the way
        check(60_000, 3_000, |k, id| match k < 25_000 {
            true => (mix(id) % 60_000) as u32,
            false => (mix(id ^ (k / 10_000)) % 300_000) as u32,
        });
        // unequal from the start, one of them already beyond u16
        check(20_000, 1_000, |k, id| match k {
            0 => 70_000,
            _ => (mix(id) % 100_000) as u32,
        });
    }
}
