//! Hashing of object ids: `mix` (splitmix64) draws the hash that both samples objects and
//! keys every table (the stack's `IdTable`, the near stack's slots). Kept apart because
//! every stack and sample shares it.

/// splitmix64: a fast, well-mixed hash of an object id (sampling must not follow id order).
pub fn mix(id: u64) -> u64 {
    let mut z = id.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
