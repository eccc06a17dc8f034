//! memcached text and meta protocols: request encoding and reply parsing.
//!
//! Text replies are lines, some followed by a data block (`VALUE k f n [cas]` …
//! `END`); meta replies are two-letter codes, `VA <n> …` followed by a data block.
//! A multi-get in the meta protocol is sent as quiet `mg … q` requests closed by
//! `mn`, so its reply is the hits followed by `MN`.

use super::common::{key_bytes, render, Handshake, Request};
use super::Seg;
use super::{find_crlf, parse_int, printable, Kind, Limits, Outcome, Parse, Reply, ValueHead};
use crate::keyspace::write_u64;
use crate::outbuf::OutBuf;
use std::ops::Range;

/// Encodes one request in the text protocol; returns the payload bytes it carries.
pub fn encode_text(out: &mut OutBuf, req: &Request, kb: &mut Vec<u8>) -> usize {
    let (f, ttl, size) = (req.filler, req.ttl, req.size);
    key_bytes(kb, req.prefix, req.lengths, req.op.kind, req.keys[0]);
    let klen = kb.len();
    match req.op.kind {
        Kind::Get | Kind::Exists => line(out, b"get ", kb, b""),
        Kind::Gets => line(out, b"gets ", kb, b""),
        Kind::Set => {
            out.extend_from_slice(b"set ");
            out.extend_from_slice(kb);
            out.extend_from_slice(b" 0 ");
            write_u64(out, ttl);
            out.push(b' ');
            write_u64(out, size as u64);
            out.extend_from_slice(b"\r\n");
            out.value(kb, size, f);
            out.extend_from_slice(b"\r\n");
            return klen + size;
        }
        Kind::Delete => line(out, b"delete ", kb, b""),
        Kind::Incr => line(out, b"incr ", kb, b" 1"),
        Kind::Touch => {
            out.extend_from_slice(b"touch ");
            out.extend_from_slice(kb);
            out.push(b' ');
            write_u64(out, ttl);
            out.extend_from_slice(b"\r\n");
        }
        Kind::MGet(_) => {
            out.extend_from_slice(b"get");
            let mut n = 0;
            for &k in req.keys {
                out.push(b' ');
                key_bytes(kb, req.prefix, req.lengths, Kind::Get, k);
                out.extend_from_slice(kb);
                n += kb.len();
            }
            out.extend_from_slice(b"\r\n");
            return n;
        }
        Kind::Template | Kind::Setup => return template(out, req, kb),
    }
    klen
}

/// Encodes one request in the meta protocol; returns the payload bytes it carries.
pub fn encode_meta(out: &mut OutBuf, req: &Request, kb: &mut Vec<u8>) -> usize {
    let (f, ttl, size) = (req.filler, req.ttl, req.size);
    key_bytes(kb, req.prefix, req.lengths, req.op.kind, req.keys[0]);
    let klen = kb.len();
    match req.op.kind {
        Kind::Get => line(out, b"mg ", kb, b" v"),
        Kind::Gets => line(out, b"mg ", kb, b" v c"),
        Kind::Exists => line(out, b"mg ", kb, b""),
        Kind::Set => {
            out.extend_from_slice(b"ms ");
            out.extend_from_slice(kb);
            out.push(b' ');
            write_u64(out, size as u64);
            if ttl > 0 {
                out.extend_from_slice(b" T");
                write_u64(out, ttl);
            }
            out.extend_from_slice(b"\r\n");
            out.value(kb, size, f);
            out.extend_from_slice(b"\r\n");
            return klen + size;
        }
        Kind::Delete => line(out, b"md ", kb, b""),
        Kind::Incr => line(out, b"ma ", kb, b""),
        Kind::Touch => {
            out.extend_from_slice(b"mg ");
            out.extend_from_slice(kb);
            out.extend_from_slice(b" T");
            write_u64(out, ttl);
            out.extend_from_slice(b"\r\n");
        }
        Kind::MGet(_) => {
            let mut n = 0;
            for &k in req.keys {
                key_bytes(kb, req.prefix, req.lengths, Kind::Get, k);
                line(out, b"mg ", kb, b" v q");
                n += kb.len();
            }
            out.extend_from_slice(b"mn\r\n");
            return n;
        }
        Kind::Template | Kind::Setup => return template(out, req, kb),
    }
    klen
}

/// `head key tail\r\n`. Always inlined: each call's head and tail are constants, so their copies
/// become a few stores; left to the compiler, a change elsewhere in the crate once made it an
/// out-of-line call with four memcpy calls (+5 % instructions per memcached request).
#[inline(always)]
fn line(out: &mut Vec<u8>, head: &[u8], key: &[u8], tail: &[u8]) {
    out.extend_from_slice(head);
    out.extend_from_slice(key);
    out.extend_from_slice(tail);
    out.extend_from_slice(b"\r\n");
}

/// A template request (text or meta): the arguments form one line, and a lone `{value}`
/// is sent as the data block after it.
fn template(out: &mut OutBuf, req: &Request, key: &[u8]) -> usize {
    let (f, ttl, size) = (req.filler, req.ttl, req.size);
    let mut first = true;
    let mut data = false;
    for arg in &req.op.template {
        if arg.as_slice() == [Seg::Value] {
            data = true;
            continue;
        }
        if !first {
            out.push(b' ');
        }
        first = false;
        render(out, arg, key, size, ttl, f);
    }
    out.extend_from_slice(b"\r\n");
    if data {
        out.value(key, size, f);
        out.extend_from_slice(b"\r\n");
        return key.len() + size;
    }
    key.len()
}

/// `set key 0 0 1` / `0`: an `incr` counter's prefill (text protocol).
pub fn counter_text(out: &mut Vec<u8>, key: &[u8]) {
    line(out, b"set ", key, b" 0 0 1\r\n0");
}

/// `ms key 1` / `0`: an `incr` counter's prefill (meta protocol).
pub fn counter_meta(out: &mut Vec<u8>, key: &[u8]) {
    line(out, b"ms ", key, b" 1\r\n0");
}

/// A new connection's set-up in the text protocol: `version` proves the server speaks it.
pub fn handshake_text() -> Handshake {
    Handshake {
        request: b"version\r\n".to_vec(),
        steps: vec!["version"],
    }
}

/// A new connection's set-up in the meta protocol: `mn` (a no-op) proves the server speaks it.
pub fn handshake_meta() -> Handshake {
    Handshake {
        request: b"mn\r\n".to_vec(),
        steps: vec!["the meta protocol (mn)"],
    }
}

fn starts(line: &[u8], word: &[u8]) -> bool {
    line.len() >= word.len()
        && &line[..word.len()] == word
        && (line.len() == word.len() || line[word.len()] == b' ')
}

fn error_line(line: &[u8]) -> bool {
    starts(line, b"ERROR") || starts(line, b"CLIENT_ERROR") || starts(line, b"SERVER_ERROR")
}

/// Reads a data block of `len` bytes plus CRLF at `pos`; `Ok(None)` means need `Some(total)`.
fn data_block(
    buf: &[u8],
    pos: usize,
    len: i64,
    lim: &Limits,
) -> Result<Result<Range<usize>, usize>, String> {
    if len < 0 {
        return Err(format!("negative data length {len}"));
    }
    let len = len as usize;
    if len > lim.max_bulk {
        return Err(format!(
            "value of {len} bytes exceeds the {} byte limit",
            lim.max_bulk
        ));
    }
    let end = pos + len;
    if buf.len() < end + 2 {
        return Ok(Err(end + 2));
    }
    if &buf[end..end + 2] != b"\r\n" {
        return Err("data block not terminated by CRLF".into());
    }
    Ok(Ok(pos..end))
}

fn field(line: &[u8], idx: usize) -> Option<&[u8]> {
    line.split(|&b| b == b' ')
        .filter(|f| !f.is_empty())
        .nth(idx)
}

fn done(consumed: usize, outcome: Outcome) -> Parse {
    Parse::Done(Reply {
        consumed,
        outcome,
        value: None,
        payload: 0,
        message: None,
    })
}

fn server_error(consumed: usize, msg: Range<usize>) -> Parse {
    Parse::Done(Reply {
        consumed,
        outcome: Outcome::ServerError,
        value: None,
        payload: 0,
        message: Some(msg),
    })
}

fn protocol_error(consumed: usize, msg: Range<usize>) -> Parse {
    Parse::Done(Reply {
        consumed,
        outcome: Outcome::ProtocolError,
        value: None,
        payload: 0,
        message: Some(msg),
    })
}

/// Parses the text-protocol reply to one request of `kind` at the start of `buf`.
pub fn parse_text(buf: &[u8], kind: Kind, lim: &Limits) -> Parse {
    let mut pos = 0;
    let mut found = 0u32;
    let mut first: Option<Range<usize>> = None;
    let mut payload = 0;
    loop {
        let cr = match find_crlf(buf, pos, lim.max_line) {
            Err(m) => return Parse::Bad(m),
            Ok(None) => return Parse::Need(buf.len() + 1),
            Ok(Some(cr)) => cr,
        };
        let line = &buf[pos..cr];
        let next = cr + 2;
        if error_line(line) {
            return server_error(next, pos..cr);
        }
        match kind {
            Kind::Get | Kind::Gets | Kind::Exists | Kind::MGet(_) | Kind::Template
                if starts(line, b"VALUE") =>
            {
                let Some(len) = field(line, 3).and_then(parse_int) else {
                    return Parse::Bad(format!("bad VALUE line {:?}", printable(line)));
                };
                if found as usize >= lim.max_elements {
                    return Parse::Bad(format!(
                        "more than {} values in one reply",
                        lim.max_elements
                    ));
                }
                match data_block(buf, next, len, lim) {
                    Err(m) => return Parse::Bad(m),
                    Ok(Err(need)) => return Parse::Need(need),
                    Ok(Ok(r)) => {
                        payload += r.len();
                        pos = r.end + 2;
                        if first.is_none() {
                            first = Some(r);
                        }
                        found += 1;
                    }
                }
            }
            Kind::Get | Kind::Gets | Kind::Exists | Kind::MGet(_) | Kind::Template
                if line == b"END" =>
            {
                let outcome = match kind {
                    Kind::MGet(n) => {
                        if found == n {
                            Outcome::Hit
                        } else {
                            Outcome::Miss
                        }
                    }
                    Kind::Template => Outcome::Ok,
                    _ if found > 1 => return protocol_error(next, pos..cr),
                    _ if found == 1 => Outcome::Hit,
                    _ => Outcome::Miss,
                };
                let value = if matches!(kind, Kind::Get | Kind::Gets) {
                    first
                } else {
                    None
                };
                return Parse::Done(Reply {
                    consumed: next,
                    outcome,
                    value,
                    payload,
                    message: None,
                });
            }
            Kind::Set => {
                return match line {
                    b"STORED" => done(next, Outcome::Ok),
                    _ => server_error(next, pos..cr),
                }
            }
            Kind::Delete => {
                return match line {
                    b"DELETED" => done(next, Outcome::Hit), // the key was there
                    b"NOT_FOUND" => done(next, Outcome::Miss),
                    _ => protocol_error(next, pos..cr),
                };
            }
            Kind::Touch => {
                return match line {
                    b"TOUCHED" | b"NOT_FOUND" => done(next, Outcome::Ok),
                    _ => protocol_error(next, pos..cr),
                }
            }
            Kind::Incr => {
                return if line == b"NOT_FOUND" {
                    done(next, Outcome::Miss)
                } else if !line.is_empty() && line.iter().all(u8::is_ascii_digit) {
                    done(next, Outcome::Ok)
                } else {
                    protocol_error(next, pos..cr)
                }
            }
            Kind::Template | Kind::Setup => return done(next, Outcome::Ok),
            _ => return protocol_error(next, pos..cr),
        }
    }
}

/// A text GET hit's head (`VALUE key flags bytes [cas]\r\n`) at the start of `buf`; its
/// value is followed by CRLF and `END` (a second value would make the reply an error).
pub fn value_head_text(buf: &[u8], lim: &Limits) -> Option<ValueHead> {
    let cr = find_crlf(buf, 0, lim.max_line).ok()??;
    let line = &buf[..cr];
    if !starts(line, b"VALUE") {
        return None;
    }
    let len = usize::try_from(field(line, 3).and_then(parse_int)?).ok()?;
    Some(ValueHead {
        at: cr + 2,
        len,
        tail: b"\r\nEND\r\n",
    })
}

/// A meta GET hit's head (`VA size flags*\r\n`) at the start of `buf`; its value is
/// followed by CRLF.
pub fn value_head_meta(buf: &[u8], lim: &Limits) -> Option<ValueHead> {
    let cr = find_crlf(buf, 0, lim.max_line).ok()??;
    let line = &buf[..cr];
    if !starts(line, b"VA") {
        return None;
    }
    let len = usize::try_from(field(line, 1).and_then(parse_int)?).ok()?;
    Some(ValueHead {
        at: cr + 2,
        len,
        tail: b"\r\n",
    })
}

/// Parses the meta-protocol reply to one request of `kind` at the start of `buf`.
pub fn parse_meta(buf: &[u8], kind: Kind, lim: &Limits) -> Parse {
    let mut pos = 0;
    let mut found = 0u32;
    let mut payload = 0;
    loop {
        let cr = match find_crlf(buf, pos, lim.max_line) {
            Err(m) => return Parse::Bad(m),
            Ok(None) => return Parse::Need(buf.len() + 1),
            Ok(Some(cr)) => cr,
        };
        let line = &buf[pos..cr];
        let next = cr + 2;
        if error_line(line) {
            return server_error(next, pos..cr);
        }
        let code = if line.len() >= 2 && (line.len() == 2 || line[2] == b' ') {
            &line[..2]
        } else {
            line
        };
        if code == b"VA" {
            let Some(len) = field(line, 1).and_then(parse_int) else {
                return Parse::Bad(format!("bad VA line {:?}", printable(line)));
            };
            let r = match data_block(buf, next, len, lim) {
                Err(m) => return Parse::Bad(m),
                Ok(Err(need)) => return Parse::Need(need),
                Ok(Ok(r)) => r,
            };
            if let Kind::MGet(_) = kind {
                if found as usize >= lim.max_elements {
                    return Parse::Bad(format!(
                        "more than {} values in one reply",
                        lim.max_elements
                    ));
                }
                found += 1;
                payload += r.len();
                pos = r.end + 2;
                continue;
            }
            let consumed = r.end + 2;
            let outcome = match kind {
                Kind::Get | Kind::Gets | Kind::Exists => Outcome::Hit,
                Kind::Template | Kind::Setup | Kind::Touch => Outcome::Ok,
                _ => return protocol_error(consumed, pos..cr),
            };
            let value = if matches!(kind, Kind::Get | Kind::Gets) {
                Some(r.clone())
            } else {
                None
            };
            return Parse::Done(Reply {
                consumed,
                outcome,
                value,
                payload: r.len(),
                message: None,
            });
        }
        return match (kind, code) {
            (Kind::MGet(n), b"MN") => {
                let outcome = if found == n {
                    Outcome::Hit
                } else {
                    Outcome::Miss
                };
                Parse::Done(Reply {
                    consumed: next,
                    outcome,
                    value: None,
                    payload,
                    message: None,
                })
            }
            (Kind::MGet(_), b"EN") => continue_after(buf, next, kind, lim, found, payload),
            (Kind::Get | Kind::Gets | Kind::Exists, b"EN") => done(next, Outcome::Miss),
            (Kind::Exists, b"HD") => done(next, Outcome::Hit),
            (Kind::Set, b"HD") => done(next, Outcome::Ok),
            (Kind::Set, _) => server_error(next, pos..cr),
            (Kind::Delete, b"HD") => done(next, Outcome::Hit),
            (Kind::Delete, b"NF") => done(next, Outcome::Miss),
            (Kind::Touch, b"HD" | b"EN" | b"NF") => done(next, Outcome::Ok),
            (Kind::Incr, b"HD" | b"VA") => done(next, Outcome::Ok),
            (Kind::Incr, b"NF") => done(next, Outcome::Miss),
            (Kind::Template | Kind::Setup, _) => done(next, Outcome::Ok),
            _ => protocol_error(next, pos..cr),
        };
    }
}

/// A non-quiet miss inside a meta multi-get (a server that ignores `q`): keep reading.
fn continue_after(
    buf: &[u8],
    pos: usize,
    kind: Kind,
    lim: &Limits,
    found: u32,
    payload: usize,
) -> Parse {
    match parse_meta(&buf[pos..], kind, lim) {
        Parse::Done(mut r) => {
            r.consumed += pos;
            if r.outcome == Outcome::Hit || r.outcome == Outcome::Miss {
                r.outcome = Outcome::Miss;
            }
            r.payload += payload;
            let _ = found;
            r.message = r.message.map(|m| m.start + pos..m.end + pos);
            Parse::Done(r)
        }
        Parse::Need(n) => Parse::Need(n + pos),
        Parse::Bad(m) => Parse::Bad(m),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(buf: &[u8], kind: Kind) -> Parse {
        parse_text(buf, kind, &Limits::default())
    }
    fn m(buf: &[u8], kind: Kind) -> Parse {
        parse_meta(buf, kind, &Limits::default())
    }

    #[test]
    fn a_delete_says_whether_the_key_was_there() {
        let said = |r: Parse| match r {
            Parse::Done(reply) => reply.outcome,
            other => panic!("{other:?}"),
        };
        assert_eq!(said(t(b"DELETED\r\n", Kind::Delete)), Outcome::Hit);
        assert_eq!(said(t(b"NOT_FOUND\r\n", Kind::Delete)), Outcome::Miss);
        assert_eq!(said(m(b"HD\r\n", Kind::Delete)), Outcome::Hit);
        assert_eq!(said(m(b"NF\r\n", Kind::Delete)), Outcome::Miss);
    }

    #[test]
    fn text_get() {
        let r = t(b"VALUE k 0 5\r\nhello\r\nEND\r\n", Kind::Get);
        assert_eq!(
            r,
            Parse::Done(Reply {
                consumed: 25,
                outcome: Outcome::Hit,
                value: Some(13..18),
                payload: 5,
                message: None
            })
        );
        assert!(matches!(
            t(b"END\r\n", Kind::Get),
            Parse::Done(Reply {
                outcome: Outcome::Miss,
                ..
            })
        ));
        assert_eq!(t(b"VALUE k 0 5\r\nhel", Kind::Get), Parse::Need(20));
        assert!(matches!(t(b"VALUE k 0 x\r\n", Kind::Get), Parse::Bad(_)));
        assert!(matches!(
            t(b"SERVER_ERROR out of memory\r\n", Kind::Set),
            Parse::Done(Reply {
                outcome: Outcome::ServerError,
                ..
            })
        ));
        let r = t(b"VALUE a 0 1\r\nx\r\nEND\r\n", Kind::MGet(2));
        assert!(matches!(
            r,
            Parse::Done(Reply {
                outcome: Outcome::Miss,
                payload: 1,
                ..
            })
        ));
    }

    #[test]
    fn meta() {
        let r = m(b"VA 5 c9\r\nhello\r\n", Kind::Get);
        assert!(
            matches!(
                r,
                Parse::Done(Reply {
                    outcome: Outcome::Hit,
                    consumed: 16,
                    ..
                })
            ),
            "{r:?}"
        );
        assert!(matches!(
            m(b"EN\r\n", Kind::Get),
            Parse::Done(Reply {
                outcome: Outcome::Miss,
                ..
            })
        ));
        let r = m(b"VA 1\r\nx\r\nVA 1\r\ny\r\nMN\r\n", Kind::MGet(2));
        assert!(
            matches!(
                r,
                Parse::Done(Reply {
                    outcome: Outcome::Hit,
                    consumed: 22,
                    ..
                })
            ),
            "{r:?}"
        );
        assert!(matches!(
            m(b"HD\r\n", Kind::Set),
            Parse::Done(Reply {
                outcome: Outcome::Ok,
                ..
            })
        ));
        assert!(matches!(
            m(b"NS\r\n", Kind::Set),
            Parse::Done(Reply {
                outcome: Outcome::ServerError,
                ..
            })
        ));
        assert!(matches!(m(b"VA 99999999999\r\n", Kind::Get), Parse::Bad(_)));
    }
}
