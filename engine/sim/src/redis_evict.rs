//! Redis's eviction as its `maxmemory-policy` does it, for `allkeys-lru` and `allkeys-lfu`.
//!
//! Before a command, while the memory used is over `maxmemory`, `maxmemory-samples` random keys
//! feed a pool of 16 candidates ordered by idleness and the idlest is evicted. What "idle"
//! means is the policy's:
//! - LRU: seconds since the key's last use, on Redis's clock of whole seconds;
//! - LFU: 255 − the key's use counter. A new key starts at 5; a use (a read, or a write over
//!   the key, which keeps its counter) raises it by one with probability
//!   1 / ((counter − 5) × `lfu-log-factor` + 1), so it grows with the log of the uses; it
//!   falls by one for every `lfu-decay-time` minutes the key went unused, on a clock of whole
//!   minutes (16 bits, wrapping).
//!
//! Redis's defaults: `lfu-log-factor` 10, `lfu-decay-time` 1.

use crate::store::{HashMap, Rng, Store};

const POOL: usize = 16;
const LFU_INIT: i64 = 5;

/// `allkeys-lfu`'s two settings.
#[derive(Clone, Copy)]
pub(crate) struct Lfu {
    pub(crate) log_factor: f64,
    pub(crate) decay_minutes: i64,
}

impl Default for Lfu {
    fn default() -> Self {
        Lfu {
            log_factor: 10.0,
            decay_minutes: 1,
        }
    }
}

impl Lfu {
    /// The counter after the decay due since its last use (`stamp`: minutes << 8 | counter).
    fn decayed(&self, stamp: i64, now_us: i64) -> i64 {
        let (then, counter) = (stamp >> 8, stamp & 255);
        let now = minutes(now_us);
        let elapsed = if now >= then {
            now - then
        } else {
            65_535 - then + now
        };
        let periods = if self.decay_minutes > 0 {
            elapsed / self.decay_minutes
        } else {
            0
        };
        (counter - periods).max(0)
    }

    /// A use: the decayed counter, raised by one with a probability that falls as it grows.
    fn used(&self, stamp: i64, now_us: i64, rng: &mut Rng) -> i64 {
        let mut counter = self.decayed(stamp, now_us);
        if counter < 255 {
            let base = (counter - LFU_INIT).max(0) as f64;
            let r = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
            if r < 1.0 / (base * self.log_factor + 1.0) {
                counter += 1;
            }
        }
        minutes(now_us) << 8 | counter
    }
}

fn seconds(now_us: i64) -> i64 {
    now_us.div_euclid(1_000_000)
}

fn minutes(now_us: i64) -> i64 {
    now_us.div_euclid(60_000_000) & 65_535
}

/// Redis's approximated LRU (`lfu` None) or LFU.
pub(crate) struct RedisEvict {
    capacity: u64,
    used: u64,
    samples: usize,
    lfu: Option<Lfu>,
    /// (id, LRU: last use in s; LFU: stamp), for random sampling: a sampled key's idleness is
    /// on the line the draw reads, not behind a lookup in `index`
    keys: Vec<(u64, i64)>,
    index: HashMap<u64, (u32, u32)>, // id -> (position in keys, size)
    pool: Vec<(u64, i64)>,           // (id, idleness), ascending
    rng: Rng,
}

impl RedisEvict {
    pub(crate) fn new(capacity: u64, samples: usize, lfu: Option<Lfu>, seed: u64) -> Self {
        RedisEvict {
            capacity,
            used: 0,
            samples: samples.max(1),
            lfu,
            keys: Vec::new(),
            index: HashMap::default(),
            pool: Vec::with_capacity(POOL),
            rng: Rng(seed | 1),
        }
    }

    fn fresh_stamp(&self, now_us: i64) -> i64 {
        match self.lfu {
            Some(_) => minutes(now_us) << 8 | LFU_INIT,
            None => seconds(now_us),
        }
    }

    fn used_stamp(&mut self, stamp: i64, now_us: i64) -> i64 {
        match self.lfu {
            Some(lfu) => lfu.used(stamp, now_us, &mut self.rng),
            None => seconds(now_us),
        }
    }

    fn idleness(&self, stamp: i64, now_us: i64) -> i64 {
        match self.lfu {
            Some(lfu) => 255 - lfu.decayed(stamp, now_us),
            None => seconds(now_us) - stamp,
        }
    }

    /// `evictionPoolPopulate`: each sampled key enters the pool if it is idler than one in it.
    fn populate(&mut self, now_us: i64) {
        // dictGetSomeKeys: distinct keys; all of them when there are no more than asked for
        let n = self.keys.len();
        for j in 0..self.samples.min(n) {
            let (id, stamp) = if n <= self.samples {
                self.keys[j]
            } else {
                self.keys[self.rng.below(n)]
            };
            let idle = self.idleness(stamp, now_us);
            let mut k = 0;
            while k < self.pool.len() && self.pool[k].1 < idle {
                k += 1;
            }
            if k == 0 && self.pool.len() == POOL {
                continue; // not idler than any, and the pool is full
            }
            if self.pool.len() == POOL {
                self.pool.remove(0); // drop the least idle to make room below k
                k -= 1;
            }
            self.pool.insert(k, (id, idle));
        }
    }

    fn evict_one(&mut self, now_us: i64) -> bool {
        if self.keys.is_empty() {
            return false;
        }
        loop {
            self.populate(now_us);
            while let Some((id, _)) = self.pool.pop() {
                if self.index.contains_key(&id) {
                    self.remove(id);
                    return true;
                }
            }
        }
    }

    fn add(&mut self, id: u64, size: u32, stamp: i64) {
        self.index.insert(id, (self.keys.len() as u32, size));
        self.keys.push((id, stamp));
        self.used += size as u64;
    }
}

impl Store for RedisEvict {
    fn contains(&self, id: u64) -> bool {
        self.index.contains_key(&id)
    }

    fn touch(&mut self, id: u64, now_us: i64) {
        self.hit(id, now_us);
    }

    fn hit(&mut self, id: u64, now_us: i64) -> bool {
        let (lfu, rng) = (self.lfu, &mut self.rng); // one lookup: a read hit's whole cost is the map's
        let Some(&(pos, _)) = self.index.get(&id) else {
            return false;
        };
        let stamp = &mut self.keys[pos as usize].1;
        *stamp = match lfu {
            Some(lfu) => lfu.used(*stamp, now_us, rng),
            None => seconds(now_us),
        };
        true
    }

    fn insert(&mut self, id: u64, size: u32, now_us: i64) -> bool {
        // Redis refuses a write only when it cannot get under the limit at all; an object larger
        // than the whole limit is written and evicted before the next command
        let stamp = self.fresh_stamp(now_us);
        self.add(id, size, stamp);
        true
    }

    fn replace(&mut self, id: u64, size: u32, now_us: i64) -> bool {
        // a write looks the key up (a use) and, under LFU, the new value keeps the old one's counter
        let old = match self.lfu {
            Some(_) => self
                .index
                .get(&id)
                .map(|&(pos, _)| self.keys[pos as usize].1),
            None => None, // LRU: the write's stamp is now's, as a new key's (no lookup to pay for)
        };
        let kept = old.map(|stamp| self.used_stamp(stamp, now_us));
        self.remove(id);
        let stamp = kept.unwrap_or_else(|| self.fresh_stamp(now_us));
        self.add(id, size, stamp);
        true
    }

    fn remove(&mut self, id: u64) {
        if let Some((pos, size)) = self.index.remove(&id) {
            self.keys.swap_remove(pos as usize);
            if (pos as usize) < self.keys.len() {
                let moved = self.keys[pos as usize].0;
                self.index.get_mut(&moved).unwrap().0 = pos;
            }
            self.used -= size as u64;
        }
    }

    fn before(&mut self, now_us: i64) {
        while self.used > self.capacity && self.evict_one(now_us) {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_lfu_counter_grows_with_the_log_of_the_uses_and_decays_by_the_minute() {
        let lfu = Lfu::default();
        let mut rng = Rng(7);
        let mut stamp = LFU_INIT;
        for _ in 0..1000 {
            stamp = lfu.used(stamp, 0, &mut rng);
        }
        // with log factor 10, ~1,000 uses take the counter to about 18 (Redis's own table: 1K hits → 18)
        let counter = stamp & 255;
        assert!((14..=22).contains(&counter), "{counter}");
        // three minutes unused: three lower
        assert_eq!(lfu.decayed(stamp, 3 * 60_000_000), counter - 3);
        // never below zero
        assert_eq!(lfu.decayed(stamp, 600 * 60_000_000), 0);
    }

    #[test]
    fn lfu_evicts_the_rarely_used_key_where_lru_evicts_the_least_recent() {
        // key 1 read often long ago, key 2 once just now; one of them must go
        for (lfu, survivor) in [(Some(Lfu::default()), 1u64), (None, 2u64)] {
            let mut s = RedisEvict::new(2, 5, lfu, 3);
            s.insert(1, 1, 0);
            for t in 1..200 {
                s.touch(1, t * 1_000_000);
            }
            s.insert(2, 1, 250_000_000);
            s.insert(3, 1, 251_000_000);
            s.remove(3);
            s.insert(3, 1, 252_000_000);
            s.before(253_000_000);
            assert!(s.contains(survivor), "{survivor}");
            assert!(s.contains(3));
        }
    }

    #[test]
    fn a_write_over_a_key_keeps_its_lfu_counter() {
        let mut s = RedisEvict::new(100, 5, Some(Lfu::default()), 3);
        s.insert(1, 1, 0);
        for _ in 0..100 {
            s.touch(1, 0);
        }
        let stamp = |s: &RedisEvict| s.keys[s.index[&1].0 as usize].1;
        let before = stamp(&s) & 255;
        s.replace(1, 2, 0);
        assert!(stamp(&s) & 255 >= before);
        s.remove(1);
        s.replace(1, 2, 0);
        assert_eq!(stamp(&s) & 255, LFU_INIT);
    }
}
