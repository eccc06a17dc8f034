//! Wire protocols: request encoders, connection handshakes and incremental, bounded reply
//! parsers, one module per protocol family (`resp`, `memcache`, `memcache_binary`); `common` holds what they
//! share (the request, keys, templates), below them, and `request` dispatches on the plan's protocol,
//! above them.
//!
//! Parsers are pure functions over a byte slice holding the unread replies of one
//! connection: they either recognise one whole reply (`Parse::Done`), say how many
//! bytes they need at least (`Parse::Need`), or reject the input (`Parse::Bad`) with a
//! message. They never panic on any input and never ask for unbounded memory: lines,
//! bulk lengths, aggregate sizes and nesting are capped (see [`Limits`]), so a
//! misbehaving server costs counted errors, not a crash or a hang. The fuzz target
//! and the randomized tests in this module hold them to that.

pub mod common;
pub mod memcache;
pub mod memcache_binary;
pub mod ops;
pub mod request;
pub mod resp;

pub use common::{key_bytes, Handshake, Request};
pub use ops::{OpPlan, Protocol, Seg};
pub use request::{encode, encode_counter, handshake, parse, value_head};

use std::ops::Range;

/// What a request was, so its reply can be judged (replies alone are ambiguous).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Get,
    Gets,
    Set,
    Delete,
    Exists,
    Incr,
    /// Multi-get of this many keys.
    MGet(u32),
    Touch,
    Template,
    /// Connection set-up commands (AUTH, SELECT, HELLO); any non-error reply is fine.
    Setup,
}

/// How a request ended, in the vocabulary of docs/contracts.md.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Hit,
    Miss,
    Ok,
    /// The server answered with an error.
    ServerError,
    /// The server answered, but not what the protocol allows for this request.
    ProtocolError,
}

/// One recognised reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// Bytes of the input this reply occupies.
    pub consumed: usize,
    pub outcome: Outcome,
    /// Where the value of a single-key read lies in the input (for verification).
    pub value: Option<Range<usize>>,
    /// Payload bytes received (values only).
    pub payload: usize,
    /// Where the server's error text lies, for `ServerError`/`ProtocolError`.
    pub message: Option<Range<usize>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parse {
    Done(Reply),
    /// Incomplete: the whole buffer must hold at least this many bytes before it is
    /// worth parsing again.
    Need(usize),
    /// Malformed or oversized: the connection's byte stream can no longer be trusted.
    Bad(String),
}

/// The head of a single-key read's hit whose value may not have arrived yet: enough to let
/// a caller that will not look at the value discard its bytes from the socket unread
/// (`engine::conn::SKIP_MIN`) and judge the rest of the reply itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValueHead {
    /// Where the value's first byte lies (the length of everything before it).
    pub at: usize,
    /// The value's length.
    pub len: usize,
    /// The bytes that must follow the value for the reply to be whole and a hit.
    pub tail: &'static [u8],
}

/// Bounds that keep a hostile or broken server from exhausting memory.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Longest header/status line without its CRLF.
    pub max_line: usize,
    /// Largest single value (bulk string / data block).
    pub max_bulk: usize,
    /// Most elements in one aggregate reply.
    pub max_elements: usize,
    /// Deepest nesting of aggregates (RESP).
    pub max_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_line: 64 * 1024,
            max_bulk: 64 * 1024 * 1024,
            max_elements: 1 << 20,
            max_depth: 8,
        }
    }
}

impl Limits {
    /// Limits for a workload whose largest value is `max_value` bytes.
    pub fn for_values(max_value: usize) -> Self {
        let mut l = Limits::default();
        l.max_bulk = l.max_bulk.max(max_value.saturating_mul(2));
        l
    }
}

/// Finds the CRLF ending the line that starts at `start` (the index of its CR);
/// `Err` when the line is too long or ends in a bare LF.
#[inline]
pub(crate) fn find_crlf(
    buf: &[u8],
    start: usize,
    max_line: usize,
) -> Result<Option<usize>, String> {
    let avail = &buf[start.min(buf.len())..];
    let window = &avail[..avail.len().min(max_line + 2)];
    if let Some(p) = window.iter().position(|&b| b == b'\n') {
        if p == 0 || window[p - 1] != b'\r' {
            return Err(format!(
                "reply line ends in LF without CR: {:?}",
                printable(&window[..p])
            ));
        }
        return Ok(Some(start + p - 1));
    }
    if avail.len() >= max_line + 2 {
        return Err(format!(
            "reply line longer than {max_line} bytes without CRLF"
        ));
    }
    Ok(None)
}

/// Parses an optionally signed decimal integer, rejecting anything else.
pub(crate) fn parse_int(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    // Accumulated on the negative side, which also holds i64::MIN.
    let mut v: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_sub((d - b'0') as i64)?;
    }
    if neg {
        Some(v)
    } else {
        v.checked_neg()
    }
}

/// A printable, bounded rendering of server-provided bytes for error messages.
pub fn printable(bytes: &[u8]) -> String {
    let cut = &bytes[..bytes.len().min(120)];
    let mut s: String = cut
        .iter()
        .map(|&b| {
            if (0x20..0x7f).contains(&b) {
                b as char
            } else {
                '.'
            }
        })
        .collect();
    if bytes.len() > 120 {
        s.push('…');
    }
    s
}

/// Every request kind, for robustness checks that try each parser under each kind.
pub const ALL_KINDS: [Kind; 10] = [
    Kind::Get,
    Kind::Gets,
    Kind::Set,
    Kind::Delete,
    Kind::Exists,
    Kind::Incr,
    Kind::MGet(3),
    Kind::Touch,
    Kind::Template,
    Kind::Setup,
];

/// The parsers' contract on any input, asserted: `Done` within the input (its value too),
/// `Need(n)` asking for more than it was given, `Bad` with a message — never a panic.
/// Shared by the randomized tests below and the cargo-fuzz target.
pub fn check_parsers(buf: &[u8], kind: Kind, lim: &Limits) {
    for r in [
        resp::parse(buf, kind, lim),
        memcache::parse_text(buf, kind, lim),
        memcache::parse_meta(buf, kind, lim),
        memcache_binary::parse(buf, kind, lim),
    ] {
        match r {
            Parse::Done(rep) => {
                assert!(rep.consumed > 0 && rep.consumed <= buf.len());
                if let Some(v) = rep.value {
                    assert!(v.start <= v.end && v.end <= rep.consumed);
                }
            }
            Parse::Need(n) => assert!(n > buf.len()),
            Parse::Bad(m) => assert!(!m.is_empty()),
        }
    }
}

#[cfg(test)]
mod fuzz_tests {
    //! Randomized robustness: parsers must not panic or over-read on any input, and a
    //! `Need(n)` must always ask for more than it was given.
    use super::*;
    use crate::keyspace::Rng;

    fn check(buf: &[u8], kind: Kind) {
        let lim = Limits {
            max_line: 64,
            max_bulk: 1000,
            max_elements: 50,
            max_depth: 4,
        };
        check_parsers(buf, kind, &lim);
    }

    #[test]
    fn integers_to_the_extremes() {
        assert_eq!(parse_int(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_int(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_int(b"+12"), Some(12));
        assert_eq!(parse_int(b"9223372036854775808"), None);
        assert_eq!(parse_int(b"-"), None);
        assert_eq!(parse_int(b"1x"), None);
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut rng = Rng::new(7);
        let alphabet = b"$*:+-_,#!=(%~>|\r\n0123456789-VALUEND HDVAENMNSTORED ";
        for _ in 0..200_000 {
            let len = rng.below(40) as usize;
            let buf: Vec<u8> = (0..len)
                .map(|_| {
                    if rng.below(4) == 0 {
                        rng.next_u64() as u8
                    } else {
                        alphabet[rng.below(alphabet.len() as u64) as usize]
                    }
                })
                .collect();
            check(&buf, ALL_KINDS[rng.below(ALL_KINDS.len() as u64) as usize]);
        }
    }

    #[test]
    fn truncations_of_valid_replies_need_more() {
        let samples: [&[u8]; 8] = [
            b"$5\r\nhello\r\n",
            b"*2\r\n$1\r\na\r\n$-1\r\n",
            b"%1\r\n+a\r\n:1\r\n",
            b"VALUE k 0 5\r\nhello\r\nEND\r\n",
            b"VALUE a 0 1\r\nx\r\nVALUE b 0 1 9\r\ny\r\nEND\r\n",
            b"VA 5 c3\r\nhello\r\n",
            b"VA 1\r\nx\r\nMN\r\n",
            b"STORED\r\n",
        ];
        for s in samples {
            for cut in 0..s.len() {
                for kind in ALL_KINDS {
                    check(&s[..cut], kind);
                }
            }
        }
    }
}
