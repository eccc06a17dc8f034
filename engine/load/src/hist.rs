//! HDR histograms with the parameters every part of cachemark shares (1 ns … 60 s,
//! 3 significant digits, nanoseconds) and their standard text form: V2 compressed
//! (deflate) serialisation in base64, readable by any HdrHistogram implementation.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;

pub const LOWEST: u64 = 1;
pub const HIGHEST: u64 = 60_000_000_000;
pub const SIGFIG: u8 = 3;

pub type Hist = Histogram<u64>;

/// An empty histogram with the contract's parameters.
pub fn new_hist() -> Hist {
    Histogram::new_with_bounds(LOWEST, HIGHEST, SIGFIG).expect("constant bounds are valid")
}

/// Records `v` ns, clamped into the trackable range (a 0 ns reading is a clock tie).
#[inline]
pub fn record(h: &mut Hist, v: u64) {
    let _ = h.record(v.clamp(LOWEST, HIGHEST));
}

/// Records `v` ns `n` times, clamped as `record` does.
#[inline]
pub fn record_n(h: &mut Hist, v: u64, n: u64) {
    let _ = h.record_n(v.clamp(LOWEST, HIGHEST), n);
}

/// V2 deflate + base64.
pub fn encode(h: &Hist) -> String {
    let mut bytes = Vec::new();
    V2DeflateSerializer::new()
        .serialize(h, &mut bytes)
        .expect("serialising into memory cannot fail");
    STANDARD.encode(bytes)
}

/// Decodes any V2 / V2-deflate histogram in base64 (whitespace tolerated) and
/// re-expresses it with the contract's bounds so it merges with every other one.
pub fn decode(text: &str) -> Result<Hist, String> {
    let clean: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    let bytes = STANDARD
        .decode(clean.as_bytes())
        .map_err(|e| format!("histogram is not base64: {e}"))?;
    let h: Hist = Deserializer::new()
        .deserialize(&mut &bytes[..])
        .map_err(|e| format!("histogram does not decode: {e:?}"))?;
    let mut out = new_hist();
    out.add(&h)
        .map_err(|e| format!("histogram does not fit 1 ns..60 s: {e:?}"))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        let mut h = new_hist();
        for v in [1, 10, 1000, 123_456, 60_000_000_000, 99_000_000_000] {
            record(&mut h, v);
        }
        let text = encode(&h);
        assert!(text.starts_with("HISTFAAA"), "{text}");
        let back = decode(&text).unwrap();
        assert_eq!(back.len(), 6);
        assert_eq!(back.max(), h.max());
        assert!(decode("not a histogram").is_err());
        assert!(decode("HISTFAAAAAAAAAAA").is_err());
    }
}
