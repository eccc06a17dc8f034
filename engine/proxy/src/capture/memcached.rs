//! memcached, text and meta protocols: requests into records, and replies matched to them
//! for a read's value size. The binary protocol is not parsed.
use super::format::{Rec, OP_DELETE, OP_EXISTS, OP_GET, OP_INCR, OP_SET};
use super::parse::{
    find_line, int, now_unix_s, rec, tokens, Bad, Expect, Parsed, Reply, Request, MAX_MESSAGE,
};

/// The request at the head of `buf` (a connection's unparsed request stream), as records of
/// client `client` at `t_us`.
pub fn command(buf: &[u8], t_us: i64, client: u32) -> Parsed<Request> {
    if buf.first() == Some(&0x80) {
        return Err(Bad); // the binary protocol is not parsed
    }
    let Some((end, next)) = find_line(buf, 0) else {
        return if buf.len() > 64 * 1024 {
            Err(Bad)
        } else {
            Ok(None)
        };
    };
    let tok = tokens(&buf[..end]);
    let rec = |op: u8, key: &[u8], value_size: i64, ttl_s: u32| {
        rec(t_us, client, op, key, value_size, ttl_s)
    };
    let cmd = tok.first().copied().unwrap_or_default();
    let noreply = tok.last() == Some(&&b"noreply"[..]);
    let (mut reads, mut writes) = (Vec::new(), Vec::new());
    let mut used = next;
    let mut expect = Some(Expect::McLine);
    match cmd {
        b"get" | b"gets" => {
            reads.extend(tok[1..].iter().map(|k| rec(OP_GET, k, 0, 0)));
            expect = Some(Expect::McValues);
        }
        b"gat" | b"gats" => {
            reads.extend(tok.iter().skip(2).map(|k| rec(OP_GET, k, 0, 0)));
            expect = Some(Expect::McValues);
        }
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => {
            let bytes = tok.get(4).and_then(|t| int(t)).ok_or(Bad)?;
            let Some(stop) = data_block(buf, next, bytes)? else {
                return Ok(None);
            };
            used = stop;
            let ttl = tok.get(3).map_or(0, |t| mc_ttl(t));
            writes.push(rec(OP_SET, tok[1], bytes, ttl));
        }
        b"delete" if tok.len() >= 2 => writes.push(rec(OP_DELETE, tok[1], 0, 0)),
        b"incr" | b"decr" if tok.len() >= 2 => writes.push(rec(OP_INCR, tok[1], 0, 0)),
        b"mg" if tok.len() >= 2 => {
            let flags = &tok[2..];
            let op = if meta_flag(flags, b'v').is_some() {
                OP_GET
            } else {
                OP_EXISTS
            };
            reads.push(rec(op, tok[1], 0, 0));
            expect = Some(meta(flags, *b"mg"));
        }
        b"ms" if tok.len() >= 3 => {
            let bytes = int(tok[2]).ok_or(Bad)?;
            let Some(stop) = data_block(buf, next, bytes)? else {
                return Ok(None);
            };
            used = stop;
            let flags = &tok[3..];
            let ttl = meta_flag(flags, b'T').map_or(0, mc_ttl);
            writes.push(rec(OP_SET, tok[1], bytes, ttl));
            expect = Some(meta(flags, *b"ms"));
        }
        b"md" if tok.len() >= 2 => {
            writes.push(rec(OP_DELETE, tok[1], 0, 0));
            expect = Some(meta(&tok[2..], *b"md"));
        }
        b"ma" if tok.len() >= 2 => {
            writes.push(rec(OP_INCR, tok[1], 0, 0));
            expect = Some(meta(&tok[2..], *b"ma"));
        }
        b"mn" => expect = Some(meta(&[], *b"mn")),
        b"stats" => expect = Some(Expect::McStats),
        b"quit" | b"" => expect = None,
        _ => {}
    }
    Ok(Some(Request {
        used,
        reads,
        writes,
        expect: if noreply { None } else { expect },
        counted: !cmd.is_empty(), // a blank line: nothing sent, nothing answered
        unmatches: false,
    }))
}

/// The end of a storage command's data block of `bytes` starting at `at` (plus its "\r\n"),
/// once it has all arrived.
fn data_block(buf: &[u8], at: usize, bytes: i64) -> Parsed<usize> {
    if !(0..MAX_MESSAGE as i64).contains(&bytes) {
        return Err(Bad);
    }
    let stop = at + bytes as usize + 2;
    Ok((buf.len() >= stop).then_some(stop))
}

/// memcached's exptime: seconds, or a unix time when above 30 days.
fn mc_ttl(text: &[u8]) -> u32 {
    let Some(v) = int(text) else { return 0 };
    if v <= 0 {
        0
    } else if v > 2_592_000 {
        (v - now_unix_s()).clamp(0, u32::MAX as i64) as u32
    } else {
        v as u32
    }
}

/// A meta flag's token (`T30` for flag `T`), if present.
fn meta_flag<'a>(flags: &[&'a [u8]], flag: u8) -> Option<&'a [u8]> {
    flags.iter().find(|f| f[0] == flag).map(|f| &f[1..])
}

/// What a meta request's reply looks like: its `q` flag may silence it.
fn meta(flags: &[&[u8]], cmd: [u8; 2]) -> Expect {
    Expect::Meta {
        quiet: flags.iter().any(|f| *f == b"q"),
        cmd,
    }
}

/// memcached `VALUE` lines until `END`, sizing `recs` by key.
pub fn mc_values(buf: &[u8], recs: &mut [Rec]) -> Reply {
    let mut pos = 0;
    loop {
        let Some((end, next)) = find_line(buf, pos) else {
            return Ok(None);
        };
        let line = &buf[pos..end];
        if line.starts_with(b"VALUE ") {
            let tok = tokens(line);
            let bytes = tok.get(3).and_then(|t| int(t)).ok_or(Bad)?;
            if bytes < 0 {
                return Err(Bad);
            }
            let stop = next + bytes as usize + 2;
            if buf.len() < stop {
                return Ok(None);
            }
            // the first unsized record for this key: the same key may be asked twice
            if let Some(r) = recs
                .iter_mut()
                .find(|r| r.key == tok[1] && r.value_size == 0)
            {
                r.value_size = bytes as u32;
            }
            pos = stop;
        } else {
            // END, or an error line instead of the values
            return Ok(Some(Some(next)));
        }
    }
}

/// `STAT`/`ITEM` lines until the line that ends them.
pub fn mc_stats(buf: &[u8]) -> Reply {
    let mut pos = 0;
    loop {
        let Some((end, next)) = find_line(buf, pos) else {
            return Ok(None);
        };
        let line = &buf[pos..end];
        if !line.starts_with(b"STAT ") && !line.starts_with(b"ITEM ") {
            return Ok(Some(Some(next)));
        }
        pos = next;
    }
}

/// A meta reply; `quiet`: the request had `q`, so its usual answer may never come.
pub fn meta_reply(buf: &[u8], quiet: bool, cmd: [u8; 2], recs: &mut [Rec]) -> Reply {
    let Some((end, next)) = find_line(buf, 0) else {
        return Ok(None);
    };
    let code = &buf[..end.min(2)];
    if quiet {
        // `q` hides the usual answer: a miss for mg, success for ms/md/ma. Seeing it (or
        // the `mn` that ends a quiet batch) means this request's answer was the silence.
        let hidden: &[&[u8]] = match &cmd {
            b"mg" => &[b"EN"],
            b"md" => &[b"HD", b"NF"],
            _ => &[b"HD"],
        };
        if hidden.contains(&code) || code == b"MN" {
            return Ok(Some(None));
        }
    }
    if code == b"VA" {
        let tok = tokens(&buf[..end]);
        let bytes = tok.get(1).and_then(|t| int(t)).ok_or(Bad)?;
        if bytes < 0 {
            return Err(Bad);
        }
        let stop = next + bytes as usize + 2;
        if buf.len() < stop {
            return Ok(None);
        }
        if let Some(r) = recs.first_mut() {
            r.value_size = bytes as u32;
        }
        return Ok(Some(Some(stop)));
    }
    Ok(Some(Some(next)))
}

#[cfg(test)]
mod tests {
    use super::super::recorder::tests::{run, summary};
    use super::super::recorder::Protocol;
    use super::*;

    #[test]
    fn memcached_text_and_meta() {
        let recs = run(
            Protocol::Memcached,
            &[
                (b"set k 0 60 3\r\nabc\r\n", b"STORED\r\n"),
                (b"set n 0 0 2 noreply\r\nxy\r\n", b""),
                (
                    b"get k zz n\r\n",
                    b"VALUE k 0 3\r\nabc\r\nVALUE n 0 2\r\nxy\r\nEND\r\n",
                ),
                (b"ms m 4 T10\r\nwxyz\r\n", b"HD\r\n"),
                (b"mg m v\r\n", b"VA 4\r\nwxyz\r\n"),
                (
                    b"mg m v q\r\nmg zz v q\r\nmn\r\n",
                    b"VA 4\r\nwxyz\r\nMN\r\n",
                ),
                (b"md m\r\n", b"HD\r\n"),
                (b"incr c 1\r\n", b"NOT_FOUND\r\n"),
            ],
        );
        assert_eq!(
            summary(&recs),
            vec![
                (OP_SET, "k".into(), 3, 60),
                (OP_SET, "n".into(), 2, 0),
                (OP_GET, "k".into(), 3, 0),
                (OP_GET, "zz".into(), 0, 0),
                (OP_GET, "n".into(), 2, 0),
                (OP_SET, "m".into(), 4, 10),
                (OP_GET, "m".into(), 4, 0),
                (OP_GET, "m".into(), 4, 0),
                (OP_GET, "zz".into(), 0, 0),
                (OP_DELETE, "m".into(), 0, 0),
                (OP_INCR, "c".into(), 0, 0),
            ]
        );
    }
}
