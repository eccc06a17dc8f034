//! What every protocol's encoder shares, below them all: the request to encode, key
//! formatting, template rendering and the shape of a connection's handshake. The dispatch
//! on a plan's protocol is [`super::request`]'s, above the protocols.

use super::{Kind, OpPlan, Seg};
use crate::keyspace::{write_key, write_u64, write_value};

/// One request to encode: `op` on the keys `prefix + i` for each `i` in `keys` (more
/// than one for a multi-get), with a value of `size` bytes where the op writes one.
pub struct Request<'a> {
    pub op: &'a OpPlan,
    pub prefix: &'a [u8],
    /// Key lengths (`keyspace::write_key`); empty: plain keys.
    pub lengths: &'a [u16],
    pub keys: &'a [u64],
    pub size: usize,
    /// Expiry in seconds for `set` and `touch` (0: none).
    pub ttl: u64,
    /// The shared filler values are cut from (docs/contracts.md).
    pub filler: &'a [u8],
}

/// The set every key gets during prefill.
pub static PREFILL_SET: OpPlan = OpPlan {
    name: String::new(),
    kind: Kind::Set,
    template: Vec::new(),
    writes_value: true,
    write: true,
};

/// Formats key `i` into `out`: `prefix + i` (padded to its length from `lengths`, if any),
/// or `prefix + "n:" + i` for the counters `incr` works on.
#[inline(always)]
pub fn key_bytes(out: &mut Vec<u8>, prefix: &[u8], lengths: &[u16], kind: Kind, i: u64) {
    out.clear();
    if kind == Kind::Incr {
        out.extend_from_slice(prefix);
        out.extend_from_slice(b"n:");
        write_u64(out, i);
    } else {
        write_key(out, prefix, lengths, i);
    }
}

/// The set-up a new connection sends before any load: the request bytes (all steps,
/// pipelined) and, per step, what it is called in an error message. Each step gets one
/// reply of kind [`Kind::Setup`]; the last one proves the server speaks the protocol.
pub struct Handshake {
    pub request: Vec<u8>,
    pub steps: Vec<&'static str>,
}

/// Renders one template argument made of several segments (`h:{key}`, `{ttl}` …).
pub fn render(out: &mut Vec<u8>, segs: &[Seg], key: &[u8], size: usize, ttl: u64, filler: &[u8]) {
    for s in segs {
        match s {
            Seg::Lit(l) => out.extend_from_slice(l),
            Seg::Key => out.extend_from_slice(key),
            Seg::Value => write_value(out, key, size, filler),
            Seg::Ttl => write_u64(out, ttl),
            Seg::Len => write_u64(out, size as u64),
        }
    }
}
