//! What every simulated cache of `ops` is built on: the `Store` a policy implements, the id map
//! and the generator a sampled policy draws from. Below both `ops` (the op rules, LRU, FIFO, SIEVE,
//! memcached) and `redis_evict` (Redis's policies), so neither reaches into the other.

use std::hash::{BuildHasherDefault, Hasher};

/// Object ids are hashes already (or dense ids): one multiply-and-fold mixes them well enough,
/// at a fraction of SipHash's cost — the map lookups are most of a simulation's time.
#[derive(Default)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x100000001B3);
        }
    }

    fn write_u64(&mut self, id: u64) {
        let x = (id ^ self.0).wrapping_mul(0x9E3779B97F4A7C15);
        self.0 = x ^ (x >> 29);
    }
}

pub(crate) type HashMap<K, V> = std::collections::HashMap<K, V, BuildHasherDefault<IdHasher>>;

/// What each policy does with its objects; the expiry and op rules are shared (`Sim`).
pub(crate) trait Store {
    fn contains(&self, id: u64) -> bool;
    /// A get hit: the policy's notion of a use.
    fn touch(&mut self, id: u64, now_us: i64);
    /// A get: `touch` when present; whether it was. One lookup where a policy can (the map is
    /// most of a request's time).
    fn hit(&mut self, id: u64, now_us: i64) -> bool {
        let present = self.contains(id);
        if present {
            self.touch(id, now_us);
        }
        present
    }
    /// A write (fill or set) of an object not present; false when it could not be stored.
    fn insert(&mut self, id: u64, size: u32, now_us: i64) -> bool;
    fn remove(&mut self, id: u64);
    /// Before each request (Redis evicts before a command while over its limit).
    fn before(&mut self, _now_us: i64) {}
    /// A write of an object that may be present: a new object in its place. Redis's LFU keeps
    /// the old object's counter (and counts the write as a use).
    fn replace(&mut self, id: u64, size: u32, now_us: i64) -> bool {
        self.remove(id);
        self.insert(id, size, now_us)
    }
}

/// A small, fast generator (xorshift64*): the simulation is reproducible for a seed.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545F4914F6CDD1D)
    }

    pub(crate) fn below(&mut self, n: usize) -> usize {
        (((self.next() >> 11) as u128 * n as u128) >> 53) as usize
    }
}
