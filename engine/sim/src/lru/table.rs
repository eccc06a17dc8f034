//! `IdTable`: object -> (position of its latest access, its size) for the unbounded stack.
//! It is the one structure there that outgrows the caches (16 bytes a slot, at most half
//! full), so a request costs one of its cache lines; an open-addressed table with linear
//! probing makes that line the home slot's, known from the id alone, so it can be fetched
//! ahead (`prefetch`) while earlier requests are worked on. Objects never leave the
//! unbounded stack, so there is no deletion.

use super::mix;
use crate::mem::{filled, prefetch};

/// A slot of the table: an object, the position of its latest access, its size then.
#[derive(Clone, Copy)]
pub(super) struct Slot {
    pub(super) id: u64,
    pub(super) pos: u32,
    pub(super) size: u32,
}

const VACANT: u32 = u32::MAX;
const EMPTY: Slot = Slot {
    id: 0,
    pos: VACANT,
    size: 0,
};

pub(super) struct IdTable {
    slots: Vec<Slot>,
    shift: u32, // home slot: the hash's top bits
    len: usize,
}

impl Default for IdTable {
    fn default() -> Self {
        Self::with_slots(1024)
    }
}

impl IdTable {
    fn with_slots(n: usize) -> Self {
        IdTable {
            slots: filled(n, EMPTY),
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

    /// Asks the CPU to fetch the slot where `id`'s probe starts.
    #[inline]
    pub(super) fn prefetch(&self, id: u64) {
        prefetch(&self.slots[self.home(id)]);
    }

    #[inline]
    fn probe(&self, id: u64) -> usize {
        let mask = self.slots.len() - 1;
        let mut i = self.home(id);
        while self.slots[i].pos != VACANT && self.slots[i].id != id {
            i = (i + 1) & mask;
        }
        i
    }

    /// The position of `id`'s latest access, if it is there (reads only: for fetching ahead).
    #[inline]
    pub(super) fn position(&self, id: u64) -> Option<usize> {
        let slot = self.slots[self.probe(id)];
        (slot.pos != VACANT).then_some(slot.pos as usize)
    }

    /// `id`'s slot, and whether it was there; a new one is vacant (its `pos` is `u32::MAX`)
    /// and must be filled in.
    #[inline]
    pub(super) fn entry(&mut self, id: u64) -> (&mut Slot, bool) {
        if 2 * (self.len + 1) > self.slots.len() {
            self.grow();
        }
        let i = self.probe(id);
        let found = self.slots[i].pos != VACANT;
        if !found {
            self.len += 1;
            self.slots[i].id = id;
        }
        (&mut self.slots[i], found)
    }

    fn grow(&mut self) {
        let old = std::mem::replace(self, Self::with_slots(self.slots.len() * 2));
        for slot in old.slots.into_iter().filter(|s| s.pos != VACANT) {
            let i = self.probe(slot.id);
            self.slots[i] = slot;
        }
        self.len = old.len;
    }

    /// Every object's slot.
    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Slot> {
        self.slots.iter_mut().filter(|s| s.pos != VACANT)
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
            let (slot, found) = table.entry(id);
            assert_eq!(found, plain.contains_key(&id));
            if found {
                assert_eq!((slot.pos, slot.size), plain[&id]);
            }
            slot.pos = k as u32;
            slot.size = (k % 7) as u32;
            plain.insert(id, (k as u32, (k % 7) as u32));
        }
        assert_eq!(table.len(), plain.len());
        assert_eq!(table.iter_mut().count(), plain.len());
    }
}
