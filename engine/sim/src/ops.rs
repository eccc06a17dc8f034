//! Caches simulated request by request under the application's own ops, at byte capacities:
//! a get that hits counts, a get that misses fills the cache (cache-aside), a set writes, a
//! delete removes, and a write with a TTL expires on the trace's clock. Unlike stack distances
//! (one pass for every size, but no deletes or expiry), each capacity is its own cache, so the
//! answer is exact for every policy at the sizes asked for.
//!
//! Policies: `lru`, `fifo`, `sieve` (what libCacheSim calls them: evict until the new object
//! fits, an object larger than the cache is not stored); `redis` and `redis-lfu` (Redis's
//! approximated LRU and LFU, `redis_evict`); `memcached` (slab classes: an item goes to the
//! smallest chunk that holds it, pages of 1 MiB are handed to a class on demand until the memory
//! limit — every class gets its first page regardless —, and each class evicts its own least
//! recently used item).

use crate::redis_evict::{Lfu, RedisEvict};
use crate::store::{HashMap, Store};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

pub const GET: u8 = 0;
pub const SET: u8 = 1;
pub const DELETE: u8 = 2;
pub const FETCH: u8 = 8;

const NONE: u32 = u32::MAX;
pub const PAGE: u64 = 1 << 20;

/// One request: `ttl_us` 0 means none; `size` is what the object is charged (bytes, or 1).
#[derive(Clone, Copy)]
pub struct Req {
    pub t_us: i64,
    pub op: u8,
    pub id: u64,
    pub size: u32,
    pub ttl_us: i64,
}

/// A doubly linked list over an arena of nodes: head = newest, tail = oldest.
#[derive(Default)]
struct List {
    head: u32,
    tail: u32,
    len: usize,
}

#[derive(Clone)]
struct Node {
    id: u64,
    size: u32,
    class: u16,
    visited: bool,
    newer: u32,
    older: u32,
}

#[derive(Default)]
struct Arena {
    nodes: Vec<Node>,
    free: Vec<u32>,
}

impl Arena {
    fn alloc(&mut self, id: u64, size: u32, class: u16) -> u32 {
        let node = Node {
            id,
            size,
            class,
            visited: false,
            newer: NONE,
            older: NONE,
        };
        match self.free.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        }
    }

    fn push_head(&mut self, list: &mut List, i: u32) {
        let n = &mut self.nodes[i as usize];
        n.newer = NONE;
        n.older = list.head;
        if list.head != NONE {
            self.nodes[list.head as usize].newer = i;
        } else {
            list.tail = i;
        }
        list.head = i;
        list.len += 1;
    }

    fn unlink(&mut self, list: &mut List, i: u32) {
        let (newer, older) = {
            let n = &self.nodes[i as usize];
            (n.newer, n.older)
        };
        if newer != NONE {
            self.nodes[newer as usize].older = older;
        } else {
            list.head = older;
        }
        if older != NONE {
            self.nodes[older as usize].newer = newer;
        } else {
            list.tail = newer;
        }
        list.len -= 1;
    }
}

impl List {
    fn new() -> Self {
        List {
            head: NONE,
            tail: NONE,
            len: 0,
        }
    }
}

/// LRU, FIFO and SIEVE in one list: they differ only in what a hit does and whom they evict.
struct Listed {
    kind: u8, // 0 lru, 1 fifo, 2 sieve
    capacity: u64,
    used: u64,
    arena: Arena,
    list: List,
    index: HashMap<u64, u32>,
    hand: u32,
}

impl Listed {
    fn new(kind: u8, capacity: u64) -> Self {
        Listed {
            kind,
            capacity,
            used: 0,
            arena: Arena::default(),
            list: List::new(),
            index: HashMap::default(),
            hand: NONE,
        }
    }

    fn drop_node(&mut self, i: u32) {
        if self.hand == i {
            self.hand = self.arena.nodes[i as usize].newer;
        }
        self.arena.unlink(&mut self.list, i);
        let n = &self.arena.nodes[i as usize];
        self.used -= n.size as u64;
        self.index.remove(&n.id);
        self.arena.free.push(i);
    }

    fn evict(&mut self) {
        let victim = if self.kind == 2 {
            let mut i = if self.hand != NONE {
                self.hand
            } else {
                self.list.tail
            };
            while self.arena.nodes[i as usize].visited {
                self.arena.nodes[i as usize].visited = false;
                let newer = self.arena.nodes[i as usize].newer;
                i = if newer != NONE { newer } else { self.list.tail };
            }
            self.hand = self.arena.nodes[i as usize].newer;
            i
        } else {
            self.list.tail
        };
        self.drop_node(victim);
    }
}

impl Store for Listed {
    fn contains(&self, id: u64) -> bool {
        self.index.contains_key(&id)
    }

    fn touch(&mut self, id: u64, now_us: i64) {
        self.hit(id, now_us);
    }

    fn hit(&mut self, id: u64, _now_us: i64) -> bool {
        let Some(&i) = self.index.get(&id) else {
            return false;
        };
        match self.kind {
            0 => {
                self.arena.unlink(&mut self.list, i);
                self.arena.push_head(&mut self.list, i);
            }
            2 => self.arena.nodes[i as usize].visited = true,
            _ => {}
        }
        true
    }

    fn insert(&mut self, id: u64, size: u32, _now_us: i64) -> bool {
        if size as u64 > self.capacity {
            return false;
        }
        while self.used + size as u64 > self.capacity {
            self.evict();
        }
        let i = self.arena.alloc(id, size, 0);
        self.arena.push_head(&mut self.list, i);
        self.index.insert(id, i);
        self.used += size as u64;
        true
    }

    fn remove(&mut self, id: u64) {
        if let Some(&i) = self.index.get(&id) {
            self.drop_node(i);
        }
    }
}

/// memcached's slab allocator with one LRU per class.
struct Slabs {
    chunks: Vec<u64>, // chunk size of each class, ascending
    per_page: Vec<u64>,
    pages: Vec<u64>,
    free: Vec<u64>, // free chunks per class
    lists: Vec<List>,
    page_limit: u64,
    pages_total: u64,
    arena: Arena,
    index: HashMap<u64, u32>,
}

impl Slabs {
    fn new(chunks: Vec<u64>, limit_bytes: u64) -> Self {
        let n = chunks.len();
        Slabs {
            per_page: chunks.iter().map(|&c| (PAGE / c).max(1)).collect(),
            chunks,
            pages: vec![0; n],
            free: vec![0; n],
            lists: (0..n).map(|_| List::new()).collect(),
            page_limit: limit_bytes / PAGE,
            pages_total: 0,
            arena: Arena::default(),
            index: HashMap::default(),
        }
    }

    fn class_of(&self, size: u32) -> Option<usize> {
        let i = self.chunks.partition_point(|&c| c < size as u64);
        (i < self.chunks.len()).then_some(i)
    }
}

impl Store for Slabs {
    fn contains(&self, id: u64) -> bool {
        self.index.contains_key(&id)
    }

    fn touch(&mut self, id: u64, now_us: i64) {
        self.hit(id, now_us);
    }

    fn hit(&mut self, id: u64, _now_us: i64) -> bool {
        let Some(&i) = self.index.get(&id) else {
            return false;
        };
        let c = self.arena.nodes[i as usize].class as usize;
        let list = &mut self.lists[c];
        self.arena.unlink(list, i);
        self.arena.push_head(list, i);
        true
    }

    fn insert(&mut self, id: u64, size: u32, _now_us: i64) -> bool {
        let Some(c) = self.class_of(size) else {
            return false;
        };
        if self.free[c] == 0 {
            if self.pages_total < self.page_limit || self.pages[c] == 0 {
                self.pages[c] += 1;
                self.pages_total += 1;
                self.free[c] += self.per_page[c];
            } else if self.lists[c].len > 0 {
                let victim = self.lists[c].tail;
                let vid = self.arena.nodes[victim as usize].id;
                self.remove(vid);
            } else {
                return false;
            }
        }
        self.free[c] -= 1;
        let i = self.arena.alloc(id, size, c as u16);
        self.arena.push_head(&mut self.lists[c], i);
        self.index.insert(id, i);
        true
    }

    fn remove(&mut self, id: u64) {
        if let Some(i) = self.index.remove(&id) {
            let c = self.arena.nodes[i as usize].class as usize;
            self.arena.unlink(&mut self.lists[c], i);
            self.arena.free.push(i);
            self.free[c] += 1;
        }
    }
}

/// What the simulation of one cache counted (after the warm-up).
#[derive(Default, Clone, Copy)]
pub struct Counts {
    pub gets: u64,
    pub hits: u64,
    pub get_bytes: u64,
    pub hit_bytes: u64,
    pub sets: u64,
    pub deletes: u64,
    pub expired: u64,
}

/// One cache under the op rules. Eager expiry (the default): an object is gone at its expiry
/// time. Lazy (`set_lazy`): an expired object keeps its place until a request touches it or it
/// is evicted — what a cache without an expiry sweep does (cachemark's `memory://`).
pub struct Sim {
    store: Box<dyn Store + Send + Sync>,
    expiry: BinaryHeap<Reverse<(i64, u64, u64)>>, // (expires at, id, write number)
    written: HashMap<u64, u64>,                   // id -> its last TTL'd write number
    writes: u64,
    lazy: bool,
    expires_at: HashMap<u64, i64>, // lazy: id -> when its TTL runs out
    pub counts: Counts,
}

/// The policies `Sim::new` knows.
pub const POLICIES: [&str; 6] = ["lru", "fifo", "sieve", "redis", "redis-lfu", "memcached"];

impl Sim {
    /// `capacity` in the unit of the requests' sizes; `samples`: Redis's `maxmemory-samples`;
    /// `chunks`: memcached's chunk size per slab class (then `capacity` is its memory limit).
    pub fn new(
        policy: &str,
        capacity: u64,
        samples: usize,
        chunks: &[u64],
        seed: u64,
    ) -> Option<Self> {
        let store: Box<dyn Store + Send + Sync> = match policy {
            "lru" => Box::new(Listed::new(0, capacity)),
            "fifo" => Box::new(Listed::new(1, capacity)),
            "sieve" => Box::new(Listed::new(2, capacity)),
            "redis" => Box::new(RedisEvict::new(capacity, samples, None, seed)),
            "redis-lfu" => Box::new(RedisEvict::new(
                capacity,
                samples,
                Some(Lfu::default()),
                seed,
            )),
            "memcached" if !chunks.is_empty() => Box::new(Slabs::new(chunks.to_vec(), capacity)),
            _ => return None,
        };
        Some(Sim {
            store,
            expiry: BinaryHeap::new(),
            written: HashMap::default(),
            writes: 0,
            lazy: false,
            expires_at: HashMap::default(),
            counts: Counts::default(),
        })
    }

    pub fn set_lazy(&mut self, lazy: bool) {
        self.lazy = lazy;
    }

    /// Lazy expiry: an expired object found by a request is removed then.
    fn drop_if_expired(&mut self, id: u64, now_us: i64) {
        if self.expires_at.is_empty() {
            return; // no TTL held: no lookup to pay for
        }
        if let Some(&at) = self.expires_at.get(&id) {
            if at <= now_us {
                self.expires_at.remove(&id);
                if self.store.contains(id) {
                    self.store.remove(id);
                    self.counts.expired += 1;
                }
            }
        }
    }

    fn expire(&mut self, now_us: i64) {
        while let Some(&Reverse((at, id, n))) = self.expiry.peek() {
            if at > now_us {
                break;
            }
            self.expiry.pop();
            if self.written.get(&id) == Some(&n) {
                self.written.remove(&id);
                if self.store.contains(id) {
                    self.store.remove(id);
                    self.counts.expired += 1;
                }
            }
        }
    }

    /// A fill or a set; `absent`: the object is known not to be stored (a get that missed),
    /// so the store's `insert` does what its `replace` would, without the lookup to remove it.
    fn write(&mut self, r: &Req, absent: bool) {
        self.forget_ttl(r.id);
        let stored = match absent {
            true => self.store.insert(r.id, r.size, r.t_us),
            false => self.store.replace(r.id, r.size, r.t_us),
        };
        if self.lazy {
            if stored && r.ttl_us > 0 {
                self.expires_at
                    .insert(r.id, r.t_us.saturating_add(r.ttl_us));
            }
            return;
        }
        if stored && r.ttl_us > 0 {
            self.writes += 1;
            self.written.insert(r.id, self.writes);
            self.expiry.push(Reverse((
                r.t_us.saturating_add(r.ttl_us),
                r.id,
                self.writes,
            )));
        }
    }

    /// The object's TTL, if it had one, no longer applies (a write or a delete); the maps are
    /// only looked in when some object has one.
    fn forget_ttl(&mut self, id: u64) {
        if !self.written.is_empty() {
            self.written.remove(&id);
        }
        if !self.expires_at.is_empty() {
            self.expires_at.remove(&id);
        }
    }

    /// One request; `count`: false while warming up.
    pub fn access(&mut self, r: &Req, count: bool) {
        if self.lazy {
            self.drop_if_expired(r.id, r.t_us);
        } else {
            self.expire(r.t_us);
        }
        self.store.before(r.t_us);
        match r.op {
            GET | FETCH => {
                let hit = self.store.hit(r.id, r.t_us);
                if !hit {
                    self.write(r, true);
                }
                if count {
                    self.counts.gets += 1;
                    self.counts.get_bytes += r.size as u64;
                    if hit {
                        self.counts.hits += 1;
                        self.counts.hit_bytes += r.size as u64;
                    }
                }
            }
            SET => {
                self.write(r, false);
                self.counts.sets += count as u64;
            }
            DELETE => {
                self.store.remove(r.id);
                if !self.written.is_empty() {
                    self.written.remove(&r.id);
                }
                self.counts.deletes += count as u64;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(t: i64, id: u64, size: u32) -> Req {
        Req {
            t_us: t,
            op: GET,
            id,
            size,
            ttl_us: 0,
        }
    }

    fn hits(sim: &mut Sim, reqs: &[Req]) -> Vec<bool> {
        reqs.iter()
            .map(|r| {
                let before = sim.counts.hits;
                sim.access(r, true);
                sim.counts.hits > before
            })
            .collect()
    }

    #[test]
    fn lru_by_bytes_evicts_until_the_new_object_fits() {
        let mut s = Sim::new("lru", 100, 5, &[], 1).unwrap();
        let got = hits(
            &mut s,
            &[
                get(0, 1, 60),
                get(1, 2, 30),
                get(2, 1, 60),
                get(3, 3, 20),
                get(4, 1, 60),
                get(5, 2, 30),
            ],
        );
        // 3 (20 B) pushes out 2, the least recent; 1 stays
        assert_eq!(got, vec![false, false, true, false, true, false]);
    }

    #[test]
    fn a_delete_removes_and_a_ttl_expires_on_the_trace_clock() {
        let mut s = Sim::new("lru", 1000, 5, &[], 1).unwrap();
        let mut set = get(0, 7, 10);
        set.op = SET;
        set.ttl_us = 5_000_000;
        let del = Req {
            op: DELETE,
            ..get(3, 8, 1)
        };
        let got = hits(
            &mut s,
            &[
                set,
                get(1, 7, 10),
                get(2, 8, 1),
                del,
                get(4, 8, 1),
                get(6_000_000, 7, 10),
            ],
        );
        assert_eq!(got, vec![false, true, false, false, false, false]);
        assert_eq!((s.counts.gets, s.counts.hits, s.counts.expired), (4, 1, 1));
    }

    #[test]
    fn lazy_expiry_keeps_an_expired_object_in_place_until_touched() {
        let mut set = get(1, 1, 10);
        set.op = SET;
        set.ttl_us = 5;
        // room for two; 1 (expired at 6 µs) is more recent than 2
        let reqs = [get(0, 2, 10), set, get(10, 3, 10), get(11, 2, 10)];
        for (lazy, hit_last) in [(false, true), (true, false)] {
            // eagerly 1 is gone, so 3 fits beside 2; lazily 1 holds its place and 3 evicts 2
            let mut s = Sim::new("lru", 20, 5, &[], 1).unwrap();
            s.set_lazy(lazy);
            assert_eq!(
                *hits(&mut s, &reqs).last().unwrap(),
                hit_last,
                "lazy {lazy}"
            );
        }
    }

    #[test]
    fn memcached_gives_every_class_one_page_and_then_evicts_within_a_class() {
        // one page allowed; two classes: the second still gets its first page
        let mut s = Sim::new("memcached", PAGE, 5, &[PAGE / 2, PAGE], 1).unwrap();
        let got = hits(
            &mut s,
            &[
                get(0, 1, 100),
                get(1, 2, 100),
                get(2, 3, 600_000),
                get(3, 1, 100),
                get(4, 2, 100),
                get(5, 4, 100),
            ],
        );
        assert_eq!(got, vec![false, false, false, true, true, false]);
        // class 0 holds 2 chunks: 4 evicted 1 (the least recent of 1, 2)
        assert!(!s.store.contains(1) && s.store.contains(2) && s.store.contains(3));
    }

    #[test]
    fn redis_evicts_before_a_command_while_over_the_limit() {
        let mut s = Sim::new("redis", 100, 5, &[], 3).unwrap();
        for (t, id) in [(0, 1), (1_000_000, 2), (2_000_000, 3)] {
            s.access(&get(t, id, 50), true);
        }
        // over by 50 after the third write; the next command evicts the idlest (1)
        s.access(&get(3_000_000, 2, 50), true);
        assert!(!s.store.contains(1) && s.store.contains(2) && s.store.contains(3));
    }
}
