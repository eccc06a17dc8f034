//! RESP2/RESP3: requests (arrays of bulk strings, and inline commands) into records, and
//! replies matched to them for a read's value size.
use super::format::Rec;
use super::format::{OP_DELETE, OP_EXISTS, OP_GET, OP_INCR, OP_SET};
use super::parse::{
    find_line, int, now_unix_s, rec, upper, Bad, Expect, Parsed, Reply, Request, MAX_MESSAGE,
};

/// The request at the head of `buf` (a connection's unparsed request stream), as records of
/// client `client` at `t_us`.
pub fn command(buf: &[u8], t_us: i64, client: u32) -> Parsed<Request> {
    let Some((args, used)) = resp_request(buf)? else {
        return Ok(None);
    };
    let arg = |i: usize| args.get(i).map(|&(s, e)| &buf[s..e]);
    let len = |i: usize| (args[i].1 - args[i].0) as i64;
    let rec = |op: u8, i: usize, value_size: i64, ttl_s: u32| {
        rec(
            t_us,
            client,
            op,
            arg(i).unwrap_or_default(),
            value_size,
            ttl_s,
        )
    };
    let name = arg(0).map(upper).unwrap_or_default();
    let (mut reads, mut writes) = (Vec::new(), Vec::new());
    let mut sized = false;
    let mut unmatches = false;
    match name.as_slice() {
        b"GET" | b"GETEX" | b"GETDEL" if args.len() >= 2 => {
            reads.push(rec(OP_GET, 1, 0, 0));
            sized = true;
        }
        b"MGET" => {
            reads.extend((1..args.len()).map(|i| rec(OP_GET, i, 0, 0)));
            sized = true;
        }
        b"SET" if args.len() >= 3 => {
            let ttl = set_ttl(&arg, args.len());
            writes.push(rec(OP_SET, 1, len(2), ttl));
        }
        b"SETNX" if args.len() >= 3 => writes.push(rec(OP_SET, 1, len(2), 0)),
        b"SETEX" | b"PSETEX" if args.len() >= 4 => {
            let t = arg(2).and_then(int).unwrap_or(0).max(0);
            let ttl = if name == b"PSETEX" {
                (t + 999) / 1000
            } else {
                t
            };
            writes.push(rec(OP_SET, 1, len(3), ttl as u32));
        }
        b"MSET" | b"MSETNX" => {
            for i in (1..args.len().saturating_sub(1)).step_by(2) {
                writes.push(rec(OP_SET, i, len(i + 1), 0));
            }
        }
        b"DEL" | b"UNLINK" => writes.extend((1..args.len()).map(|i| rec(OP_DELETE, i, 0, 0))),
        b"EXISTS" => writes.extend((1..args.len()).map(|i| rec(OP_EXISTS, i, 0, 0))),
        b"INCR" | b"INCRBY" | b"DECR" | b"DECRBY" | b"INCRBYFLOAT" if args.len() >= 2 => {
            writes.push(rec(OP_INCR, 1, 0, 0))
        }
        // Replies stop being one per request: stop matching this connection.
        b"SUBSCRIBE" | b"PSUBSCRIBE" | b"SSUBSCRIBE" | b"MONITOR" => unmatches = true,
        _ => {}
    }
    let blank = args.is_empty(); // an empty inline line gets no reply
    Ok(Some(Request {
        used,
        reads,
        writes,
        expect: (!blank).then_some(Expect::Resp { sized }),
        counted: true,
        unmatches,
    }))
}

/// A SET's TTL in seconds from its options (EX, PX, EXAT, PXAT; others are skipped).
fn set_ttl<'a>(arg: &impl Fn(usize) -> Option<&'a [u8]>, argc: usize) -> u32 {
    let mut ttl = 0u32;
    let mut i = 3;
    while i < argc {
        let opt = upper(arg(i).unwrap_or_default());
        let val = arg(i + 1).and_then(int).unwrap_or(0);
        match opt.as_slice() {
            b"EX" => ttl = val.clamp(0, u32::MAX as i64) as u32,
            b"PX" => ttl = ((val.max(0) + 999) / 1000) as u32,
            b"EXAT" => ttl = (val - now_unix_s()).clamp(0, u32::MAX as i64) as u32,
            b"PXAT" => ttl = ((val + 999) / 1000 - now_unix_s()).clamp(0, u32::MAX as i64) as u32,
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    ttl
}

/// One request: an array of bulk strings, or an inline command. Returns the argument
/// spans and the bytes consumed.
fn resp_request(buf: &[u8]) -> Parsed<(Vec<(usize, usize)>, usize)> {
    if buf.is_empty() {
        return Ok(None);
    }
    if buf[0] != b'*' {
        let Some((end, next)) = find_line(buf, 0) else {
            return if buf.len() > 64 * 1024 {
                Err(Bad)
            } else {
                Ok(None)
            };
        };
        let mut args = Vec::new();
        let mut i = 0;
        while i < end {
            while i < end && buf[i].is_ascii_whitespace() {
                i += 1;
            }
            let start = i;
            while i < end && !buf[i].is_ascii_whitespace() {
                i += 1;
            }
            if i > start {
                args.push((start, i));
            }
        }
        return Ok(Some((args, next)));
    }
    let Some((end, mut pos)) = find_line(buf, 0) else {
        return Ok(None);
    };
    let n = int(&buf[1..end]).ok_or(Bad)?;
    let mut args = Vec::with_capacity(n.max(0) as usize);
    for _ in 0..n.max(0) {
        let Some((end, next)) = find_line(buf, pos) else {
            return Ok(None);
        };
        if buf[pos] != b'$' {
            return Err(Bad);
        }
        let len = int(&buf[pos + 1..end]).ok_or(Bad)?;
        if !(0..MAX_MESSAGE as i64).contains(&len) {
            return Err(Bad);
        }
        let len = len as usize;
        if buf.len() < next + len + 2 {
            return Ok(None);
        }
        args.push((next, next + len));
        pos = next + len + 2;
    }
    Ok(Some((args, pos)))
}

/// The end of one complete RESP2/RESP3 value starting at `pos`.
pub fn resp_skip(buf: &[u8], pos: usize) -> Parsed<usize> {
    let Some((end, next)) = find_line(buf, pos) else {
        return Ok(None);
    };
    if end == pos {
        return Err(Bad);
    }
    let count = || int(&buf[pos + 1..end]).ok_or(Bad);
    match buf[pos] {
        b'+' | b'-' | b':' | b'_' | b'#' | b',' | b'(' => Ok(Some(next)),
        b'$' | b'!' | b'=' => {
            let len = count()?;
            if len < 0 {
                return Ok(Some(next));
            }
            let stop = next + len as usize + 2;
            Ok((buf.len() >= stop).then_some(stop))
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let n = count()?;
            let items = if matches!(buf[pos], b'%' | b'|') {
                n * 2
            } else {
                n
            };
            let mut at = next;
            for _ in 0..items.max(0) {
                match resp_skip(buf, at)? {
                    Some(e) => at = e,
                    None => return Ok(None),
                }
            }
            Ok(Some(at))
        }
        _ => Err(Bad),
    }
}

/// The value size a reply element carries: a bulk string's length, 0 for nil or anything else.
fn resp_size(buf: &[u8], pos: usize) -> u32 {
    match buf.get(pos) {
        Some(b'$') | Some(b'=') | Some(b'!') => find_line(buf, pos)
            .and_then(|(end, _)| int(&buf[pos + 1..end]))
            .map_or(0, |n| n.max(0) as u32),
        _ => 0,
    }
}

/// The reply at the head of `buf`; if `sized`, it sizes `recs` (a bulk string, or an
/// array's elements one per record).
pub fn resp_reply(buf: &[u8], sized: bool, recs: &mut [Rec]) -> Reply {
    let mut pos = 0;
    loop {
        // Attributes (RESP3 `|`) come before the reply they describe; pushes (`>`) are
        // out of band: neither is the reply itself.
        let Some(end) = resp_skip(buf, pos)? else {
            return Ok(None);
        };
        match buf[pos] {
            b'|' | b'>' => pos = end,
            b'*' if sized => {
                let (_, mut at) = find_line(buf, pos).expect("complete");
                for r in recs.iter_mut() {
                    if at >= end {
                        break;
                    }
                    r.value_size = resp_size(buf, at);
                    at = resp_skip(buf, at)?.expect("complete");
                }
                return Ok(Some(Some(end)));
            }
            _ => {
                if sized {
                    if let Some(r) = recs.first_mut() {
                        r.value_size = resp_size(buf, pos);
                    }
                }
                return Ok(Some(Some(end)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::recorder::tests::{run, summary};
    use super::super::recorder::{Protocol, Recorder};
    use super::*;

    #[test]
    fn resp_ops_sizes_and_ttls() {
        let recs = run(
            Protocol::Resp,
            &[
                (
                    b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n",
                    b"%1\r\n+server\r\n+redis\r\n",
                ),
                (
                    b"*5\r\n$3\r\nSET\r\n$1\r\na\r\n$5\r\nhello\r\n$2\r\nEX\r\n$2\r\n30\r\n",
                    b"+OK\r\n",
                ),
                (b"*2\r\n$3\r\nGET\r\n$1\r\na\r\n", b"$5\r\nhello\r\n"),
                (b"*2\r\n$3\r\nGET\r\n$1\r\nb\r\n", b"_\r\n"),
                (
                    b"*3\r\n$4\r\nMGET\r\n$1\r\na\r\n$1\r\nb\r\n",
                    b"*2\r\n$5\r\nhello\r\n$-1\r\n",
                ),
                (b"DEL a\r\n", b":1\r\n"),
            ],
        );
        assert_eq!(
            summary(&recs),
            vec![
                (OP_SET, "a".into(), 5, 30),
                (OP_GET, "a".into(), 5, 0),
                (OP_GET, "b".into(), 0, 0),
                (OP_GET, "a".into(), 5, 0),
                (OP_GET, "b".into(), 0, 0),
                (OP_DELETE, "a".into(), 0, 0),
            ]
        );
    }

    #[test]
    fn pipelined_resp_in_odd_pieces() {
        let reqs: &[u8] = b"*2\r\n$3\r\nGET\r\n$1\r\na\r\n*2\r\n$3\r\nGET\r\n$1\r\nb\r\n";
        let reps: &[u8] = b"$3\r\nxyz\r\n$-1\r\n";
        let mut r = Recorder::new(Protocol::Resp);
        for (i, piece) in reqs.chunks(5).enumerate() {
            r.feed(7, true, i as u64 * 1000, piece);
        }
        for piece in reps.chunks(3) {
            r.feed(7, false, 99_000, piece);
        }
        let recs = r.take_ready(false);
        assert_eq!(
            summary(&recs),
            vec![(OP_GET, "a".into(), 3, 0), (OP_GET, "b".into(), 0, 0)]
        );
        assert!(recs.iter().all(|r| r.client == 7));
    }
}
