//! Eviction policies other than LRU, simulated at one cache size each (by object count):
//! FIFO, and SIEVE (Zhang et al., NSDI '24: FIFO order, a visited bit, and a hand that
//! sweeps from the oldest entry, sparing visited ones once). LRU needs no simulation: its
//! whole curve comes from one pass of stack distances (see `lru`).

use crate::store::HashMap;
use std::collections::VecDeque;

/// A set of ids with the cheap id hasher (ids are hashes already: SipHash is most of a request).
type HashSet<T> =
    std::collections::HashSet<T, std::hash::BuildHasherDefault<crate::store::IdHasher>>;

pub trait Policy: Send + Sync {
    /// True on a hit; a miss inserts the object.
    fn access(&mut self, id: u64) -> bool;
}

pub struct Fifo {
    capacity: usize,
    queue: VecDeque<u64>,
    present: HashSet<u64>,
}

impl Fifo {
    pub fn new(capacity: usize) -> Self {
        Fifo {
            capacity: capacity.max(1),
            queue: VecDeque::new(),
            present: HashSet::default(),
        }
    }
}

impl Policy for Fifo {
    fn access(&mut self, id: u64) -> bool {
        if self.present.contains(&id) {
            return true;
        }
        if self.queue.len() == self.capacity {
            if let Some(old) = self.queue.pop_front() {
                self.present.remove(&old);
            }
        }
        self.queue.push_back(id);
        self.present.insert(id);
        false
    }
}

const NONE: usize = usize::MAX;

struct Node {
    id: u64,
    visited: bool,
    newer: usize, // towards the head (newest)
    older: usize, // towards the tail (oldest)
}

pub struct Sieve {
    capacity: usize,
    nodes: Vec<Node>,
    free: Vec<usize>,
    index: HashMap<u64, usize>,
    head: usize, // newest
    tail: usize, // oldest
    hand: usize,
}

impl Sieve {
    pub fn new(capacity: usize) -> Self {
        Sieve {
            capacity: capacity.max(1),
            nodes: Vec::new(),
            free: Vec::new(),
            index: HashMap::default(),
            head: NONE,
            tail: NONE,
            hand: NONE,
        }
    }

    fn unlink(&mut self, i: usize) {
        let (newer, older) = (self.nodes[i].newer, self.nodes[i].older);
        if newer != NONE {
            self.nodes[newer].older = older;
        } else {
            self.head = older;
        }
        if older != NONE {
            self.nodes[older].newer = newer;
        } else {
            self.tail = newer;
        }
    }

    fn evict(&mut self) {
        let mut i = if self.hand != NONE {
            self.hand
        } else {
            self.tail
        };
        while self.nodes[i].visited {
            self.nodes[i].visited = false;
            i = if self.nodes[i].newer != NONE {
                self.nodes[i].newer
            } else {
                self.tail
            };
        }
        self.hand = self.nodes[i].newer; // NONE: the next sweep starts at the tail again
        self.unlink(i);
        self.index.remove(&self.nodes[i].id);
        self.free.push(i);
    }
}

impl Policy for Sieve {
    fn access(&mut self, id: u64) -> bool {
        if let Some(&i) = self.index.get(&id) {
            self.nodes[i].visited = true;
            return true;
        }
        if self.index.len() == self.capacity {
            self.evict();
        }
        let node = Node {
            id,
            visited: false,
            newer: NONE,
            older: self.head,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.nodes[i] = node;
                i
            }
            None => {
                self.nodes.push(node);
                self.nodes.len() - 1
            }
        };
        if self.head != NONE {
            self.nodes[self.head].newer = i;
        } else {
            self.tail = i;
        }
        self.head = i;
        self.index.insert(id, i);
        false
    }
}

pub fn make(policy: &str, capacity: usize) -> Option<Box<dyn Policy>> {
    match policy {
        "fifo" => Some(Box::new(Fifo::new(capacity))),
        "sieve" => Some(Box::new(Sieve::new(capacity))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_evicts_in_insertion_order_even_when_hit() {
        let mut f = Fifo::new(2);
        assert!(!f.access(1));
        assert!(!f.access(2));
        assert!(f.access(1)); // a hit does not refresh
        assert!(!f.access(3)); // evicts 1, the oldest insert
        assert!(!f.access(1));
        assert!(!f.access(2)); // 2 was evicted by 1
    }

    #[test]
    fn sieve_spares_a_visited_entry_once() {
        let mut s = Sieve::new(3);
        for id in [1, 2, 3] {
            assert!(!s.access(id));
        }
        assert!(s.access(1)); // 1 visited
        assert!(!s.access(4)); // hand at tail (1): visited -> cleared, moves to 2: evicted
        assert!(s.access(1));
        assert!(s.access(3));
        assert!(!s.access(2));
        // 2 inserted: the hand was at 3 (newer than 2); 3 visited -> cleared, 4 not visited: evicted
        assert!(!s.access(4));
    }

    #[test]
    fn a_cache_as_large_as_the_key_space_misses_only_first_accesses() {
        for name in ["fifo", "sieve"] {
            let mut p = make(name, 100).unwrap();
            let mut misses = 0;
            for k in 0..10_000u64 {
                if !p.access(k % 100) {
                    misses += 1;
                }
            }
            assert_eq!(misses, 100, "{name}");
        }
    }
}
