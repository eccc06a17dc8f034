//! `Stack`: an unbounded LRU stack of every object it sees (a Fenwick tree over time,
//! compacted so memory follows the objects). The exact engine and plain SHARDS run on it,
//! and so does the hybrid's sample at the rate asked for.

use super::IdMap;
use crate::fenwick::Fenwick;

/// An LRU stack of every object seen: each object's latest access is a marker in a Fenwick
/// tree over time, renumbered when the tree fills.
pub(super) struct Stack {
    pub(super) last: IdMap<(u32, u32)>, // object -> (position of its latest marker, its size then)
    markers: Fenwick,                   // (1, size) at each object's latest access
    next: usize,
    live_bytes: u64,
}

impl Stack {
    pub(super) fn new() -> Self {
        Stack {
            last: IdMap::default(),
            markers: Fenwick::new(1024),
            next: 0,
            live_bytes: 0,
        }
    }

    /// Moves `id` to the top. Returns how many objects were above it, and their bytes, or
    /// None when it is new.
    pub(super) fn touch(&mut self, id: u64, size: u32) -> Option<(u64, u64)> {
        if self.next == self.markers.capacity() {
            self.compact();
        }
        let at = self.next;
        self.next += 1;
        let live = self.last.len() as u64;
        let above = match self.last.get_mut(&id) {
            Some(entry) => {
                let (pos, old) = *entry;
                *entry = (at as u32, size);
                let pos = pos as usize;
                let [older, older_bytes] = self.markers.prefix(pos + 1);
                let above = (live - older, self.live_bytes - older_bytes);
                self.markers
                    .add(pos, [u64::MAX, 0u64.wrapping_sub(old as u64)]); // -1, -old
                self.live_bytes -= old as u64;
                Some(above)
            }
            None => {
                self.last.insert(id, (at as u32, size));
                None
            }
        };
        self.markers.add(at, [1, size as u64]);
        self.live_bytes += size as u64;
        above
    }

    /// Renumber the live markers 0..live in time order, in a tree twice that size.
    fn compact(&mut self) {
        let mut order: Vec<(u32, u64)> =
            self.last.iter().map(|(id, (pos, _))| (*pos, *id)).collect();
        order.sort_unstable();
        let len = (order.len() * 2).max(1024);
        self.markers = Fenwick::new(len);
        let mut leaves = Vec::with_capacity(order.len());
        for (i, (_, id)) in order.iter().enumerate() {
            let entry = self.last.get_mut(id).expect("live object");
            entry.0 = i as u32;
            leaves.push([1, entry.1 as u64]);
        }
        self.markers.rebuild(leaves.into_iter());
        self.next = order.len();
    }
}
