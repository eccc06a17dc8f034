//! Requests, whatever the protocol: the dispatch to each protocol's encoder, connection
//! handshake and reply parser (what the protocols share is [`super::common`]'s).
//!
//! Encoders write straight into a connection's [`OutBuf`] (no allocation per op; keys
//! are formatted into a reused scratch buffer, a value is its 12-byte header plus a
//! slice of the shared filler) and return the payload bytes (keys + values) the
//! request carries, which is what the results count as `bytes_out`.

use super::common::{Handshake, Request};
use super::Protocol;
use super::{memcache, memcache_binary, resp, Kind, Limits, Parse, ValueHead};
use crate::outbuf::OutBuf;

/// Encodes one request into `out`; returns the payload bytes (keys + values) it carries.
/// `kb` and `tmp` are scratch buffers (`kb` holds the first key afterwards).
#[inline(always)]
pub fn encode(
    protocol: Protocol,
    out: &mut OutBuf,
    req: &Request,
    kb: &mut Vec<u8>,
    tmp: &mut Vec<u8>,
) -> usize {
    match protocol {
        Protocol::Resp2 | Protocol::Resp3 => resp::encode(out, req, kb, tmp),
        Protocol::MemcacheText => memcache::encode_text(out, req, kb),
        Protocol::MemcacheMeta => memcache::encode_meta(out, req, kb),
        Protocol::MemcacheBinary => memcache_binary::encode(out, req, kb),
    }
}

/// Prefill of an `incr` counter: sets `key` to "0", so that memcached's incr finds it.
pub fn encode_counter(protocol: Protocol, out: &mut Vec<u8>, key: &[u8]) {
    match protocol {
        Protocol::Resp2 | Protocol::Resp3 => resp::counter(out, key),
        Protocol::MemcacheText => memcache::counter_text(out, key),
        Protocol::MemcacheMeta => memcache::counter_meta(out, key),
        Protocol::MemcacheBinary => memcache_binary::counter(out, key),
    }
}

/// Parses the first reply in `buf` to a request of `kind`.
#[inline(always)]
pub fn parse(protocol: Protocol, buf: &[u8], kind: Kind, lim: &Limits) -> Parse {
    match protocol {
        Protocol::Resp2 | Protocol::Resp3 => resp::parse(buf, kind, lim),
        Protocol::MemcacheText => memcache::parse_text(buf, kind, lim),
        Protocol::MemcacheMeta => memcache::parse_meta(buf, kind, lim),
        Protocol::MemcacheBinary => memcache_binary::parse(buf, kind, lim),
    }
}

/// The head of the hit to a GET at the start of `buf` (header whole, value maybe not):
/// `None` for any other reply, an incomplete header, or a request of another kind.
pub fn value_head(protocol: Protocol, buf: &[u8], kind: Kind, lim: &Limits) -> Option<ValueHead> {
    if !matches!(kind, Kind::Get | Kind::Gets) {
        return None;
    }
    let head = match protocol {
        Protocol::Resp2 | Protocol::Resp3 => resp::value_head(buf, lim),
        Protocol::MemcacheText => memcache::value_head_text(buf, lim),
        Protocol::MemcacheMeta => memcache::value_head_meta(buf, lim),
        Protocol::MemcacheBinary => memcache_binary::value_head(buf, lim),
    }?;
    (head.len <= lim.max_bulk && head.at <= buf.len()).then_some(head)
}

/// The handshake a connection of `protocol` sends (credentials: RESP and memcached's binary SASL;
/// database: RESP only).
pub fn handshake(
    protocol: Protocol,
    username: Option<&str>,
    password: Option<&str>,
    db: u32,
) -> Handshake {
    match protocol {
        Protocol::Resp2 | Protocol::Resp3 => {
            resp::handshake(protocol == Protocol::Resp3, username, password, db)
        }
        Protocol::MemcacheText => memcache::handshake_text(),
        Protocol::MemcacheMeta => memcache::handshake_meta(),
        Protocol::MemcacheBinary => memcache_binary::handshake(username, password),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::keyspace::write_value;
    use crate::keyspace::{make_filler, value_header};
    use crate::proto::common::key_bytes;
    use crate::proto::{OpPlan, Seg};

    const ALL: [Protocol; 4] = [
        Protocol::Resp2,
        Protocol::Resp3,
        Protocol::MemcacheText,
        Protocol::MemcacheMeta,
    ];

    fn op(kind: Kind) -> OpPlan {
        OpPlan {
            name: String::new(),
            kind,
            template: Vec::new(),
            writes_value: kind == Kind::Set,
            write: kind == Kind::Set,
        }
    }

    /// Encodes `op` on keys `k:` + `keys` with a value of `size`; returns the bytes on the
    /// wire and the payload count.
    fn wire(
        protocol: Protocol,
        op: &OpPlan,
        keys: &[u64],
        size: usize,
        ttl: u64,
    ) -> (Vec<u8>, usize) {
        let filler = make_filler(64 * 1024);
        let req = Request {
            op,
            prefix: b"k:",
            lengths: &[],
            keys,
            size,
            ttl,
            filler: &filler,
        };
        let mut out = OutBuf::default();
        let n = encode(protocol, &mut out, &req, &mut Vec::new(), &mut Vec::new());
        (out.to_bytes(&filler), n)
    }

    fn text(b: &[u8]) -> String {
        String::from_utf8_lossy(b).into_owned()
    }

    /// The contract value of `key`, `n` bytes (at most its 12-byte header here).
    fn val(key: &[u8], n: usize) -> String {
        text(&value_header(key)[..n])
    }

    #[test]
    fn resp_requests_are_arrays_of_bulk_strings() {
        for p in [Protocol::Resp2, Protocol::Resp3] {
            let w = |kind, ttl| text(&wire(p, &op(kind), &[7], 5, ttl).0);
            assert_eq!(w(Kind::Get, 0), "*2\r\n$3\r\nGET\r\n$3\r\nk:7\r\n");
            assert_eq!(w(Kind::Gets, 0), "*2\r\n$3\r\nGET\r\n$3\r\nk:7\r\n");
            let v = val(b"k:7", 5);
            assert_eq!(
                w(Kind::Set, 0),
                format!("*3\r\n$3\r\nSET\r\n$3\r\nk:7\r\n$5\r\n{v}\r\n")
            );
            assert_eq!(
                w(Kind::Set, 30),
                format!("*5\r\n$3\r\nSET\r\n$3\r\nk:7\r\n$5\r\n{v}\r\n$2\r\nEX\r\n$2\r\n30\r\n")
            );
            assert_eq!(w(Kind::Delete, 0), "*2\r\n$3\r\nDEL\r\n$3\r\nk:7\r\n");
            assert_eq!(w(Kind::Exists, 0), "*2\r\n$6\r\nEXISTS\r\n$3\r\nk:7\r\n");
            assert_eq!(w(Kind::Incr, 0), "*2\r\n$4\r\nINCR\r\n$5\r\nk:n:7\r\n");
            assert_eq!(w(Kind::Touch, 0), "*2\r\n$7\r\nPERSIST\r\n$3\r\nk:7\r\n");
            assert_eq!(
                w(Kind::Touch, 9),
                "*3\r\n$6\r\nEXPIRE\r\n$3\r\nk:7\r\n$1\r\n9\r\n"
            );
            let (m, n) = wire(p, &op(Kind::MGet(2)), &[7, 12], 0, 0);
            assert_eq!(text(&m), "*3\r\n$4\r\nMGET\r\n$3\r\nk:7\r\n$4\r\nk:12\r\n");
            assert_eq!(n, 7);
        }
    }

    #[test]
    fn memcache_text_requests() {
        let p = Protocol::MemcacheText;
        let w = |kind, ttl| text(&wire(p, &op(kind), &[7], 5, ttl).0);
        assert_eq!(w(Kind::Get, 0), "get k:7\r\n");
        assert_eq!(w(Kind::Exists, 0), "get k:7\r\n");
        assert_eq!(w(Kind::Gets, 0), "gets k:7\r\n");
        let v = val(b"k:7", 5);
        assert_eq!(w(Kind::Set, 0), format!("set k:7 0 0 5\r\n{v}\r\n"));
        assert_eq!(w(Kind::Set, 30), format!("set k:7 0 30 5\r\n{v}\r\n"));
        assert_eq!(w(Kind::Delete, 0), "delete k:7\r\n");
        assert_eq!(w(Kind::Incr, 0), "incr k:n:7 1\r\n");
        assert_eq!(w(Kind::Touch, 9), "touch k:7 9\r\n");
        let (m, n) = wire(p, &op(Kind::MGet(2)), &[7, 12], 0, 0);
        assert_eq!(text(&m), "get k:7 k:12\r\n");
        assert_eq!(n, 7);
    }

    #[test]
    fn memcache_meta_requests() {
        let p = Protocol::MemcacheMeta;
        let w = |kind, ttl| text(&wire(p, &op(kind), &[7], 5, ttl).0);
        assert_eq!(w(Kind::Get, 0), "mg k:7 v\r\n");
        assert_eq!(w(Kind::Gets, 0), "mg k:7 v c\r\n");
        assert_eq!(w(Kind::Exists, 0), "mg k:7\r\n");
        let v = val(b"k:7", 5);
        assert_eq!(w(Kind::Set, 0), format!("ms k:7 5\r\n{v}\r\n"));
        assert_eq!(w(Kind::Set, 30), format!("ms k:7 5 T30\r\n{v}\r\n"));
        assert_eq!(w(Kind::Delete, 0), "md k:7\r\n");
        assert_eq!(w(Kind::Incr, 0), "ma k:n:7\r\n");
        assert_eq!(w(Kind::Touch, 9), "mg k:7 T9\r\n");
        let (m, n) = wire(p, &op(Kind::MGet(2)), &[7, 12], 0, 0);
        assert_eq!(text(&m), "mg k:7 v q\r\nmg k:12 v q\r\nmn\r\n");
        assert_eq!(n, 7);
    }

    #[test]
    fn memcache_binary_requests() {
        let p = Protocol::MemcacheBinary;
        // (opcode, key length, extras length, body length) of the first header, and the key
        let head = |m: &[u8]| {
            let u16at = |i: usize| u16::from_be_bytes([m[i], m[i + 1]]) as usize;
            let body = u32::from_be_bytes([m[8], m[9], m[10], m[11]]) as usize;
            (m[0], m[1], u16at(2), m[4] as usize, body)
        };
        let (m, n) = wire(p, &op(Kind::Get), &[7], 0, 0);
        assert_eq!(
            (head(&m), &m[24..], n),
            ((0x80, 0x00, 3, 0, 3), &b"k:7"[..], 3)
        );
        let (m, n) = wire(p, &op(Kind::Set), &[7], 5, 30);
        assert_eq!(head(&m), (0x80, 0x01, 3, 8, 16));
        assert_eq!(&m[24..32], &[0, 0, 0, 0, 0, 0, 0, 30]);
        assert_eq!(text(&m[32..]), format!("k:7{}", val(b"k:7", 5)));
        assert_eq!(n, 8);
        let (m, _) = wire(p, &op(Kind::Incr), &[7], 0, 0);
        assert_eq!(head(&m), (0x80, 0x05, 5, 20, 25));
        assert_eq!(
            &m[24 + 16..24 + 20],
            &[0xff; 4],
            "a missing counter is not created"
        );
        assert_eq!(&m[44..], b"k:n:7");
        let (m, _) = wire(p, &op(Kind::Touch), &[7], 0, 9);
        assert_eq!(
            (head(&m), &m[24..28]),
            ((0x80, 0x1c, 3, 4, 7), &[0, 0, 0, 9][..])
        );
        assert_eq!(head(&wire(p, &op(Kind::Delete), &[7], 0, 0).0).1, 0x04);
        let (m, n) = wire(p, &op(Kind::MGet(2)), &[7, 12], 0, 0);
        assert_eq!(head(&m), (0x80, 0x0d, 3, 0, 3));
        assert_eq!(head(&m[27..]), (0x80, 0x0d, 4, 0, 4));
        assert_eq!(head(&m[55..]), (0x80, 0x0a, 0, 0, 0));
        assert_eq!((m.len(), n), (55 + 24, 7));
        let mut out = Vec::new();
        encode_counter(p, &mut out, b"k:n:3");
        assert_eq!(
            (head(&out), out.last()),
            ((0x80, 0x01, 5, 8, 14), Some(&b'0'))
        );
    }

    #[test]
    fn payload_counts_keys_and_values() {
        for p in ALL {
            assert_eq!(wire(p, &op(Kind::Get), &[7], 0, 0).1, 3, "{p:?}");
            assert_eq!(wire(p, &op(Kind::Set), &[7], 100, 0).1, 103, "{p:?}");
            assert_eq!(wire(p, &op(Kind::Incr), &[7], 0, 0).1, 5, "{p:?}");
        }
    }

    #[test]
    fn large_values_are_whole_on_the_wire() {
        // From 16 KiB on the value is spliced from the filler: the bytes must not change.
        let filler = make_filler(64 * 1024);
        for p in ALL {
            let (m, n) = wire(p, &op(Kind::Set), &[7], 40_000, 0);
            assert_eq!(n, 40_003);
            let mut v = Vec::new();
            write_value(&mut v, b"k:7", 40_000, &filler);
            let at = m
                .windows(12)
                .position(|w| w == &v[..12])
                .expect("value header");
            assert_eq!(&m[at..at + v.len()], &v[..], "{p:?}");
            assert_eq!(&m[at + v.len()..], b"\r\n", "{p:?}");
        }
    }

    #[test]
    fn templates_render_every_placeholder() {
        let t = |args: &[&[Seg]]| OpPlan {
            name: "t".into(),
            kind: Kind::Template,
            template: args.iter().map(|a| a.to_vec()).collect(),
            writes_value: true,
            write: true,
        };
        let lit = |s: &str| Seg::Lit(s.as_bytes().to_vec());
        let hset = t(&[
            &[lit("HSET")],
            &[lit("h:"), Seg::Key],
            &[Seg::Value],
            &[Seg::Ttl],
            &[Seg::Len],
        ]);
        let v = val(b"k:7", 4);
        let (m, n) = wire(Protocol::Resp2, &hset, &[7], 4, 60);
        assert_eq!(
            text(&m),
            format!("*5\r\n$4\r\nHSET\r\n$5\r\nh:k:7\r\n$4\r\n{v}\r\n$2\r\n60\r\n$1\r\n4\r\n")
        );
        assert_eq!(n, 4, "a key inside a longer argument is not counted");
        let set = t(&[
            &[lit("set")],
            &[Seg::Key],
            &[lit("0")],
            &[Seg::Ttl],
            &[Seg::Len],
            &[Seg::Value],
        ]);
        for p in [Protocol::MemcacheText, Protocol::MemcacheMeta] {
            let (m, n) = wire(p, &set, &[7], 4, 60);
            assert_eq!(text(&m), format!("set k:7 0 60 4\r\n{v}\r\n"));
            assert_eq!(n, 7);
        }
    }

    #[test]
    fn counters_start_at_zero() {
        let w = |p| {
            let mut out = Vec::new();
            encode_counter(p, &mut out, b"k:n:3");
            text(&out)
        };
        assert_eq!(
            w(Protocol::Resp2),
            "*3\r\n$3\r\nSET\r\n$5\r\nk:n:3\r\n$1\r\n0\r\n"
        );
        assert_eq!(w(Protocol::MemcacheText), "set k:n:3 0 0 1\r\n0\r\n");
        assert_eq!(w(Protocol::MemcacheMeta), "ms k:n:3 1\r\n0\r\n");
    }

    #[test]
    fn keys_and_counter_keys() {
        let mut k = b"junk".to_vec();
        key_bytes(&mut k, b"cm:x:", &[], Kind::Get, 42);
        assert_eq!(k, b"cm:x:42");
        key_bytes(&mut k, b"cm:x:", &[], Kind::Incr, 42);
        assert_eq!(k, b"cm:x:n:42");
    }

    fn hs(json: &str) -> (String, Vec<&'static str>) {
        let plan = Config::from_json(json).unwrap().plan().unwrap();
        let h = handshake(
            plan.protocol,
            plan.username.as_deref(),
            plan.password.as_deref(),
            plan.db,
        );
        (text(&h.request), h.steps)
    }

    #[test]
    fn handshakes() {
        let s = r#""servers":["127.0.0.1:1""#;
        assert_eq!(
            hs(&format!(r#"{{"protocol":"resp2",{s}]}}"#)),
            ("*1\r\n$4\r\nPING\r\n".into(), vec!["PING"])
        );
        assert_eq!(
            hs(&format!(r#"{{"protocol":"resp2",{s}],"password":"pw","db":3}}"#)),
            (
                "*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n*2\r\n$6\r\nSELECT\r\n$1\r\n3\r\n*1\r\n$4\r\nPING\r\n"
                    .into(),
                vec!["authentication", "SELECT", "PING"]
            )
        );
        assert_eq!(
            hs(&format!(
                r#"{{"protocol":"resp2",{s}],"username":"u","password":"pw"}}"#
            ))
            .0,
            "*3\r\n$4\r\nAUTH\r\n$1\r\nu\r\n$2\r\npw\r\n*1\r\n$4\r\nPING\r\n"
        );
        assert_eq!(
            hs(&format!(r#"{{"protocol":"resp3",{s}]}}"#)),
            (
                "*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n*1\r\n$4\r\nPING\r\n".into(),
                vec!["HELLO 3 (RESP3)", "PING"]
            )
        );
        assert_eq!(
            hs(&format!(r#"{{"protocol":"resp3",{s}],"password":"pw"}}"#)).0,
            "*5\r\n$5\r\nHELLO\r\n$1\r\n3\r\n$4\r\nAUTH\r\n$7\r\ndefault\r\n$2\r\npw\r\n*1\r\n$4\r\nPING\r\n"
        );
        assert_eq!(
            hs(&format!(r#"{{"protocol":"memcache_text",{s}]}}"#)),
            ("version\r\n".into(), vec!["version"])
        );
        assert_eq!(
            hs(&format!(r#"{{"protocol":"memcache_meta",{s}]}}"#)),
            ("mn\r\n".into(), vec!["the meta protocol (mn)"])
        );
    }

    /// A GET hit of `n` bytes as each protocol answers it.
    fn hit(protocol: Protocol, n: usize) -> Vec<u8> {
        let value = vec![b'v'; n];
        let mut out = match protocol {
            Protocol::Resp2 | Protocol::Resp3 => format!("${n}\r\n").into_bytes(),
            Protocol::MemcacheText => format!("VALUE key:1 0 {n}\r\n").into_bytes(),
            Protocol::MemcacheMeta => format!("VA {n} f0\r\n").into_bytes(),
            Protocol::MemcacheBinary => {
                let mut h = vec![0x81, 0x00, 0, 0, 4, 0, 0, 0];
                h.extend_from_slice(&((n + 4) as u32).to_be_bytes());
                h.extend_from_slice(&[0; 12]); // opaque, CAS
                h.extend_from_slice(&[0; 4]); // extras (flags)
                h
            }
        };
        out.extend_from_slice(&value);
        out.extend_from_slice(match protocol {
            Protocol::MemcacheText => b"\r\nEND\r\n".as_slice(),
            Protocol::MemcacheBinary => b"",
            _ => b"\r\n",
        });
        out
    }

    #[test]
    fn value_heads_agree_with_the_parsers() {
        let lim = Limits::default();
        let protocols = ALL.iter().copied().chain([Protocol::MemcacheBinary]);
        for protocol in protocols {
            let whole = hit(protocol, 40_000);
            let Parse::Done(r) = parse(protocol, &whole, Kind::Get, &lim) else {
                panic!("{protocol:?}: the sample is a whole reply");
            };
            let head = value_head(protocol, &whole, Kind::Get, &lim).expect("a hit's head");
            // The head, the value and its tail are the whole reply, as the parser sees it.
            assert_eq!(head.len, 40_000, "{protocol:?}");
            assert_eq!(r.value, Some(head.at..head.at + head.len), "{protocol:?}");
            assert_eq!(r.payload, head.len, "{protocol:?}");
            assert_eq!(
                head.at + head.len + head.tail.len(),
                whole.len(),
                "{protocol:?}"
            );
            assert!(whole.ends_with(head.tail), "{protocol:?}");
            // Any cut inside the value still has the head; a cut before its end has none.
            for cut in head.at..whole.len() {
                assert_eq!(
                    value_head(protocol, &whole[..cut], Kind::Get, &lim),
                    Some(head)
                );
                assert!(matches!(
                    parse(protocol, &whole[..cut], Kind::Get, &lim),
                    Parse::Need(_)
                ));
            }
            for cut in 0..head.at {
                assert_eq!(value_head(protocol, &whole[..cut], Kind::Get, &lim), None);
            }
            // Only GETs: the same bytes answering anything else are left to the parser.
            for kind in [Kind::Set, Kind::Exists, Kind::MGet(1), Kind::Template] {
                assert_eq!(value_head(protocol, &whole, kind, &lim), None, "{kind:?}");
            }
            // A value over the limit is the parser's to reject.
            let small = Limits {
                max_bulk: 1000,
                ..lim
            };
            assert_eq!(value_head(protocol, &whole, Kind::Get, &small), None);
        }
    }

    #[test]
    fn misses_and_errors_have_no_value_head() {
        let lim = Limits::default();
        let cases: [(Protocol, &[u8]); 8] = [
            (Protocol::Resp2, b"$-1\r\n"),
            (Protocol::Resp3, b"_\r\n"),
            (Protocol::Resp2, b"-ERR wrong\r\n"),
            (Protocol::MemcacheText, b"END\r\n"),
            (Protocol::MemcacheText, b"SERVER_ERROR out of memory\r\n"),
            (Protocol::MemcacheMeta, b"EN\r\n"),
            (Protocol::MemcacheMeta, b"VALUE 5\r\n"),
            (
                Protocol::MemcacheBinary,
                &[
                    0x81, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                ],
            ),
        ];
        for (protocol, buf) in cases {
            assert_eq!(value_head(protocol, buf, Kind::Get, &lim), None, "{buf:?}");
        }
    }
}
