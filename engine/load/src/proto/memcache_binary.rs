//! memcached's binary protocol: request encoding, the SASL PLAIN handshake and reply parsing.
//!
//! Every frame is a 24-byte header (magic 0x80 request / 0x81 response, opcode, key
//! length, extras length, data type, vbucket or status, body length, opaque, CAS)
//! followed by extras, key and value. Replies carry their opcode and a status (0 ok,
//! 1 key not found, 0x20 authentication error, …), so the parser checks each reply
//! answers the request it is matched with: a mismatch means the byte stream can no
//! longer be trusted. A multi-get is `GETKQ` per key (quiet: misses send nothing)
//! closed by `NOOP`, so its reply is the hits followed by the NOOP's. `incr` sends
//! expiration 0xffffffff, which makes memcached answer "not found" for a missing
//! counter instead of creating it — as the text protocol's `incr` does. Managed memcached
//! services require SASL, which memcached speaks over this protocol only: the handshake
//! authenticates with `SASL_AUTH "PLAIN"` (`\0user\0password`) before its `NOOP` — a
//! command memcached refuses before authentication (unlike `VERSION`), so a server that
//! wants credentials fails the connect instead of every op.

use super::common::{key_bytes, Handshake, Request};
use super::{Kind, Limits, Outcome, Parse, Reply, ValueHead};
use crate::outbuf::OutBuf;
use std::ops::Range;

pub const HEADER: usize = 24;
const REQUEST: u8 = 0x80;
const RESPONSE: u8 = 0x81;

pub const OP_GET: u8 = 0x00;
pub const OP_SET: u8 = 0x01;
pub const OP_DELETE: u8 = 0x04;
pub const OP_INCREMENT: u8 = 0x05;
pub const OP_NOOP: u8 = 0x0a;
pub const OP_GETKQ: u8 = 0x0d;
pub const OP_TOUCH: u8 = 0x1c;
pub const OP_SASL_AUTH: u8 = 0x21;

pub const STATUS_OK: u16 = 0x0000;
pub const STATUS_NOT_FOUND: u16 = 0x0001;
pub const STATUS_AUTH_ERROR: u16 = 0x0020;

/// Extras and key of the largest well-formed reply besides its value (a key is at most
/// 250 bytes; GET's extras are 4): what a body may hold on top of `max_bulk`.
const MAX_OVERHEAD: usize = 1024;

/// Writes a request header.
#[inline]
fn header(out: &mut Vec<u8>, opcode: u8, key: usize, extras: usize, body: usize) {
    out.push(REQUEST);
    out.push(opcode);
    out.extend_from_slice(&(key as u16).to_be_bytes());
    out.push(extras as u8);
    out.extend_from_slice(&[0, 0, 0]); // data type, vbucket
    out.extend_from_slice(&(body as u32).to_be_bytes());
    out.extend_from_slice(&[0; 12]); // opaque, CAS
}

/// A request that is a header and a key (and `extras`), no value.
#[inline]
fn keyed(out: &mut Vec<u8>, opcode: u8, key: &[u8], extras: &[u8]) {
    header(
        out,
        opcode,
        key.len(),
        extras.len(),
        extras.len() + key.len(),
    );
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
}

/// Encodes one request; returns the payload bytes (keys + values) it carries.
pub fn encode(out: &mut OutBuf, req: &Request, kb: &mut Vec<u8>) -> usize {
    let (ttl, size) = (expiry(req.ttl), req.size);
    key_bytes(kb, req.prefix, req.lengths, req.op.kind, req.keys[0]);
    let klen = kb.len();
    match req.op.kind {
        // GET answers with the CAS in its header anyway; EXISTS has no opcode of its own.
        Kind::Get | Kind::Gets | Kind::Exists => keyed(out, OP_GET, kb, &[]),
        Kind::Set => {
            header(out, OP_SET, klen, 8, 8 + klen + size);
            out.extend_from_slice(&[0; 4]); // flags
            out.extend_from_slice(&ttl.to_be_bytes());
            out.extend_from_slice(kb);
            out.value(kb, size, req.filler);
            return klen + size;
        }
        Kind::Delete => keyed(out, OP_DELETE, kb, &[]),
        Kind::Incr => {
            let mut extras = [0u8; 20];
            extras[..8].copy_from_slice(&1u64.to_be_bytes()); // delta
            extras[16..].copy_from_slice(&u32::MAX.to_be_bytes()); // missing: NOT_FOUND, not created
            keyed(out, OP_INCREMENT, kb, &extras);
        }
        Kind::Touch => keyed(out, OP_TOUCH, kb, &ttl.to_be_bytes()),
        Kind::MGet(_) => {
            let mut n = 0;
            for &k in req.keys {
                key_bytes(kb, req.prefix, req.lengths, Kind::Get, k);
                keyed(out, OP_GETKQ, kb, &[]);
                n += kb.len();
            }
            header(out, OP_NOOP, 0, 0, 0);
            return n;
        }
        // config/mix.rs refuses templates for this protocol; a set-up step is a NOOP
        Kind::Template | Kind::Setup => header(out, OP_NOOP, 0, 0, 0),
    }
    klen
}

/// memcached reads an expiration above 30 days as a Unix time; the engine's `ttl_s` is
/// seconds from now like the text protocol's exptime, so it is passed on unchanged.
fn expiry(ttl: u64) -> u32 {
    ttl.min(u32::MAX as u64 - 1) as u32
}

/// SET `key` = "0": an `incr` counter's prefill.
pub fn counter(out: &mut Vec<u8>, key: &[u8]) {
    header(out, OP_SET, key.len(), 8, 8 + key.len() + 1);
    out.extend_from_slice(&[0; 8]); // flags, no expiry
    out.extend_from_slice(key);
    out.push(b'0');
}

/// A new connection's set-up: SASL PLAIN when there are credentials, then `NOOP`, which
/// proves the server speaks binary (and that it let us in).
pub fn handshake(username: Option<&str>, password: Option<&str>) -> Handshake {
    let mut request = Vec::new();
    let mut steps = Vec::new();
    if let Some(password) = password {
        let user = username.unwrap_or("");
        let mut auth = Vec::with_capacity(2 + user.len() + password.len());
        auth.push(0);
        auth.extend_from_slice(user.as_bytes());
        auth.push(0);
        auth.extend_from_slice(password.as_bytes());
        header(&mut request, OP_SASL_AUTH, 5, 0, 5 + auth.len());
        request.extend_from_slice(b"PLAIN");
        request.extend_from_slice(&auth);
        steps.push(SASL_STEP);
    }
    header(&mut request, OP_NOOP, 0, 0, 0);
    steps.push("the binary protocol (NOOP)");
    Handshake { request, steps }
}

/// The name of the handshake's authentication step (conn.rs words its refusal from it).
pub const SASL_STEP: &str = "SASL PLAIN authentication";

/// One response frame: its opcode, status, where its value lies and its whole length.
struct Frame {
    opcode: u8,
    status: u16,
    value: Range<usize>,
    len: usize,
}

fn frame(buf: &[u8], lim: &Limits) -> Result<Frame, Parse> {
    if buf.len() < HEADER {
        return Err(Parse::Need(HEADER));
    }
    if buf[0] != RESPONSE {
        return Err(Parse::Bad(format!(
            "not a binary memcached reply (magic byte 0x{:02x}, expected 0x81)",
            buf[0]
        )));
    }
    let key = u16::from_be_bytes([buf[2], buf[3]]) as usize;
    let extras = buf[4] as usize;
    let status = u16::from_be_bytes([buf[6], buf[7]]);
    let body = u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]) as usize;
    if key + extras > body {
        return Err(Parse::Bad(format!(
            "binary reply with key ({key}) and extras ({extras}) longer than its body ({body})"
        )));
    }
    if body > lim.max_bulk.saturating_add(MAX_OVERHEAD) {
        return Err(Parse::Bad(format!(
            "binary reply body of {body} bytes exceeds the {} byte limit",
            lim.max_bulk
        )));
    }
    if buf.len() < HEADER + body {
        return Err(Parse::Need(HEADER + body));
    }
    Ok(Frame {
        opcode: buf[1],
        status,
        value: HEADER + extras + key..HEADER + body,
        len: HEADER + body,
    })
}

/// The opcode that answers a request of `kind` (a multi-get ends with its NOOP's).
fn expected(kind: Kind) -> u8 {
    match kind {
        Kind::Get | Kind::Gets | Kind::Exists => OP_GET,
        Kind::Set => OP_SET,
        Kind::Delete => OP_DELETE,
        Kind::Incr => OP_INCREMENT,
        Kind::Touch => OP_TOUCH,
        Kind::MGet(_) | Kind::Template | Kind::Setup => OP_NOOP,
    }
}

fn reply(consumed: usize, outcome: Outcome, value: Option<Range<usize>>, payload: usize) -> Parse {
    Parse::Done(Reply {
        consumed,
        outcome,
        value,
        payload,
        message: None,
    })
}

/// The server said no: its error text (the value of an error reply) is the message.
fn refused(f: &Frame, at: usize) -> Parse {
    Parse::Done(Reply {
        consumed: at + f.len,
        outcome: Outcome::ServerError,
        value: None,
        payload: 0,
        message: Some(at + f.value.start..at + f.value.end),
    })
}

/// A GET hit's head (the 24-byte header, extras and key) at the start of `buf`; nothing
/// follows its value. The fields are judged as [`frame`] does, without waiting for the body.
pub fn value_head(buf: &[u8], lim: &Limits) -> Option<ValueHead> {
    if buf.len() < HEADER || buf[0] != RESPONSE || buf[1] != OP_GET {
        return None;
    }
    let key = u16::from_be_bytes([buf[2], buf[3]]) as usize;
    let extras = buf[4] as usize;
    let status = u16::from_be_bytes([buf[6], buf[7]]);
    let body = u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]) as usize;
    if status != STATUS_OK
        || key + extras > body
        || body > lim.max_bulk.saturating_add(MAX_OVERHEAD)
    {
        return None;
    }
    Some(ValueHead {
        at: HEADER + extras + key,
        len: body - extras - key,
        tail: b"",
    })
}

/// Parses the binary reply to one request of `kind` at the start of `buf`.
pub fn parse(buf: &[u8], kind: Kind, lim: &Limits) -> Parse {
    if let Kind::MGet(n) = kind {
        return parse_multi(buf, n, lim);
    }
    let f = match frame(buf, lim) {
        Ok(f) => f,
        Err(p) => return p,
    };
    // The set-up's SASL_AUTH step is answered by its own opcode; any other mismatch is a desync.
    if f.opcode != expected(kind) && !(kind == Kind::Setup && f.opcode == OP_SASL_AUTH) {
        return Parse::Bad(format!(
            "binary reply with opcode 0x{:02x} to a request of opcode 0x{:02x}",
            f.opcode,
            expected(kind)
        ));
    }
    match (kind, f.status) {
        (Kind::Get | Kind::Gets, STATUS_OK) => {
            let size = f.value.len();
            reply(f.len, Outcome::Hit, Some(f.value), size)
        }
        (Kind::Exists, STATUS_OK) => reply(f.len, Outcome::Hit, None, f.value.len()),
        (Kind::Get | Kind::Gets | Kind::Exists | Kind::Incr, STATUS_NOT_FOUND) => {
            reply(f.len, Outcome::Miss, None, 0)
        }
        (Kind::Delete, STATUS_OK) => reply(f.len, Outcome::Hit, None, 0), // the key was there
        (Kind::Delete, STATUS_NOT_FOUND) => reply(f.len, Outcome::Miss, None, 0),
        (Kind::Touch, STATUS_OK | STATUS_NOT_FOUND) => reply(f.len, Outcome::Ok, None, 0),
        (Kind::Set | Kind::Incr | Kind::Template | Kind::Setup, STATUS_OK) => {
            reply(f.len, Outcome::Ok, None, 0)
        }
        _ => refused(&f, 0),
    }
}

/// GETKQ hits (misses are silent) up to the closing NOOP: a hit when every key was found.
/// An error reply inside (not a miss) makes the whole multi-get a server error, reported
/// once the NOOP has arrived so the stream stays in step.
fn parse_multi(buf: &[u8], n: u32, lim: &Limits) -> Parse {
    let mut pos = 0;
    let mut found = 0u32;
    let mut payload = 0;
    let mut error: Option<Range<usize>> = None;
    loop {
        let f = match frame(&buf[pos..], lim) {
            Ok(f) => f,
            Err(Parse::Need(k)) => return Parse::Need(pos + k),
            Err(p) => return p,
        };
        match (f.opcode, f.status) {
            (OP_NOOP, _) => {
                let consumed = pos + f.len;
                if let Some(message) = error {
                    return Parse::Done(Reply {
                        consumed,
                        outcome: Outcome::ServerError,
                        value: None,
                        payload,
                        message: Some(message),
                    });
                }
                let outcome = if found == n {
                    Outcome::Hit
                } else {
                    Outcome::Miss
                };
                return reply(consumed, outcome, None, payload);
            }
            (OP_GETKQ, STATUS_OK) => {
                if found as usize >= lim.max_elements {
                    return Parse::Bad(format!(
                        "more than {} values in one reply",
                        lim.max_elements
                    ));
                }
                found += 1;
                payload += f.value.len();
            }
            (OP_GETKQ, STATUS_NOT_FOUND) => {}
            (OP_GETKQ, _) => {
                error.get_or_insert(pos + f.value.start..pos + f.value.end);
            }
            (op, _) => {
                return Parse::Bad(format!(
                    "binary reply with opcode 0x{op:02x} inside a multi-get"
                ))
            }
        }
        pos += f.len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A response frame.
    pub fn resp(opcode: u8, status: u16, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
        let mut out = vec![RESPONSE, opcode];
        out.extend_from_slice(&(key.len() as u16).to_be_bytes());
        out.push(extras.len() as u8);
        out.push(0);
        out.extend_from_slice(&status.to_be_bytes());
        out.extend_from_slice(&((extras.len() + key.len() + value.len()) as u32).to_be_bytes());
        out.extend_from_slice(&[0; 12]);
        out.extend_from_slice(extras);
        out.extend_from_slice(key);
        out.extend_from_slice(value);
        out
    }

    fn p(buf: &[u8], kind: Kind) -> Parse {
        parse(buf, kind, &Limits::default())
    }

    fn outcome(r: Parse) -> Outcome {
        match r {
            Parse::Done(r) => r.outcome,
            other => panic!("not done: {other:?}"),
        }
    }

    #[test]
    fn get_hit_miss_and_value() {
        let hit = resp(OP_GET, 0, &[0, 0, 0, 0], b"", b"hello");
        assert_eq!(
            p(&hit, Kind::Get),
            Parse::Done(Reply {
                consumed: 33,
                outcome: Outcome::Hit,
                value: Some(28..33),
                payload: 5,
                message: None
            })
        );
        let miss = resp(OP_GET, STATUS_NOT_FOUND, &[], b"", b"Not found");
        assert_eq!(outcome(p(&miss, Kind::Get)), Outcome::Miss);
        assert_eq!(outcome(p(&miss, Kind::Exists)), Outcome::Miss);
        assert_eq!(outcome(p(&hit, Kind::Exists)), Outcome::Hit);
    }

    #[test]
    fn a_reply_split_across_reads_asks_for_the_rest() {
        let hit = resp(OP_GET, 0, &[0, 0, 0, 0], b"", b"hello");
        for cut in 0..hit.len() {
            match p(&hit[..cut], Kind::Get) {
                Parse::Need(n) => {
                    assert!(n > cut && n <= hit.len(), "cut {cut}: need {n}")
                }
                other => panic!("cut {cut}: {other:?}"),
            }
        }
        // followed by the next reply: only the first is consumed
        let mut two = hit.clone();
        two.extend_from_slice(&resp(OP_SET, 0, &[], b"", b""));
        assert!(matches!(
            p(&two, Kind::Get),
            Parse::Done(Reply { consumed: 33, .. })
        ));
    }

    #[test]
    fn writes_and_counters() {
        assert_eq!(
            outcome(p(&resp(OP_SET, 0, &[], b"", b""), Kind::Set)),
            Outcome::Ok
        );
        let too_large = resp(OP_SET, 0x03, &[], b"", b"Too large.");
        match p(&too_large, Kind::Set) {
            Parse::Done(r) => {
                assert_eq!(r.outcome, Outcome::ServerError);
                assert_eq!(&too_large[r.message.unwrap()], b"Too large.");
            }
            other => panic!("{other:?}"),
        }
        for (status, deleted) in [(STATUS_OK, Outcome::Hit), (STATUS_NOT_FOUND, Outcome::Miss)] {
            assert_eq!(
                outcome(p(&resp(OP_DELETE, status, &[], b"", b""), Kind::Delete)),
                deleted
            );
            assert_eq!(
                outcome(p(&resp(OP_TOUCH, status, &[], b"", b""), Kind::Touch)),
                Outcome::Ok
            );
        }
        let counted = resp(OP_INCREMENT, 0, &[], b"", &7u64.to_be_bytes());
        assert_eq!(outcome(p(&counted, Kind::Incr)), Outcome::Ok);
        let missing = resp(OP_INCREMENT, STATUS_NOT_FOUND, &[], b"", b"Not found");
        assert_eq!(outcome(p(&missing, Kind::Incr)), Outcome::Miss);
    }

    #[test]
    fn multi_get_counts_quiet_hits_up_to_the_noop() {
        let mut all = resp(OP_GETKQ, 0, &[0; 4], b"k:1", b"a");
        all.extend(resp(OP_GETKQ, 0, &[0; 4], b"k:2", b"bc"));
        all.extend(resp(OP_NOOP, 0, &[], b"", b""));
        match p(&all, Kind::MGet(2)) {
            Parse::Done(r) => {
                assert_eq!(
                    (r.outcome, r.payload, r.consumed),
                    (Outcome::Hit, 3, all.len())
                )
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(outcome(p(&all, Kind::MGet(3))), Outcome::Miss);
        for cut in 0..all.len() {
            assert!(
                matches!(p(&all[..cut], Kind::MGet(2)), Parse::Need(n) if n > cut && n <= all.len())
            );
        }
        let mut failed = resp(OP_GETKQ, 0x82, &[], b"", b"Out of memory");
        failed.extend(resp(OP_NOOP, 0, &[], b"", b""));
        assert_eq!(outcome(p(&failed, Kind::MGet(1))), Outcome::ServerError);
    }

    #[test]
    fn refusals_and_garbage() {
        let auth = resp(OP_SASL_AUTH, STATUS_AUTH_ERROR, &[], b"", b"Auth failure.");
        assert_eq!(outcome(p(&auth, Kind::Setup)), Outcome::ServerError);
        let ok = resp(OP_SASL_AUTH, 0, &[], b"", b"Authenticated");
        assert_eq!(outcome(p(&ok, Kind::Setup)), Outcome::Ok);
        let noauth = resp(OP_GET, STATUS_AUTH_ERROR, &[], b"", b"Auth failure.");
        assert_eq!(outcome(p(&noauth, Kind::Get)), Outcome::ServerError);
        assert!(matches!(
            p(b"VALUE k 0 5\r\nhello\r\nEND\r\n", Kind::Get),
            Parse::Bad(_)
        ));
        assert!(matches!(
            p(&resp(OP_SET, 0, &[], b"", b""), Kind::Get),
            Parse::Bad(_)
        ));
        let mut huge = resp(OP_GET, 0, &[], b"", b"");
        huge[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(p(&huge, Kind::Get), Parse::Bad(_)));
        let mut lying = resp(OP_GET, 0, &[0; 4], b"", b"");
        lying[2..4].copy_from_slice(&10u16.to_be_bytes());
        assert!(matches!(p(&lying, Kind::Get), Parse::Bad(_)));
    }

    #[test]
    fn handshake_authenticates_then_noops() {
        let h = handshake(Some("u"), Some("pw"));
        assert_eq!(h.steps, vec![SASL_STEP, "the binary protocol (NOOP)"]);
        let body = b"PLAIN\0u\0pw";
        assert_eq!(h.request[..2], [REQUEST, OP_SASL_AUTH]);
        assert_eq!(h.request[2..4], 5u16.to_be_bytes());
        assert_eq!(h.request[8..12], (body.len() as u32).to_be_bytes());
        assert_eq!(&h.request[HEADER..HEADER + body.len()], body);
        assert_eq!(h.request.len(), 2 * HEADER + body.len());
        assert_eq!(h.request[HEADER + body.len() + 1], OP_NOOP);
        let plain = handshake(None, None);
        assert_eq!((plain.request.len(), plain.steps.len()), (HEADER, 1));
    }
}
