//! `NearStack`: the exact stack of the most recent objects, bounded, and its table of
//! `Slot`s. It sees every request of a sampled run, so it is the hot path and is tuned
//! apart from the rest; the hybrid's bounded samples reuse it for their sampled objects.

use super::mix;
use crate::fenwick::Fenwick;

/// What the near stack saw of a request.
pub(super) enum Near {
    /// Within the stack: the exact distance in objects and bytes, and the object's size before.
    Hit { objects: u64, bytes: u64, old: u32 },
    /// Beyond it (or new): the request entered the stack, pushing out this object, if any.
    Miss { evicted: Option<(u64, u32)> },
}

const VACANT: u32 = u32::MAX;

/// A slot of the near stack's table: an object, the position of its latest access, its size.
#[derive(Clone, Copy)]
struct Slot {
    id: u64,
    pos: u32,
    size: u32,
}

/// The `capacity` most recent distinct objects of every request, exactly: an LRU stack
/// that forgets the rest. It sees every request, so each step is kept short: one probe of
/// an open-addressed table (linear probing, at most half full, keyed by the hash already
/// drawn for sampling), and on a hit two walks of a Fenwick tree that holds only the
/// markers a hit *removed* — positions are handed out in time order, so the markers after an
/// object's own are the positions after it minus the removed ones, and the bytes after it a
/// running sum minus the removed bytes. Forgetting the oldest object touches neither the
/// tree (every later count starts after a live position, so after it) nor the table: its
/// slot stays, and a slot whose position is no longer live is an object forgotten. Positions
/// live in a window of twice the capacity; when it fills they are renumbered and the table
/// is rebuilt from the live ones (deleting from a probed table costs more than that).
pub(super) struct NearStack {
    pub(super) capacity: usize,
    salt: u64,
    slots: Vec<Slot>,
    mask: usize,
    pub(super) len: usize,
    ids: Vec<u64>,      // position -> object
    sizes: Vec<u32>,    // position -> its size
    bytes_to: Vec<u64>, // position -> bytes of every access before it
    live: Vec<u64>,     // a bit per position: an object's latest access, in the stack
    removed: Fenwick,   // (1, size) at each position a hit made no longer an object's latest
    removed_count: u64,
    removed_bytes: u64,
    tail: usize, // no live position before it
    next: usize,
    pub(super) bytes: u64, // of the objects in the stack
    pub(super) evicted: bool,
}

const EMPTY: Slot = Slot {
    id: 0,
    pos: VACANT,
    size: 0,
};

impl NearStack {
    pub(super) fn new(capacity: usize, salt: u64) -> Self {
        let window = capacity * 2;
        // between rebuilds the table holds at most a window of objects: at most half full
        let table = (2 * window).next_power_of_two().max(4);
        NearStack {
            capacity,
            salt,
            slots: vec![EMPTY; table],
            mask: table - 1,
            len: 0,
            ids: vec![0; window],
            sizes: vec![0; window],
            bytes_to: vec![0; window + 1],
            live: vec![0; window.div_ceil(64)],
            removed: Fenwick::new(window),
            removed_count: 0,
            removed_bytes: 0,
            tail: 0,
            next: 0,
            bytes: 0,
            evicted: false,
        }
    }

    #[inline]
    fn home(&self, hash: u64) -> usize {
        (hash >> 32) as usize & self.mask
    }

    #[inline]
    fn is_live(&self, pos: usize) -> bool {
        self.live[pos / 64] & (1 << (pos % 64)) != 0
    }

    /// Asks the CPU to fetch the table slot where an object of `hash` starts its probe.
    #[inline]
    pub(super) fn prefetch(&self, hash: u64) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let slot = &self.slots[self.home(hash)] as *const Slot as *const i8;
            // SAFETY: a prefetch only hints the cache; the address is a valid slot
            unsafe { _mm_prefetch::<_MM_HINT_T0>(slot) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = hash;
    }

    /// The slot holding `id`, or the vacant one where it goes.
    #[inline]
    fn probe(&self, id: u64, hash: u64) -> usize {
        let mut i = self.home(hash);
        while self.slots[i].pos != VACANT && self.slots[i].id != id {
            i = (i + 1) & self.mask;
        }
        i
    }

    /// `hash`: `mix(id ^ salt)`.
    pub(super) fn access(&mut self, id: u64, size: u32, hash: u64) -> Near {
        if self.next == self.ids.len() {
            self.compact();
        }
        let at = self.next;
        self.next += 1;
        self.ids[at] = id;
        self.sizes[at] = size;
        self.bytes_to[at + 1] = self.bytes_to[at] + size as u64;
        let i = self.probe(id, hash);
        let slot = self.slots[i];
        self.slots[i] = Slot {
            id,
            pos: at as u32,
            size,
        };
        let seen = slot.pos != VACANT && self.is_live(slot.pos as usize);
        self.live[at / 64] |= 1 << (at % 64);
        if seen {
            let pos = slot.pos as usize;
            let [count, bytes] = self.removed.prefix(pos + 1);
            let above = (at - pos - 1) as u64 - (self.removed_count - count);
            let above_bytes =
                self.bytes_to[at] - self.bytes_to[pos + 1] - (self.removed_bytes - bytes);
            self.removed.add(pos, [1, slot.size as u64]);
            self.removed_count += 1;
            self.removed_bytes += slot.size as u64;
            self.live[pos / 64] &= !(1 << (pos % 64));
            self.bytes = self.bytes + size as u64 - slot.size as u64;
            return Near::Hit {
                objects: above + 1,
                bytes: above_bytes + size as u64,
                old: slot.size,
            };
        }
        self.len += 1;
        self.bytes += size as u64;
        if self.len <= self.capacity {
            return Near::Miss { evicted: None };
        }
        Near::Miss {
            evicted: Some(self.evict()),
        }
    }

    /// Forgets the least recently used object (its slot stays, no longer live).
    fn evict(&mut self) -> (u64, u32) {
        let mut word = self.tail / 64;
        let mut bits = self.live[word] & (u64::MAX << (self.tail % 64));
        while bits == 0 {
            word += 1;
            bits = self.live[word];
        }
        let pos = word * 64 + bits.trailing_zeros() as usize;
        self.live[word] &= !(1 << (pos % 64));
        self.tail = pos + 1;
        let size = self.sizes[pos];
        self.bytes -= size as u64;
        self.len -= 1;
        self.evicted = true;
        (self.ids[pos], size)
    }

    /// Renumbers the live positions 0..len in time order, and rebuilds the table from them.
    fn compact(&mut self) {
        let mut kept = 0;
        for word in self.tail / 64..self.next.div_ceil(64) {
            let mut bits = self.live[word];
            self.live[word] = 0;
            while bits != 0 {
                let pos = word * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                self.ids[kept] = self.ids[pos];
                self.sizes[kept] = self.sizes[pos];
                self.bytes_to[kept + 1] = self.bytes_to[kept] + self.sizes[kept] as u64;
                kept += 1;
            }
        }
        for word in 0..kept / 64 {
            self.live[word] = u64::MAX;
        }
        if kept % 64 != 0 {
            self.live[kept / 64] = (1 << (kept % 64)) - 1;
        }
        self.slots.fill(EMPTY);
        for pos in 0..kept {
            let id = self.ids[pos];
            let i = self.probe(id, mix(id ^ self.salt));
            self.slots[i] = Slot {
                id,
                pos: pos as u32,
                size: self.sizes[pos],
            };
        }
        self.removed.clear();
        self.removed_count = 0;
        self.removed_bytes = 0;
        self.tail = 0;
        self.next = kept;
    }
}
