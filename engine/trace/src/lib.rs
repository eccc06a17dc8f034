//! cachemark's trace format, as far as the Rust side needs it (crate `cachemark-trace`): the key
//! hash that the capture proxy writes and the simulator reads, defined once here.
//!
//! The same function is `key_hash` / `hash_spans` in `src/cachemark/workload/traces/record.py`
//! (vectorised with numpy); both are held to one table of fixed vectors,
//! `tests/data/key_hash_vectors.json`, by a test in each language (docs/traces.md).

const K1: u64 = 0x87C3_7B91_1142_53D5;
const K2: u64 = 0x4CF5_AD43_2745_937F;
const SEED: u64 = 0x2545_F491_4F6C_DD1D;

/// The trace format's stable 64-bit key hash (docs/traces.md): h = seed ^ len·K1; per
/// little-endian 8-byte word w (the last one zero-padded) h = rotl(h ^ w·K1, 31)·K2; then
/// SplitMix64's finaliser. Not cryptographic; well mixed for counting and sampling.
#[inline]
pub fn key_hash(key: &[u8]) -> u64 {
    let round = |h: u64, w: u64| (h ^ w.wrapping_mul(K1)).rotate_left(31).wrapping_mul(K2);
    let mut h = (key.len() as u64).wrapping_mul(K1) ^ SEED;
    let mut words = key.chunks_exact(8);
    for w in &mut words {
        h = round(h, u64::from_le_bytes(w.try_into().expect("8 bytes")));
    }
    if !words.remainder().is_empty() {
        h = round(h, tail_word(words.remainder()));
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94D0_49BB_1331_11EB);
    h ^ (h >> 31)
}

/// The last, short word of a key, zero-padded (built byte by byte: no `memcpy` call).
#[inline]
fn tail_word(bytes: &[u8]) -> u64 {
    bytes.iter().rev().fold(0, |w, &b| (w << 8) | b as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vectors the Python test checks too: one table for both languages.
    #[test]
    fn the_key_hash_matches_the_fixed_vectors() {
        let text = include_str!("../../../tests/data/key_hash_vectors.json");
        let vectors: Vec<(String, String)> =
            serde_json::from_str(text).expect("a list of [key hex, hash hex]");
        assert!(vectors.len() >= 8);
        for (key, want) in vectors {
            let bytes: Vec<u8> = (0..key.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&key[i..i + 2], 16).expect("hex"))
                .collect();
            let want = u64::from_str_radix(&want, 16).expect("hex");
            assert_eq!(key_hash(&bytes), want, "key {key}");
        }
    }
}
