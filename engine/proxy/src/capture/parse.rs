//! What the RESP and memcached parsers share: the parse outcome, the request a parser
//! recognised, what its reply will look like, and line and number helpers.
use super::format::Rec;
use crate::timer::realtime_ns;

/// A request or reply larger than this is not buffered: the connection stops being parsed.
pub const MAX_MESSAGE: usize = 512 * 1024 * 1024;

/// Parse failure that makes a stream unusable (as opposed to "need more bytes").
pub struct Bad;

/// `Ok(None)`: not complete yet, wait for more bytes.
pub type Parsed<T> = Result<Option<T>, Bad>;

/// A reply parser's outcome: `Some(n)` when the reply took `n` bytes, `None` when the reply
/// belongs to a later request (a quiet meta request said nothing).
pub type Reply = Parsed<Option<usize>>;

/// What the reply to a request looks like, and which of its records it sizes.
#[derive(Debug)]
pub enum Expect {
    /// One RESP reply; if `sized`, its bulk length (or each array element's) sizes the records.
    Resp { sized: bool },
    /// memcached `VALUE` lines until `END`, sizing the records by key.
    McValues,
    /// One line (storage, delete, incr, touch, version, errors...).
    McLine,
    /// Lines until `END` (stats).
    McStats,
    /// A meta reply; `quiet`: the codes `q` suppresses may never come.
    Meta { quiet: bool, cmd: [u8; 2] },
}

/// One complete request at the head of a request stream, as a parser recognised it.
pub struct Request {
    /// Bytes of the stream it took.
    pub used: usize,
    /// Reads, waiting for their reply to size them.
    pub reads: Vec<Rec>,
    /// Writes (and exists, deletes, incrs): ready at once.
    pub writes: Vec<Rec>,
    /// Its reply, if one will come.
    pub expect: Option<Expect>,
    /// False for a blank memcached line: nothing sent, nothing answered, nothing counted.
    pub counted: bool,
    /// Replies stop being one per request after it (SUBSCRIBE, MONITOR).
    pub unmatches: bool,
}

/// A record of client `client` at `t_us`; the value size saturates at `u32::MAX`.
pub fn rec(t_us: i64, client: u32, op: u8, key: &[u8], value_size: i64, ttl_s: u32) -> Rec {
    Rec {
        t_us,
        op,
        key: key.to_vec(),
        value_size: value_size.clamp(0, u32::MAX as i64) as u32,
        ttl_s,
        client,
    }
}

/// Now, in unix seconds (to turn an absolute expiry into a TTL).
pub fn now_unix_s() -> i64 {
    (realtime_ns() / 1_000_000_000) as i64
}

/// The line starting at `pos`: (end of its content, start of the next line), or `None`
/// until its newline has arrived; accepts a bare "\n".
pub fn find_line(buf: &[u8], pos: usize) -> Option<(usize, usize)> {
    let nl = buf[pos..].iter().position(|&b| b == b'\n')? + pos;
    let end = if nl > pos && buf[nl - 1] == b'\r' {
        nl - 1
    } else {
        nl
    };
    Some((end, nl + 1))
}

/// A decimal integer (surrounding whitespace allowed).
pub fn int(text: &[u8]) -> Option<i64> {
    std::str::from_utf8(text).ok()?.trim().parse().ok()
}

/// Command names are case-insensitive.
pub fn upper(text: &[u8]) -> Vec<u8> {
    text.to_ascii_uppercase()
}

/// A memcached line's space- or tab-separated tokens.
pub fn tokens(line: &[u8]) -> Vec<&[u8]> {
    line.split(|b| *b == b' ' || *b == b'\t')
        .filter(|t| !t.is_empty())
        .collect()
}
