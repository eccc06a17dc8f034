//! Hashing of object ids: `mix` (splitmix64) draws the hash that both samples objects and
//! keys every table, and `IdMap` uses it in place of SipHash, which costs more than the rest
//! of a request's bookkeeping. Kept apart because every stack and sample shares it.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// splitmix64: a fast, well-mixed hash of an object id (sampling must not follow id order).
pub fn mix(id: u64) -> u64 {
    let mut z = id.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Object ids are hashed with `mix` (SipHash, the default, costs more than the rest of a
/// request's bookkeeping on a warm cache).
#[derive(Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = mix(self.0 ^ b as u64);
        }
    }
    fn write_u64(&mut self, id: u64) {
        self.0 = mix(id);
    }
}

pub type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;
