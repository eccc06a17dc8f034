//! Keys, values and randomness: what the engine sends, following docs/contracts.md.
//!
//! Key `i` is `prefix + str(i)`; the value for key `k` of size `n` is
//! `("cm:" + hex8(crc32(k)) + ":" + filler)[:n]` with filler byte `i` the base-36 digit
//! `length_index(i % 65536, 36)`: text as random as an application's, for clients that compress.
//! Everything here is allocation-free on the hot path: keys are formatted into a
//! caller's buffer and values are a 12-byte header plus a slice of one shared filler.

/// A small, fast, seedable PRNG (SplitMix64). Statistical quality is ample for
/// picking keys and ops, and it keeps runs reproducible without a dependency.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    #[inline]
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
    /// Uniform in [0, n) for n > 0 (multiply-shift; bias is below 2^-32 for our n).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

/// Picks each of a sequence of trials with probability `p`, as a uniform draw per trial
/// would (the same Bernoulli process), but by drawing the gap to the next pick — geometric —
/// so that the rng is asked once per pick instead of once per trial: the engine's choice of
/// the reads it verifies (`verify_fraction`, 1 %) cost a draw on every read.
#[derive(Clone, Debug)]
pub struct Bernoulli {
    p: f64,
    /// Trials left before the next pick.
    gap: u64,
}

impl Bernoulli {
    pub fn new(p: f64, rng: &mut Rng) -> Self {
        let mut b = Bernoulli { p, gap: 0 };
        b.gap = b.draw_gap(rng);
        b
    }

    /// Whether this trial is picked.
    #[inline]
    pub fn next(&mut self, rng: &mut Rng) -> bool {
        if self.gap > 0 {
            self.gap -= 1;
            return false;
        }
        self.gap = self.draw_gap(rng);
        true
    }

    /// Trials before the next pick: P(k) = (1-p)^k · p.
    fn draw_gap(&self, rng: &mut Rng) -> u64 {
        if self.p <= 0.0 {
            return u64::MAX;
        }
        if self.p >= 1.0 {
            return 0;
        }
        let u = 1.0 - rng.next_f64(); // in (0, 1]
        (u.ln() / (1.0 - self.p).ln()) as u64 // floor; saturates at u64::MAX
    }
}

static CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

/// CRC-32 (IEEE, as Python's `zlib.crc32`).
pub fn crc32(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c = CRC_TABLE[((c ^ b as u32) & 0xFF) as usize] ^ (c >> 8);
    }
    !c
}

/// Appends key `i` to `out`: `prefix + i`, then `_` up to its length in `lengths` when the
/// run sets key sizes (docs/contracts.md; the same rule as `workload/keys.py`). An empty table,
/// or a length the plain key already reaches, adds nothing.
/// Inlined into each encoder: as a call, its saves and restores were a fifth of its cost.
#[inline(always)]
pub fn write_key(out: &mut Vec<u8>, prefix: &[u8], lengths: &[u16], i: u64) {
    let start = out.len();
    out.extend_from_slice(prefix);
    write_u64(out, i);
    if !lengths.is_empty() {
        let want = lengths[length_index(i, lengths.len())] as usize;
        if want > out.len() - start {
            out.resize(start + want, b'_');
        }
    }
}

/// Which entry of a `points`-long length table key `i` takes: SplitMix64 of `i`, multiply-shift.
#[inline]
pub fn length_index(i: u64, points: usize) -> usize {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    ((z as u128 * points as u128) >> 64) as usize
}

/// "00" to "99": two digits per division.
const DIGIT_PAIRS: &[u8; 200] = b"\
0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// How many digits `write_u64` writes for `v`: from its bit length (× 1233 / 4096 is just
/// under log10 2), corrected by one comparison — a few instructions where `ilog10` takes
/// a chain of them, on every request's key and length.
#[inline]
pub fn decimal_len(v: u64) -> usize {
    const POW10: [u64; 20] = {
        let mut p = [1u64; 20];
        let mut i = 1;
        while i < 20 {
            p[i] = p[i - 1] * 10;
            i += 1;
        }
        p
    };
    let v = v | 1; // 0 has one digit, as 1 has
    let t = (((64 - v.leading_zeros()) * 1233) >> 12) as usize;
    t + (v >= POW10[t]) as usize
}

/// Appends the decimal form of `v` without allocating. On the hot path of every request
/// (keys, lengths): two digits per division, written straight to their place in `out`
/// (no scratch buffer: copying one back cost a `memcpy` call, or, as one wide copy, a
/// store-forwarding stall).
#[inline]
pub fn write_u64(out: &mut Vec<u8>, v: u64) {
    let n = decimal_len(v);
    out.reserve(n);
    let len = out.len();
    // SAFETY: `reserve` made room for the `n` bytes `put_decimal` writes past `len`.
    unsafe {
        put_decimal(out.as_mut_ptr().add(len), n, v);
        out.set_len(len + n);
    }
}

/// Writes the `n = decimal_len(v)` digits of `v` at `dst`, from the right.
///
/// # Safety
/// `dst` must be valid for writing `n` bytes.
#[inline]
pub unsafe fn put_decimal(dst: *mut u8, n: usize, mut v: u64) {
    let mut pos = n;
    while v >= 100 {
        let d = (v % 100) as usize * 2;
        v /= 100;
        pos -= 2;
        std::ptr::copy_nonoverlapping(DIGIT_PAIRS.as_ptr().add(d), dst.add(pos), 2);
    }
    if v >= 10 {
        std::ptr::copy_nonoverlapping(DIGIT_PAIRS.as_ptr().add(v as usize * 2), dst, 2);
    } else {
        *dst = b'0' + v as u8;
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The 12-byte value header for `key`.
pub fn value_header(key: &[u8]) -> [u8; 12] {
    let c = crc32(key);
    let mut h = *b"cm:00000000:";
    for i in 0..8 {
        h[3 + i] = HEX[((c >> (28 - 4 * i)) & 0xF) as usize];
    }
    h
}

/// The filler repeats with this period (docs/contracts.md): beyond deflate's, LZ4's and Snappy's windows.
pub const FILLER_PERIOD: usize = 64 * 1024;
const FILLER_ALPHABET: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";

/// Shared filler bytes: byte `i` is `FILLER_ALPHABET[length_index(i % FILLER_PERIOD, 36)]` for
/// every `i` (the first 12 are overwritten by the header when a value is written).
pub fn make_filler(max_len: usize) -> Vec<u8> {
    let period: Vec<u8> = (0..FILLER_PERIOD.min(max_len))
        .map(|i| FILLER_ALPHABET[length_index(i as u64, FILLER_ALPHABET.len())])
        .collect();
    period.iter().copied().cycle().take(max_len).collect()
}

/// Appends the value for `key` of length `n` to `out`.
#[inline]
pub fn write_value(out: &mut Vec<u8>, key: &[u8], n: usize, filler: &[u8]) {
    let h = value_header(key);
    let head = n.min(12);
    out.extend_from_slice(&h[..head]);
    if n > 12 {
        out.extend_from_slice(&filler[12..n]);
    }
}

/// True when `value` is exactly what a writer of `key` would have written at its length.
pub fn verify_value(key: &[u8], value: &[u8], filler: &[u8]) -> bool {
    let n = value.len();
    if n > filler.len() {
        return false;
    }
    let h = value_header(key);
    let head = n.min(12);
    value[..head] == h[..head] && (n <= 12 || value[12..] == filler[12..n])
}

/// How value sizes are drawn: a weighted list or a uniform range.
#[derive(Clone, Debug)]
pub enum ValueSizes {
    Weighted {
        sizes: Vec<usize>,
        cumulative: Vec<f64>,
    },
    Range {
        min: usize,
        max: usize,
    },
}

impl ValueSizes {
    #[inline]
    pub fn sample(&self, rng: &mut Rng) -> usize {
        match self {
            ValueSizes::Weighted { sizes, cumulative } => {
                if sizes.len() == 1 {
                    return sizes[0];
                }
                let total = *cumulative.last().unwrap();
                let x = rng.next_f64() * total;
                let i = cumulative.partition_point(|&c| c <= x);
                sizes[i.min(sizes.len() - 1)]
            }
            ValueSizes::Range { min, max } => min + rng.below((max - min + 1) as u64) as usize,
        }
    }
    pub fn max(&self) -> usize {
        match self {
            ValueSizes::Weighted { sizes, .. } => sizes.iter().copied().max().unwrap_or(0),
            ValueSizes::Range { max, .. } => *max,
        }
    }
    /// Whether the workload can produce a value of length `n` (part of read verification).
    pub fn allows(&self, n: usize) -> bool {
        match self {
            ValueSizes::Weighted { sizes, .. } => sizes.contains(&n),
            ValueSizes::Range { min, max } => (*min..=*max).contains(&n),
        }
    }
}

/// Which key index an op uses.
#[derive(Clone, Debug)]
pub enum KeyDist {
    Uniform,
    /// Cumulative Zipf probabilities over ranks; a key's rank is scrambled so the hot
    /// keys are spread over the key space (and over memcached servers).
    Zipf {
        cdf: Vec<f64>,
    },
    /// Each generator walks the keys in order from its own offset.
    Sequential,
    Hotspot {
        hot_keys: u64,
        hot_prob: f64,
    },
}

impl KeyDist {
    pub fn zipf(count: u64, s: f64) -> KeyDist {
        let mut cdf = Vec::with_capacity(count as usize);
        let mut acc = 0.0;
        for rank in 1..=count {
            acc += 1.0 / (rank as f64).powf(s);
            cdf.push(acc);
        }
        for c in cdf.iter_mut() {
            *c /= acc;
        }
        KeyDist::Zipf { cdf }
    }
}

/// A per-generator key picker (holds the sequential cursor).
#[derive(Clone, Debug)]
pub struct KeyPicker {
    pub count: u64,
    cursor: u64,
}

impl KeyPicker {
    pub fn new(count: u64, start: u64) -> Self {
        KeyPicker {
            count,
            cursor: start % count.max(1),
        }
    }
    #[inline(always)]
    pub fn pick(&mut self, dist: &KeyDist, rng: &mut Rng) -> u64 {
        match dist {
            KeyDist::Uniform => rng.below(self.count),
            KeyDist::Sequential => {
                let k = self.cursor;
                self.cursor = (self.cursor + 1) % self.count;
                k
            }
            KeyDist::Zipf { cdf } => {
                let x = rng.next_f64();
                let rank = cdf.partition_point(|&c| c <= x).min(cdf.len() - 1) as u64;
                scramble(rank, self.count)
            }
            KeyDist::Hotspot { hot_keys, hot_prob } => {
                let hot = (*hot_keys).clamp(1, self.count);
                if rng.next_f64() < *hot_prob || hot == self.count {
                    rng.below(hot)
                } else {
                    hot + rng.below(self.count - hot)
                }
            }
        }
    }
}

/// A fixed permutation of [0, n): an affine map with a multiplier coprime to n.
fn scramble(rank: u64, n: u64) -> u64 {
    if n <= 2 {
        return rank;
    }
    let mut a = 0x9E37_79B9u64 % n;
    while gcd(a, n) != 1 {
        a += 1;
    }
    ((rank as u128 * a as u128 + 7) % n as u128) as u64
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Client-side key distribution over memcached servers: rendezvous (highest random
/// weight) hashing, as pymemcache's HashClient does, so adding a server moves only
/// its share of keys. FNV-1a keeps it cheap for the handful of servers in a pool.
pub fn route(key: &[u8], servers: usize) -> usize {
    if servers <= 1 {
        return 0;
    }
    let mut base: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key {
        base = (base ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    let mut best = 0;
    let mut best_w = 0u64;
    for s in 0..servers {
        let mut h = base ^ (s as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        h = (h ^ (h >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        if s == 0 || h > best_w {
            best = s;
            best_w = h;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_by_gaps_are_a_bernoulli_process() {
        let mut rng = Rng::new(3);
        for p in [0.01, 0.2, 0.5] {
            let n = 1_000_000;
            let mut b = Bernoulli::new(p, &mut rng);
            let picks: Vec<bool> = (0..n).map(|_| b.next(&mut rng)).collect();
            let count = picks.iter().filter(|&&x| x).count() as f64;
            let sd = (n as f64 * p * (1.0 - p)).sqrt();
            assert!(
                (count - n as f64 * p).abs() < 4.0 * sd,
                "p={p}: {count} picks"
            );
            // independent trials: a pick follows a pick as often as it follows anything
            let after = picks.windows(2).filter(|w| w[0]).count() as f64;
            let both = picks.windows(2).filter(|w| w[0] && w[1]).count() as f64;
            let sd = (after * p * (1.0 - p)).sqrt();
            assert!(
                (both - after * p).abs() < 4.0 * sd,
                "p={p}: {both} of {after}"
            );
        }
        let (mut never, mut always) =
            (Bernoulli::new(0.0, &mut rng), Bernoulli::new(1.0, &mut rng));
        assert!((0..10_000).all(|_| !never.next(&mut rng) && always.next(&mut rng)));
    }

    #[test]
    fn numbers_are_written_as_to_string_writes_them() {
        let mut edges = vec![0, 9, 10, 99, 100, 101, 999, 1000, u64::MAX, u64::MAX - 1];
        edges.extend((0..20).map(|e| 10u64.pow(e)));
        edges.extend((1..20).map(|e| 10u64.pow(e) - 1));
        let mut rng = Rng::new(7);
        edges.extend((0..10_000).map(|_| rng.next_u64() >> (rng.next_u64() % 64)));
        let mut out = b"k:".to_vec();
        for v in edges {
            out.truncate(2);
            write_u64(&mut out, v);
            assert_eq!(out, format!("k:{v}").as_bytes());
            assert_eq!(decimal_len(v), v.to_string().len());
        }
    }

    #[test]
    fn padded_keys_match_the_python_workers() {
        // the same table and keys as tests/test_etc.py: both sides must name key i alike
        let table = [3u16, 12, 20, 40];
        let key = |i| {
            let mut out = Vec::new();
            write_key(&mut out, b"cm:x:", &table, i);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(key(0), format!("cm:x:0{}", "_".repeat(34)));
        assert_eq!(key(1), format!("cm:x:1{}", "_".repeat(14)));
        assert_eq!(key(7), "cm:x:7______");
        assert_eq!(key(123_456_789), "cm:x:123456789"); // longer than its length: unpadded
        assert_eq!(length_index(u64::MAX, 4096), 3661);
        let mut plain = Vec::new();
        write_key(&mut plain, b"p:", &[], 42);
        assert_eq!(plain, b"p:42");
    }

    #[test]
    fn crc32_matches_zlib() {
        assert_eq!(crc32(b"hello"), 0x3610a686);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn filler_is_the_contracts_base36_text() {
        // the same bytes as workload/values.py's filler_period() (tests/test_driver_conformance.py holds both)
        let f = make_filler(FILLER_PERIOD + 40);
        assert_eq!(&f[..40], b"vkl4fdqemo1bkrejdi2q70swomrlkqnux6jawsxt");
        assert_eq!(&f[FILLER_PERIOD..], &f[..40]);
    }

    #[test]
    fn value_follows_contract() {
        let filler = make_filler(200);
        let mut v = Vec::new();
        write_value(&mut v, b"cm:x:1", 20, &filler);
        assert_eq!(&v[..3], b"cm:");
        assert_eq!(v[11], b':');
        assert_eq!(v[12], make_filler(13)[12]);
        assert!(verify_value(b"cm:x:1", &v, &filler));
        assert!(!verify_value(b"cm:x:2", &v, &filler));
        let mut short = Vec::new();
        write_value(&mut short, b"k", 5, &filler);
        assert_eq!(
            short,
            b"cm:"
                .iter()
                .chain(&value_header(b"k")[3..5])
                .copied()
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn zipf_prefers_few_keys() {
        let d = KeyDist::zipf(1000, 0.99);
        let mut p = KeyPicker::new(1000, 0);
        let mut rng = Rng::new(1);
        let mut counts = vec![0u32; 1000];
        for _ in 0..100_000 {
            counts[p.pick(&d, &mut rng) as usize] += 1;
        }
        counts.sort_unstable_by(|a, b| b.cmp(a));
        let top10: u32 = counts[..10].iter().sum();
        assert!(top10 > 30_000, "top 10 keys got {top10}");
    }

    #[test]
    fn routing_spreads_and_is_stable() {
        let mut per = [0u32; 3];
        for i in 0..3000 {
            let k = format!("cm:t:{i}");
            per[route(k.as_bytes(), 3)] += 1;
            assert_eq!(route(k.as_bytes(), 3), route(k.as_bytes(), 3));
        }
        assert!(per.iter().all(|&c| c > 800), "{per:?}");
    }
}
