//! RESP2/RESP3 (Redis, Valkey): command encoding and reply parsing.
//!
//! Commands are always sent as arrays of bulk strings (works for every server and
//! both protocol versions). The parser understands every RESP3 type so a server that
//! was switched to RESP3 with HELLO 3 is read correctly; out-of-band push messages and
//! attributes are skipped.

use super::common::{key_bytes, render, Handshake, Request};
use super::Seg;
use super::{find_crlf, parse_int, printable, Kind, Limits, Outcome, Parse, Reply, ValueHead};
use crate::keyspace::{decimal_len, put_decimal, write_u64};
use crate::outbuf::OutBuf;
use std::ops::Range;

#[inline]
pub fn array_header(out: &mut Vec<u8>, n: usize) {
    out.push(b'*');
    write_u64(out, n as u64);
    out.extend_from_slice(b"\r\n");
}

#[inline]
pub fn bulk(out: &mut Vec<u8>, data: &[u8]) {
    out.push(b'$');
    write_u64(out, data.len() as u64);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// A number as a bulk string (a TTL, a counter's value), digits written in place.
#[inline]
pub fn bulk_u64(out: &mut Vec<u8>, v: u64) {
    out.push(b'$');
    write_u64(out, decimal_len(v) as u64);
    out.extend_from_slice(b"\r\n");
    write_u64(out, v);
    out.extend_from_slice(b"\r\n");
}

/// Encodes a whole command from parts.
pub fn command(out: &mut Vec<u8>, parts: &[&[u8]]) {
    array_header(out, parts.len());
    for p in parts {
        bulk(out, p);
    }
}

/// Encodes one request (RESP2 and RESP3 alike); returns the payload bytes it carries.
/// Inlined into its caller for the commonest request, a GET of a plain key.
#[inline]
pub fn encode(out: &mut OutBuf, req: &Request, kb: &mut Vec<u8>, tmp: &mut Vec<u8>) -> usize {
    if matches!(req.op.kind, Kind::Get | Kind::Gets) && req.lengths.is_empty() {
        return get(out, req.prefix, req.keys[0]);
    }
    encode_any(out, req, kb, tmp)
}

/// `encode` for every request.
fn encode_any(out: &mut OutBuf, req: &Request, kb: &mut Vec<u8>, tmp: &mut Vec<u8>) -> usize {
    let (f, ttl, size) = (req.filler, req.ttl, req.size);
    key_bytes(kb, req.prefix, req.lengths, req.op.kind, req.keys[0]);
    let klen = kb.len();
    match req.op.kind {
        Kind::Get | Kind::Gets => {
            out.extend_from_slice(b"*2\r\n$3\r\nGET\r\n");
            bulk(out, kb);
            klen
        }
        Kind::Set => {
            if ttl > 0 {
                out.extend_from_slice(b"*5\r\n$3\r\nSET\r\n");
            } else {
                out.extend_from_slice(b"*3\r\n$3\r\nSET\r\n");
            }
            bulk(out, kb);
            bulk_value(out, kb, size, f);
            if ttl > 0 {
                out.extend_from_slice(b"$2\r\nEX\r\n");
                bulk_u64(out, ttl);
            }
            klen + size
        }
        Kind::Delete => {
            out.extend_from_slice(b"*2\r\n$3\r\nDEL\r\n");
            bulk(out, kb);
            klen
        }
        Kind::Exists => {
            out.extend_from_slice(b"*2\r\n$6\r\nEXISTS\r\n");
            bulk(out, kb);
            klen
        }
        Kind::Incr => {
            out.extend_from_slice(b"*2\r\n$4\r\nINCR\r\n");
            bulk(out, kb);
            klen
        }
        Kind::Touch => {
            if ttl > 0 {
                out.extend_from_slice(b"*3\r\n$6\r\nEXPIRE\r\n");
                bulk(out, kb);
                bulk_u64(out, ttl);
            } else {
                out.extend_from_slice(b"*2\r\n$7\r\nPERSIST\r\n");
                bulk(out, kb);
            }
            klen
        }
        Kind::MGet(_) => {
            array_header(out, req.keys.len() + 1);
            bulk(out, b"MGET");
            let mut n = 0;
            for &k in req.keys {
                key_bytes(kb, req.prefix, req.lengths, Kind::Get, k);
                bulk(out, kb);
                n += kb.len();
            }
            n
        }
        Kind::Template | Kind::Setup => {
            array_header(out, req.op.template.len());
            let mut n = 0;
            for arg in &req.op.template {
                match arg.as_slice() {
                    [Seg::Lit(l)] => bulk(out, l),
                    [Seg::Key] => {
                        bulk(out, kb);
                        n += klen;
                    }
                    [Seg::Value] => {
                        bulk_value(out, kb, size, f);
                        n += size;
                    }
                    segs => {
                        tmp.clear();
                        render(tmp, segs, kb, size, ttl, f);
                        bulk(out, tmp);
                    }
                }
            }
            n
        }
    }
}

/// `GET prefix<i>`, the commonest request, in one pass: the key's length follows from its
/// digits, so everything is written straight into `out` after one `reserve` — the key is
/// not formatted elsewhere and copied, and no write checks the capacity again.
#[inline]
pub fn get(out: &mut Vec<u8>, prefix: &[u8], i: u64) -> usize {
    const HEAD: &[u8] = b"*2\r\n$3\r\nGET\r\n$";
    let digits = decimal_len(i);
    let klen = prefix.len() + digits;
    let klen_digits = decimal_len(klen as u64);
    let total = HEAD.len() + klen_digits + 2 + klen + 2;
    out.reserve(total);
    let len = out.len();
    // SAFETY: `reserve` made room for `total` bytes past `len`; the writes below cover
    // exactly those, in order, before `set_len` does.
    unsafe {
        unsafe fn put(at: *mut u8, bytes: &[u8]) -> *mut u8 {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), at, bytes.len());
            at.add(bytes.len())
        }
        let mut at = put(out.as_mut_ptr().add(len), HEAD);
        put_decimal(at, klen_digits, klen as u64);
        at = put(at.add(klen_digits), b"\r\n");
        at = put(at, prefix);
        put_decimal(at, digits, i);
        at = put(at.add(digits), b"\r\n");
        debug_assert_eq!(at, out.as_mut_ptr().add(len + total));
        out.set_len(len + total);
    }
    klen
}

/// `GET prefix<i>` for one prefix, its head written by one fixed-size copy: for each digit
/// count, the command up to the key's digits (`*2 $3 GET $<key length>` and the prefix) is
/// laid out once, so a request costs one 64-byte copy, its digits and a CRLF — no length
/// to format, no copy of unknown size (a `memcpy` call). For `Worker::issue_get`.
pub struct GetHeads {
    prefix_len: usize,
    /// By digit count (0 unused): the head's bytes (padded) and its length.
    heads: [([u8; HEAD_MAX], u8); 21],
}

/// The longest head `GetHeads` lays out (a prefix of up to ~40 bytes).
const HEAD_MAX: usize = 64;

impl GetHeads {
    /// The heads for `prefix`, or `None` when a head would not fit in `HEAD_MAX` bytes.
    pub fn new(prefix: &[u8]) -> Option<GetHeads> {
        let mut heads = [([0u8; HEAD_MAX], 0u8); 21];
        for (digits, (bytes, len)) in heads.iter_mut().enumerate().skip(1) {
            let mut head = b"*2\r\n$3\r\nGET\r\n$".to_vec();
            head.extend_from_slice((prefix.len() + digits).to_string().as_bytes());
            head.extend_from_slice(b"\r\n");
            head.extend_from_slice(prefix);
            if head.len() > HEAD_MAX {
                return None;
            }
            bytes[..head.len()].copy_from_slice(&head);
            *len = head.len() as u8;
        }
        Some(GetHeads {
            prefix_len: prefix.len(),
            heads,
        })
    }

    /// Appends `GET prefix<i>` to `out`, as `get` does; returns the key's length.
    #[inline]
    pub fn get(&self, out: &mut Vec<u8>, i: u64) -> usize {
        let digits = decimal_len(i);
        let (head, head_len) = &self.heads[digits];
        let head_len = *head_len as usize;
        let total = head_len + digits + 2;
        out.reserve(HEAD_MAX + digits + 2); // the head is copied whole, padding and all
        let len = out.len();
        // SAFETY: `reserve` made room for `HEAD_MAX + digits + 2` bytes past `len`: the
        // padded head, then the digits and CRLF over its padding; `set_len` keeps `total`.
        unsafe {
            let at = out.as_mut_ptr().add(len);
            std::ptr::copy_nonoverlapping(head.as_ptr(), at, HEAD_MAX);
            put_decimal(at.add(head_len), digits, i);
            std::ptr::copy_nonoverlapping(b"\r\n".as_ptr(), at.add(head_len + digits), 2);
            out.set_len(len + total);
        }
        self.prefix_len + digits
    }
}

/// A bulk string holding the contract value for `key` of length `n` (large values are
/// spliced from the filler, see `OutBuf`).
fn bulk_value(out: &mut OutBuf, key: &[u8], n: usize, filler: &[u8]) {
    out.push(b'$');
    write_u64(out, n as u64);
    out.extend_from_slice(b"\r\n");
    out.value(key, n, filler);
    out.extend_from_slice(b"\r\n");
}

/// `SET key 0`: an `incr` counter's prefill.
pub fn counter(out: &mut Vec<u8>, key: &[u8]) {
    out.extend_from_slice(b"*3\r\n$3\r\nSET\r\n");
    bulk(out, key);
    bulk(out, b"0");
}

/// A new connection's set-up: `HELLO 3 [AUTH user pass]` (RESP3) or `AUTH [user] pass`
/// (RESP2, with a password), `SELECT db` (db ≠ 0), then `PING`, which proves the server
/// speaks RESP and that no authentication is missing.
pub fn handshake(resp3: bool, user: Option<&str>, password: Option<&str>, db: u32) -> Handshake {
    let mut request = Vec::new();
    let mut steps = Vec::new();
    if resp3 {
        let mut c: Vec<&[u8]> = vec![b"HELLO", b"3"];
        if let Some(pw) = password {
            c.extend([
                b"AUTH".as_slice(),
                user.unwrap_or("default").as_bytes(),
                pw.as_bytes(),
            ]);
        }
        command(&mut request, &c);
        steps.push("HELLO 3 (RESP3)");
    } else if let Some(pw) = password {
        let mut c: Vec<&[u8]> = vec![b"AUTH"];
        if let Some(u) = user {
            c.push(u.as_bytes());
        }
        c.push(pw.as_bytes());
        command(&mut request, &c);
        steps.push("authentication");
    }
    if db != 0 {
        command(&mut request, &[b"SELECT", db.to_string().as_bytes()]);
        steps.push("SELECT");
    }
    command(&mut request, &[b"PING"]);
    steps.push("PING");
    Handshake { request, steps }
}

#[derive(Debug)]
enum Val {
    Simple,
    Error(Range<usize>),
    Int(i64),
    Bulk(Range<usize>),
    Null,
    Agg {
        n: usize,
        nulls: usize,
        payload: usize,
    },
    Push,
    Other,
}

enum Step {
    Done(usize, Val),
    Need(usize),
}

fn value(buf: &[u8], pos: usize, depth: usize, lim: &Limits) -> Result<Step, String> {
    if pos >= buf.len() {
        return Ok(Step::Need(pos + 1));
    }
    let Some(cr) = find_crlf(buf, pos + 1, lim.max_line)? else {
        return Ok(Step::Need(buf.len() + 1));
    };
    let line = &buf[pos + 1..cr];
    let next = cr + 2;
    let t = buf[pos];
    match t {
        b'+' => Ok(Step::Done(next, Val::Simple)),
        b'-' => Ok(Step::Done(next, Val::Error(pos + 1..cr))),
        b':' => match parse_int(line) {
            Some(v) => Ok(Step::Done(next, Val::Int(v))),
            None => Err(format!("bad integer reply {:?}", printable(line))),
        },
        b'_' => {
            if line.is_empty() {
                Ok(Step::Done(next, Val::Null))
            } else {
                Err(format!("bad null reply {:?}", printable(line)))
            }
        }
        b',' | b'#' | b'(' => Ok(Step::Done(next, Val::Other)),
        b'$' | b'!' | b'=' => {
            let len =
                parse_int(line).ok_or_else(|| format!("bad bulk length {:?}", printable(line)))?;
            if len == -1 && t == b'$' {
                return Ok(Step::Done(next, Val::Null));
            }
            if len < 0 {
                return Err(format!("negative bulk length {len}"));
            }
            let len = len as usize;
            if len > lim.max_bulk {
                return Err(format!(
                    "bulk reply of {len} bytes exceeds the {} byte limit",
                    lim.max_bulk
                ));
            }
            let end = next + len;
            if buf.len() < end + 2 {
                return Ok(Step::Need(end + 2));
            }
            if &buf[end..end + 2] != b"\r\n" {
                return Err("bulk reply not terminated by CRLF".into());
            }
            let v = if t == b'!' {
                Val::Error(next..end)
            } else {
                Val::Bulk(next..end)
            };
            Ok(Step::Done(end + 2, v))
        }
        b'*' | b'%' | b'~' | b'>' | b'|' => {
            let n = parse_int(line)
                .ok_or_else(|| format!("bad aggregate length {:?}", printable(line)))?;
            if n == -1 && t == b'*' {
                return Ok(Step::Done(next, Val::Null));
            }
            if n < 0 {
                return Err(format!("negative aggregate length {n}"));
            }
            let n = n as usize;
            if n > lim.max_elements {
                return Err(format!(
                    "aggregate reply of {n} elements exceeds the {} limit",
                    lim.max_elements
                ));
            }
            if depth >= lim.max_depth {
                return Err(format!("reply nested deeper than {}", lim.max_depth));
            }
            let elems = if matches!(t, b'%' | b'|') { n * 2 } else { n };
            let mut p = next;
            let mut nulls = 0;
            let mut payload = 0;
            for _ in 0..elems {
                match value(buf, p, depth + 1, lim)? {
                    Step::Need(k) => return Ok(Step::Need(k)),
                    Step::Done(e, v) => {
                        match v {
                            Val::Null => nulls += 1,
                            Val::Bulk(ref r) => payload += r.len(),
                            Val::Agg { payload: pl, .. } => payload += pl,
                            _ => {}
                        }
                        p = e;
                    }
                }
            }
            if t == b'|' {
                // An attribute annotates the value that follows it: parse that instead.
                return value(buf, p, depth, lim);
            }
            if t == b'>' {
                return Ok(Step::Done(p, Val::Push));
            }
            Ok(Step::Done(p, Val::Agg { n, nulls, payload }))
        }
        _ => Err(format!(
            "unknown RESP type byte {:?} in {:?}",
            t as char,
            printable(&buf[pos..cr])
        )),
    }
}

/// Parses the reply to one request of `kind` at the start of `buf`. Inlined into its caller
/// for the commonest reply, a read's hit.
#[inline]
pub fn parse(buf: &[u8], kind: Kind, lim: &Limits) -> Parse {
    if matches!(kind, Kind::Get | Kind::Gets) {
        if let Some(r) = bulk_hit(buf, lim) {
            return Parse::Done(r);
        }
    }
    parse_any(buf, kind, lim)
}

/// `parse` without its shortcut for hits: every RESP2/RESP3 reply.
fn parse_any(buf: &[u8], kind: Kind, lim: &Limits) -> Parse {
    let mut pos = 0;
    loop {
        match value(buf, pos, 0, lim) {
            Err(m) => return Parse::Bad(m),
            Ok(Step::Need(n)) => return Parse::Need(n.max(buf.len() + 1)),
            Ok(Step::Done(end, Val::Push)) => {
                // Out-of-band (e.g. invalidation) message: not our reply, skip it.
                pos = end;
            }
            Ok(Step::Done(end, v)) => return Parse::Done(judge(kind, end, v)),
        }
    }
}

/// The commonest reply, a read's hit (`$<len>\r\n<value>\r\n`, whole, plain digits), judged
/// without the general parser: what it returns is exactly what `value` and `judge` make of
/// it. `None` for anything else (another type, a sign, an incomplete or malformed reply),
/// which the general parser then reads, or says what is wrong with.
#[inline]
fn bulk_hit(buf: &[u8], lim: &Limits) -> Option<Reply> {
    let (at, len) = whole_hit(buf, lim.max_bulk)?;
    Some(Reply {
        consumed: at + len + 2,
        outcome: Outcome::Hit,
        value: Some(at..at + len),
        payload: len,
        message: None,
    })
}

/// Where the value of a whole hit at the start of `buf` starts and how long it is (the
/// reply is `at + len + 2` bytes); `None` for anything else: the shortcut of `parse`, and the
/// short way of a plain-GET run's replies (`take_hits`, `engine/worker/read.rs`).
#[inline]
pub fn whole_hit(buf: &[u8], max_bulk: usize) -> Option<(usize, usize)> {
    if buf.first() != Some(&b'$') {
        return None;
    }
    let mut len = 0usize;
    let mut i = 1;
    while let Some(d) = buf.get(i).map(|b| b.wrapping_sub(b'0')).filter(|&d| d <= 9) {
        len = len * 10 + d as usize;
        i += 1;
        if i > 18 {
            return None; // past any `max_bulk`; and no overflow
        }
    }
    let (at, end) = (i + 2, i + 2 + len);
    if i == 1
        || len > max_bulk
        || buf.len() < end + 2
        || buf[i..at] != *b"\r\n"
        || buf[end..end + 2] != *b"\r\n"
    {
        return None;
    }
    Some((at, len))
}

/// The head (`$N\r\n`) and length of a socket's last whole hit, its head's bytes as one word:
/// most runs give a key one value size (many, every key one), so the next hit's head is most
/// likely those same bytes, checked by one compare instead of parsing its digits.
#[derive(Clone, Copy, Debug, Default)]
pub struct HitHint {
    /// The head's bytes (little-endian, at most 8), and the mask of those bytes.
    word: u64,
    mask: u64,
    /// Where the value starts (the head's length; 0: no hint yet) and its length.
    at: usize,
    len: usize,
}

/// `whole_hit`, first trying the head of the socket's last whole hit (`hint`), which it then
/// becomes: the same answer as `whole_hit` for every `buf`.
#[inline]
pub fn whole_hit_hinted(buf: &[u8], hint: &mut HitHint, max_bulk: usize) -> Option<(usize, usize)> {
    let end = hint.at + hint.len;
    if hint.at != 0 && buf.len() >= (end + 2).max(8) {
        let word = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
        if word & hint.mask == hint.word && buf[end..end + 2] == *b"\r\n" {
            return Some((hint.at, hint.len));
        }
    }
    let (at, len) = whole_hit(buf, max_bulk)?;
    if at <= 8 && buf.len() >= 8 {
        let mask = if at == 8 {
            u64::MAX
        } else {
            (1u64 << (8 * at)) - 1
        };
        let word = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
        *hint = HitHint {
            word: word & mask,
            mask,
            at,
            len,
        };
    }
    Some((at, len))
}

/// A bulk string's head (`$N\r\n`) at the start of `buf`; its value is followed by CRLF.
pub fn value_head(buf: &[u8], lim: &Limits) -> Option<ValueHead> {
    if buf.first() != Some(&b'$') {
        return None;
    }
    let cr = find_crlf(buf, 1, lim.max_line).ok()??;
    let len = usize::try_from(parse_int(&buf[1..cr])?).ok()?;
    Some(ValueHead {
        at: cr + 2,
        len,
        tail: b"\r\n",
    })
}

fn judge(kind: Kind, consumed: usize, v: Val) -> Reply {
    let mut r = Reply {
        consumed,
        outcome: Outcome::Ok,
        value: None,
        payload: 0,
        message: None,
    };
    match (kind, v) {
        (_, Val::Error(m)) => {
            r.outcome = Outcome::ServerError;
            r.message = Some(m);
        }
        (Kind::Get | Kind::Gets, Val::Bulk(range)) => {
            r.outcome = Outcome::Hit;
            r.payload = range.len();
            r.value = Some(range);
        }
        (Kind::Get | Kind::Gets, Val::Null) => r.outcome = Outcome::Miss,
        (Kind::Set, Val::Simple) => r.outcome = Outcome::Ok,
        // a delete says whether the key was there: a hit or a miss, as the Python clients count it
        (Kind::Delete, Val::Int(n)) => r.outcome = if n > 0 { Outcome::Hit } else { Outcome::Miss },
        (Kind::Incr | Kind::Touch, Val::Int(_)) => r.outcome = Outcome::Ok,
        (Kind::Exists, Val::Int(n)) => r.outcome = if n > 0 { Outcome::Hit } else { Outcome::Miss },
        (Kind::MGet(k), Val::Agg { n, nulls, payload }) => {
            r.payload = payload;
            if n != k as usize {
                r.outcome = Outcome::ProtocolError;
            } else {
                r.outcome = if nulls == 0 {
                    Outcome::Hit
                } else {
                    Outcome::Miss
                };
            }
        }
        (Kind::Template | Kind::Setup, Val::Bulk(range)) => {
            r.payload = range.len();
        }
        (Kind::Template | Kind::Setup, Val::Agg { payload, .. }) => r.payload = payload,
        (Kind::Template | Kind::Setup, _) => {}
        (_, _) => r.outcome = Outcome::ProtocolError,
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hinted check answers as `whole_hit` does for every buffer, the hint right or wrong:
    /// every cut of hits of several lengths (one digit to five), a changed digit, a missing
    /// CRLF, a miss and an error between them, and a length over `max_bulk`.
    #[test]
    fn a_hinted_hit_is_judged_as_an_unhinted_one() {
        let mut stream = Vec::new();
        for (i, n) in [100usize, 100, 7, 7, 12345, 0, 100, 99, 100]
            .iter()
            .enumerate()
        {
            stream.extend_from_slice(format!("${n}\r\n").as_bytes());
            stream.extend(std::iter::repeat_n(b'a' + i as u8, *n));
            stream.extend_from_slice(b"\r\n");
        }
        stream.extend_from_slice(b"$-1\r\n-ERR x\r\n$100\r\nshort\r\n$100\r\n");
        stream.extend(std::iter::repeat_n(b'z', 100));
        stream.extend_from_slice(b"\n\r$1000\r\n");
        for max_bulk in [50, 1 << 20] {
            let mut hint = HitHint::default();
            for from in 0..stream.len() {
                for to in from..=stream.len().min(from + 140) {
                    let buf = &stream[from..to];
                    assert_eq!(
                        whole_hit_hinted(buf, &mut hint, max_bulk),
                        whole_hit(buf, max_bulk),
                        "{:?} (max_bulk {max_bulk})",
                        printable(buf)
                    );
                }
            }
        }
    }

    #[test]
    fn numbers_are_bulk_strings_of_their_digits() {
        for v in [0, 7, 9, 10, 99, 100, 3600, u64::MAX] {
            let (mut got, mut want) = (Vec::new(), Vec::new());
            bulk_u64(&mut got, v);
            bulk(&mut want, v.to_string().as_bytes());
            assert_eq!(got, want, "{v}");
        }
    }

    #[test]
    fn a_get_written_in_one_pass_is_the_command_with_its_key() {
        for i in [0, 9, 10, 99, 100, 12_345, u64::MAX] {
            for prefix in [b"".as_slice(), b"cm:vs:"] {
                let (mut got, mut want) = (Vec::new(), Vec::new());
                let n = get(&mut got, prefix, i);
                let key = [prefix, i.to_string().as_bytes()].concat();
                command(&mut want, &[b"GET", &key]);
                assert_eq!((got, n), (want, key.len()), "{i}");
            }
        }
    }

    #[test]
    fn a_get_from_its_laid_out_head_is_the_one_written_in_one_pass() {
        let long = [b'p'; 40];
        for prefix in [b"".as_slice(), b"cm:vs:", &long] {
            let heads = GetHeads::new(prefix).expect("a head of at most 64 bytes");
            let mut rng = crate::keyspace::Rng::new(5);
            let mut values: Vec<u64> = (0..20).map(|p| 10u64.pow(p)).collect();
            values.extend((0..20).map(|p| 10u64.pow(p) - 1));
            values.extend((0..10_000).map(|_| rng.next_u64() >> rng.below(64)));
            values.push(u64::MAX);
            let (mut got, mut want) = (b"before".to_vec(), b"before".to_vec());
            for i in values {
                assert_eq!(heads.get(&mut got, i), get(&mut want, prefix, i), "{i}");
            }
            assert_eq!(got, want);
        }
        assert!(
            GetHeads::new(&[b'p'; 60]).is_none(),
            "past 64 bytes: the general way"
        );
    }

    #[test]
    fn the_shortcut_for_hits_reads_them_as_the_general_parser_does() {
        let lim = Limits {
            max_bulk: 1000,
            ..Limits::default()
        };
        let mut rng = crate::keyspace::Rng::new(11);
        let mut shortcut = 0;
        for _ in 0..200_000 {
            let mut buf = vec![if rng.below(8) == 0 { b'*' } else { b'$' }];
            match rng.below(10) {
                0 => buf.push(b'-'),
                1 => buf.push(b'+'),
                2 => buf.push(b'0'),
                _ => {}
            }
            let len = rng.below(1100);
            let digits = len.to_string();
            buf.extend_from_slice(if rng.below(10) == 0 {
                b"99999999999999999999"
            } else {
                digits.as_bytes()
            });
            buf.extend_from_slice(
                [b"\r\n".as_slice(), b"\n", b"\r", b"x\r\n"][rng.below(4) as usize],
            );
            buf.extend((0..len).map(|_| rng.next_u64() as u8));
            buf.extend_from_slice(
                [b"\r\n".as_slice(), b"\r", b"\n\r", b"ab"][rng.below(4) as usize],
            );
            buf.extend_from_slice(b"$1\r\nz\r\n"); // the next reply
            if rng.below(2) == 0 {
                buf.truncate(rng.below(buf.len() as u64 + 1) as usize);
            }
            let kind = [Kind::Get, Kind::Gets, Kind::Set][rng.below(3) as usize];
            let fast = matches!(kind, Kind::Get | Kind::Gets)
                .then(|| bulk_hit(&buf, &lim))
                .flatten();
            shortcut += fast.is_some() as u32;
            assert_eq!(
                parse(&buf, kind, &lim),
                parse_any(&buf, kind, &lim),
                "{:?}",
                printable(&buf)
            );
        }
        assert!(shortcut > 2_000, "{shortcut}"); // about 1 in 60 is a whole hit
    }

    fn p(buf: &[u8], kind: Kind) -> Parse {
        parse(buf, kind, &Limits::default())
    }

    #[test]
    fn get_hit_miss() {
        match p(b"$5\r\nhello\r\n+OK", Kind::Get) {
            Parse::Done(r) => {
                assert_eq!(r.outcome, Outcome::Hit);
                assert_eq!(r.consumed, 11);
                assert_eq!(r.value, Some(4..9));
            }
            o => panic!("{o:?}"),
        }
        assert!(matches!(
            p(b"$-1\r\n", Kind::Get),
            Parse::Done(Reply {
                outcome: Outcome::Miss,
                ..
            })
        ));
        assert!(matches!(
            p(b"_\r\n", Kind::Get),
            Parse::Done(Reply {
                outcome: Outcome::Miss,
                ..
            })
        ));
        assert_eq!(p(b"$5\r\nhel", Kind::Get), Parse::Need(11));
    }

    #[test]
    fn a_delete_says_whether_the_key_was_there() {
        for (reply, outcome) in [(&b":1\r\n"[..], Outcome::Hit), (b":0\r\n", Outcome::Miss)] {
            assert!(
                matches!(p(reply, Kind::Delete), Parse::Done(Reply { outcome: o, .. }) if o == outcome)
            );
        }
    }

    #[test]
    fn mget_and_errors() {
        let r = p(b"*3\r\n$1\r\na\r\n$-1\r\n$2\r\nbb\r\n", Kind::MGet(3));
        assert!(
            matches!(
                r,
                Parse::Done(Reply {
                    outcome: Outcome::Miss,
                    payload: 3,
                    ..
                })
            ),
            "{r:?}"
        );
        let r = p(b"-ERR wrong\r\n", Kind::Incr);
        assert!(matches!(
            r,
            Parse::Done(Reply {
                outcome: Outcome::ServerError,
                message: Some(_),
                ..
            })
        ));
        assert!(matches!(p(b"?what\r\n", Kind::Get), Parse::Bad(_)));
        assert!(matches!(p(b"$999999999999\r\n", Kind::Get), Parse::Bad(_)));
        assert!(matches!(
            p(b"+OK\r\n", Kind::Get),
            Parse::Done(Reply {
                outcome: Outcome::ProtocolError,
                ..
            })
        ));
        assert!(matches!(p(b"$3\r\nabcXY", Kind::Get), Parse::Bad(_)));
    }

    #[test]
    fn resp3_push_and_attribute_skipped() {
        let r = p(
            b">2\r\n+invalidate\r\n*1\r\n$1\r\nk\r\n:1\r\n",
            Kind::Exists,
        );
        assert!(
            matches!(
                r,
                Parse::Done(Reply {
                    outcome: Outcome::Hit,
                    consumed: 32,
                    ..
                })
            ),
            "{r:?}"
        );
        let r = p(b"|1\r\n+ttl\r\n:3\r\n$1\r\nv\r\n", Kind::Get);
        assert!(
            matches!(
                r,
                Parse::Done(Reply {
                    outcome: Outcome::Hit,
                    ..
                })
            ),
            "{r:?}"
        );
    }

    #[test]
    fn deep_nesting_rejected() {
        let buf = b"*1\r\n".repeat(20);
        assert!(matches!(p(&buf, Kind::Template), Parse::Bad(_)));
    }
}
