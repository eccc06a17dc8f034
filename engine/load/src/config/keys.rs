//! The keys section, checked: how many, their prefix and lengths, and how they are drawn
//! (`KeyDist`); for a cluster, each key's hash slot, computed once.

use super::KeysConfig;
use crate::cluster::key_slot;
use crate::keyspace::KeyDist;
use crate::proto::common::key_bytes;
use crate::proto::Kind;
use std::sync::Arc;

/// The key distribution of section `k`, checked (memcached's keys: no whitespace, at most
/// 250 bytes).
pub(super) fn dist(k: &KeysConfig, is_resp: bool) -> Result<KeyDist, String> {
    if k.count == 0 || k.count > 1_000_000_000 {
        return Err(format!("keys.count must be 1..1e9, not {}", k.count));
    }
    if !is_resp && (k.prefix.contains(char::is_whitespace) || k.prefix.len() > 200) {
        return Err(
            "keys.prefix must be shorter than 200 bytes and have no whitespace for memcached"
                .into(),
        );
    }
    if k.lengths.len() > 65_536 || k.lengths.iter().any(|&n| n == 0 || (!is_resp && n > 250)) {
        return Err(
            "keys.lengths: at most 65536 lengths, each 1..250 bytes for memcached (1.. for RESP)"
                .into(),
        );
    }
    Ok(match k.dist.as_str() {
        "uniform" => KeyDist::Uniform,
        "sequential" => KeyDist::Sequential,
        "zipf" | "zipfian" => {
            if !(k.zipf_s.is_finite() && k.zipf_s > 0.0) {
                return Err(format!("keys.zipf_s must be positive, not {}", k.zipf_s));
            }
            if k.count > 50_000_000 {
                return Err("zipf over more than 50M keys is not supported by the engine".into());
            }
            KeyDist::zipf(k.count, k.zipf_s)
        }
        "hotspot" => {
            if !(0.0..=1.0).contains(&k.hot_fraction) || !(0.0..=1.0).contains(&k.hot_prob) {
                return Err("keys.hot_fraction and keys.hot_prob must be within 0..1".into());
            }
            KeyDist::Hotspot {
                hot_keys: ((k.count as f64 * k.hot_fraction).round() as u64).max(1),
                hot_prob: k.hot_prob,
            }
        }
        other => {
            return Err(format!(
                "keys.dist {other:?} is not one of uniform, zipf, sequential, hotspot"
            ))
        }
    })
}

/// The largest keyspace whose slots `Plan::key_slots` tabulates (2 MiB).
const KEY_SLOTS_MAX: u64 = 1 << 20;

/// `Plan::key_slots`: each key's slot, for a cluster's keyspace of up to `KEY_SLOTS_MAX` keys.
pub(super) fn key_slots(
    cluster: bool,
    key_count: u64,
    prefix: &[u8],
    lengths: &[u16],
) -> Arc<[u16]> {
    if !cluster || key_count > KEY_SLOTS_MAX {
        return Arc::from(Vec::new());
    }
    let mut key = Vec::new();
    (0..key_count)
        .map(|i| {
            key_bytes(&mut key, prefix, lengths, Kind::Get, i);
            key_slot(&key)
        })
        .collect()
}
