//! Property tests of the reply parsers (RESP2/3, memcached text, meta and binary), on stable:
//!
//! * any bytes, and mutations of valid replies, never panic and keep the parsers'
//!   contract (`Done` within the input, `Need(n)` beyond it, `Bad` with a message);
//! * every truncation of a valid reply asks for more (`Need`), and never for more bytes
//!   than the whole reply has: the engine waits for exactly that many, so asking beyond
//!   it would stall a connection until its timeout;
//! * a valid reply gives its expected outcome, and the same result however it arrives:
//!   split at every byte boundary, in random chunks, or followed by the next reply.
//!
//! Bounded: a few hundred cases per property, about a second in all.

use cachemark_load::proto::{
    check_parsers, memcache, memcache_binary, resp, Kind, Limits, Outcome, Parse, ALL_KINDS,
};
use proptest::prelude::*;
use proptest::test_runner::Config;
use std::ops::Range;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Proto {
    Resp,
    Text,
    Meta,
    Binary,
}

fn parse(p: Proto, buf: &[u8], kind: Kind) -> Parse {
    let lim = Limits::default();
    match p {
        Proto::Resp => resp::parse(buf, kind, &lim),
        Proto::Text => memcache::parse_text(buf, kind, &lim),
        Proto::Meta => memcache::parse_meta(buf, kind, &lim),
        Proto::Binary => memcache_binary::parse(buf, kind, &lim),
    }
}

/// One well-formed reply and what it must parse to.
#[derive(Clone, Debug)]
struct Valid {
    proto: Proto,
    kind: Kind,
    bytes: Vec<u8>,
    outcome: Outcome,
    /// Where a single-key read's value lies.
    value: Option<Range<usize>>,
}

impl Valid {
    fn new(proto: Proto, kind: Kind, bytes: Vec<u8>, outcome: Outcome) -> Self {
        Valid {
            proto,
            kind,
            bytes,
            outcome,
            value: None,
        }
    }
}

fn cases() -> Config {
    Config {
        cases: 384,
        failure_persistence: None,
        ..Config::default()
    }
}

/// Integers, the extremes included.
fn int() -> impl Strategy<Value = i64> {
    prop_oneof![
        any::<i64>(),
        Just(i64::MIN),
        Just(i64::MAX),
        Just(0),
        Just(-1)
    ]
}

/// Text without CR or LF (status lines, error messages).
fn line_text() -> impl Strategy<Value = String> {
    "[ -~]{0,24}"
}

/// A value: any bytes, CRLF and protocol words included (parsers go by length).
fn payload() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..48),
        Just(b"\r\nEND\r\n".to_vec()),
        Just(b"$3\r\nabc\r\n".to_vec()),
        Just(b"VA 1\r\nx\r\nMN\r\n".to_vec()),
    ]
}

fn bulk(out: &mut Vec<u8>, v: &[u8]) -> Range<usize> {
    out.extend_from_slice(format!("${}\r\n", v.len()).as_bytes());
    let start = out.len();
    out.extend_from_slice(v);
    out.extend_from_slice(b"\r\n");
    start..start + v.len()
}

/// Any RESP3 value, aggregates nested up to three deep (for templates).
fn resp_tree() -> impl Strategy<Value = Vec<u8>> {
    let leaf = prop_oneof![
        line_text().prop_map(|t| format!("+{t}\r\n").into_bytes()),
        int().prop_map(|i| format!(":{i}\r\n").into_bytes()),
        payload().prop_map(|v| {
            let mut out = Vec::new();
            bulk(&mut out, &v);
            out
        }),
        Just(b"$-1\r\n".to_vec()),
        Just(b"_\r\n".to_vec()),
        Just(b",3.25\r\n".to_vec()),
        Just(b"#t\r\n".to_vec()),
        Just(b"(12345678901234567890\r\n".to_vec()),
        Just(b"=7\r\ntxt:abc\r\n".to_vec()),
        Just(b"-ERR inner\r\n".to_vec()),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        (
            prop::sample::select(vec![b'*', b'~', b'%']),
            prop::collection::vec(inner, 0..4),
        )
            .prop_map(|(t, items)| {
                // A map holds pairs: count the items as keys and values.
                let items = if t == b'%' {
                    &items[..items.len() / 2 * 2]
                } else {
                    &items[..]
                };
                let n = if t == b'%' {
                    items.len() / 2
                } else {
                    items.len()
                };
                let mut out = format!("{}{n}\r\n", t as char).into_bytes();
                for i in items {
                    out.extend_from_slice(i);
                }
                out
            })
    })
}

fn resp_reply() -> impl Strategy<Value = Valid> {
    use Outcome::*;
    let r = |kind, bytes, outcome| Valid::new(Proto::Resp, kind, bytes, outcome);
    let simple = line_text().prop_map(|t| format!("+{t}\r\n").into_bytes());
    let error = line_text().prop_map(|t| format!("-ERR {t}\r\n").into_bytes());
    prop_oneof![
        simple.prop_map(move |b| r(Kind::Set, b, Ok)),
        (error, prop::sample::select(ALL_KINDS.to_vec())).prop_map(move |(b, k)| r(
            k,
            b,
            ServerError
        )),
        (
            int(),
            prop::sample::select(vec![Kind::Delete, Kind::Incr, Kind::Touch, Kind::Exists])
        )
            .prop_map(move |(i, k)| {
                let outcome = match (k, i > 0) {
                    (Kind::Exists | Kind::Delete, true) => Hit,
                    (Kind::Exists | Kind::Delete, false) => Miss,
                    _ => Ok,
                };
                r(k, format!(":{i}\r\n").into_bytes(), outcome)
            }),
        (payload(), any::<bool>()).prop_map(move |(v, gets)| {
            let mut b = Vec::new();
            let range = bulk(&mut b, &v);
            let kind = if gets { Kind::Gets } else { Kind::Get };
            Valid {
                value: Some(range),
                ..r(kind, b, Hit)
            }
        }),
        prop::sample::select(vec![&b"$-1\r\n"[..], b"_\r\n"]).prop_map(move |b| r(
            Kind::Get,
            b.to_vec(),
            Miss
        )),
        prop::collection::vec(prop::option::of(payload()), 1..6).prop_map(move |items| {
            let mut b = format!("*{}\r\n", items.len()).into_bytes();
            for i in &items {
                match i {
                    Some(v) => {
                        bulk(&mut b, v);
                    }
                    None => b.extend_from_slice(b"$-1\r\n"),
                }
            }
            let outcome = if items.iter().all(Option::is_some) {
                Hit
            } else {
                Miss
            };
            r(Kind::MGet(items.len() as u32), b, outcome)
        }),
        resp_tree()
            .prop_filter("a template's reply that is not an error", |b| b[0] != b'-')
            .prop_map(move |b| r(Kind::Template, b, Ok)),
    ]
}

/// A RESP reply preceded by an out-of-band push or an attribute, which are skipped.
fn resp_with_extras() -> impl Strategy<Value = Valid> {
    (resp_reply(), 0..3u8).prop_map(|(mut v, extra)| {
        let head: &[u8] = match extra {
            0 => b"",
            1 => b">2\r\n+invalidate\r\n*1\r\n$1\r\nk\r\n",
            _ => b"|1\r\n+ttl\r\n:3\r\n",
        };
        if extra == 2 && v.kind == Kind::Template {
            return v; // an attribute before an aggregate's own attribute: keep it simple
        }
        let mut bytes = head.to_vec();
        bytes.extend_from_slice(&v.bytes);
        v.value = v.value.map(|r| r.start + head.len()..r.end + head.len());
        v.bytes = bytes;
        v
    })
}

fn text_value(out: &mut Vec<u8>, key: &str, v: &[u8], cas: bool) -> Range<usize> {
    let cas = if cas { " 77" } else { "" };
    out.extend_from_slice(format!("VALUE {key} 0 {}{cas}\r\n", v.len()).as_bytes());
    let start = out.len();
    out.extend_from_slice(v);
    out.extend_from_slice(b"\r\n");
    start..start + v.len()
}

fn text_reply() -> impl Strategy<Value = Valid> {
    use Outcome::*;
    let t = |kind, bytes: &[u8], outcome| Valid::new(Proto::Text, kind, bytes.to_vec(), outcome);
    prop_oneof![
        (payload(), any::<bool>()).prop_map(move |(v, cas)| {
            let mut b = Vec::new();
            let range = text_value(&mut b, "cm:k:1", &v, cas);
            b.extend_from_slice(b"END\r\n");
            Valid {
                value: Some(range),
                ..t(if cas { Kind::Gets } else { Kind::Get }, &b, Hit)
            }
        }),
        Just(t(Kind::Get, b"END\r\n", Miss)),
        Just(t(Kind::Exists, b"END\r\n", Miss)),
        (prop::collection::vec(payload(), 0..5), 0..3u32).prop_map(move |(vals, extra)| {
            let mut b = Vec::new();
            for (i, v) in vals.iter().enumerate() {
                text_value(&mut b, &format!("k{i}"), v, false);
            }
            b.extend_from_slice(b"END\r\n");
            let n = vals.len() as u32 + extra;
            let outcome = if extra == 0 { Hit } else { Miss };
            t(
                Kind::MGet(n.max(1)),
                &b,
                if n == 0 { Miss } else { outcome },
            )
        }),
        Just(t(Kind::Set, b"STORED\r\n", Ok)),
        Just(t(Kind::Set, b"NOT_STORED\r\n", ServerError)),
        Just(t(Kind::Delete, b"DELETED\r\n", Hit)),
        Just(t(Kind::Delete, b"NOT_FOUND\r\n", Miss)),
        prop::sample::select(vec![&b"TOUCHED\r\n"[..], b"NOT_FOUND\r\n"]).prop_map(move |b| t(
            Kind::Touch,
            b,
            Ok
        )),
        any::<u64>().prop_map(move |n| t(Kind::Incr, format!("{n}\r\n").as_bytes(), Ok)),
        Just(t(Kind::Incr, b"NOT_FOUND\r\n", Miss)),
        (line_text(), prop::sample::select(ALL_KINDS.to_vec())).prop_map(move |(m, k)| {
            t(k, format!("SERVER_ERROR {m}\r\n").as_bytes(), ServerError)
        }),
        Just(t(
            Kind::Get,
            b"CLIENT_ERROR bad command line format\r\n",
            ServerError
        )),
        Just(t(Kind::Set, b"ERROR\r\n", ServerError)),
    ]
}

fn meta_value(out: &mut Vec<u8>, v: &[u8], flags: &str) -> Range<usize> {
    out.extend_from_slice(format!("VA {}{flags}\r\n", v.len()).as_bytes());
    let start = out.len();
    out.extend_from_slice(v);
    out.extend_from_slice(b"\r\n");
    start..start + v.len()
}

fn meta_reply() -> impl Strategy<Value = Valid> {
    use Outcome::*;
    let m = |kind, bytes: &[u8], outcome| Valid::new(Proto::Meta, kind, bytes.to_vec(), outcome);
    prop_oneof![
        (
            payload(),
            prop::sample::select(vec!["", " c123", " t-1 f0"])
        )
            .prop_map(move |(v, flags)| {
                let mut b = Vec::new();
                let range = meta_value(&mut b, &v, flags);
                Valid {
                    value: Some(range),
                    ..m(Kind::Get, &b, Hit)
                }
            }),
        Just(m(Kind::Get, b"EN\r\n", Miss)),
        Just(m(Kind::Exists, b"HD\r\n", Hit)),
        Just(m(Kind::Exists, b"EN\r\n", Miss)),
        Just(m(Kind::Set, b"HD\r\n", Ok)),
        Just(m(Kind::Set, b"NS\r\n", ServerError)),
        Just(m(Kind::Delete, b"HD\r\n", Hit)),
        Just(m(Kind::Delete, b"NF\r\n", Miss)),
        Just(m(Kind::Incr, b"HD\r\n", Ok)),
        Just(m(Kind::Incr, b"NF\r\n", Miss)),
        (prop::collection::vec(prop::option::of(payload()), 1..5)).prop_map(move |items| {
            // Hits as quiet VA blocks; a server that ignores `q` says EN for a miss.
            let mut b = Vec::new();
            for i in &items {
                match i {
                    Some(v) => {
                        meta_value(&mut b, v, "");
                    }
                    None => b.extend_from_slice(b"EN\r\n"),
                }
            }
            b.extend_from_slice(b"MN\r\n");
            let outcome = if items.iter().all(Option::is_some) {
                Hit
            } else {
                Miss
            };
            m(Kind::MGet(items.len() as u32), &b, outcome)
        }),
        line_text().prop_map(move |t| m(
            Kind::Get,
            format!("SERVER_ERROR {t}\r\n").as_bytes(),
            ServerError
        )),
    ]
}

/// A binary response frame; returns where its value lies.
fn binary_frame(
    out: &mut Vec<u8>,
    opcode: u8,
    status: u16,
    extras: &[u8],
    key: &[u8],
    value: &[u8],
) -> Range<usize> {
    out.extend_from_slice(&[0x81, opcode]);
    out.extend_from_slice(&(key.len() as u16).to_be_bytes());
    out.extend_from_slice(&[extras.len() as u8, 0]);
    out.extend_from_slice(&status.to_be_bytes());
    out.extend_from_slice(&((extras.len() + key.len() + value.len()) as u32).to_be_bytes());
    out.extend_from_slice(&[7; 12]); // opaque and CAS: any
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    let start = out.len();
    out.extend_from_slice(value);
    start..out.len()
}

fn binary_reply() -> impl Strategy<Value = Valid> {
    use memcache_binary::{
        OP_DELETE, OP_GET, OP_GETKQ, OP_INCREMENT, OP_NOOP, OP_SASL_AUTH, OP_SET, OP_TOUCH,
    };
    use Outcome::*;
    let one = |kind, opcode, status, value: &[u8], outcome| {
        let mut b = Vec::new();
        binary_frame(&mut b, opcode, status, &[], b"", value);
        Valid::new(Proto::Binary, kind, b, outcome)
    };
    prop_oneof![
        payload().prop_map(|v| {
            let mut b = Vec::new();
            let range = binary_frame(&mut b, OP_GET, 0, &[0, 0, 0, 0], b"", &v);
            Valid {
                value: Some(range),
                ..Valid::new(Proto::Binary, Kind::Get, b, Outcome::Hit)
            }
        }),
        Just(one(Kind::Get, OP_GET, 1, b"Not found", Miss)),
        Just(one(Kind::Set, OP_SET, 0, b"", Ok)),
        line_text().prop_map(move |t| one(Kind::Set, OP_SET, 5, t.as_bytes(), ServerError)),
        Just(one(Kind::Delete, OP_DELETE, 0, b"", Hit)),
        Just(one(Kind::Delete, OP_DELETE, 1, b"", Miss)),
        prop::sample::select(vec![0u16, 1]).prop_map(move |st| one(
            Kind::Touch,
            OP_TOUCH,
            st,
            b"",
            Ok
        )),
        int().prop_map(move |n| one(Kind::Incr, OP_INCREMENT, 0, &n.to_be_bytes(), Ok)),
        Just(one(Kind::Incr, OP_INCREMENT, 1, b"Not found", Miss)),
        Just(one(Kind::Setup, OP_SASL_AUTH, 0, b"Authenticated", Ok)),
        Just(one(
            Kind::Setup,
            OP_SASL_AUTH,
            0x20,
            b"Auth failure.",
            ServerError
        )),
        Just(one(Kind::Get, OP_GET, 0x20, b"Auth failure.", ServerError)),
        (prop::collection::vec(prop::option::of(payload()), 1..5)).prop_map(move |items| {
            // quiet GETKQ: hits only, then the NOOP's reply
            let mut b = Vec::new();
            for (i, v) in items.iter().enumerate() {
                if let Some(v) = v {
                    binary_frame(&mut b, OP_GETKQ, 0, &[0; 4], format!("k:{i}").as_bytes(), v);
                }
            }
            binary_frame(&mut b, OP_NOOP, 0, &[], b"", b"");
            let outcome = if items.iter().all(Option::is_some) {
                Hit
            } else {
                Miss
            };
            Valid::new(Proto::Binary, Kind::MGet(items.len() as u32), b, outcome)
        }),
    ]
}

fn any_valid() -> impl Strategy<Value = Valid> {
    prop_oneof![
        resp_with_extras(),
        text_reply(),
        meta_reply(),
        binary_reply()
    ]
}

/// The parse of a whole valid reply: its expected outcome, all of it consumed.
fn check_whole(v: &Valid, got: &Parse) {
    let Parse::Done(r) = got else {
        panic!("{:?}: {got:?}", String::from_utf8_lossy(&v.bytes))
    };
    assert_eq!(r.consumed, v.bytes.len(), "{v:?}");
    assert_eq!(r.outcome, v.outcome, "{v:?}");
    if v.value.is_some() {
        assert_eq!(r.value, v.value, "{v:?}");
    }
}

/// Feeds `bytes` in the given chunks as the engine does — parsing only once the buffer
/// holds what the last `Need` asked for — and returns the first complete parse.
fn feed(v: &Valid, bytes: &[u8], cuts: &[usize]) -> Parse {
    let mut need = 0;
    let mut ends: Vec<usize> = cuts
        .iter()
        .copied()
        .filter(|&c| c > 0 && c < bytes.len())
        .collect();
    ends.sort_unstable();
    ends.push(bytes.len());
    for end in ends {
        if end < need {
            continue;
        }
        match parse(v.proto, &bytes[..end], v.kind) {
            Parse::Need(n) => {
                assert!(n > end, "Need({n}) with {end} bytes");
                need = n;
            }
            done => return done,
        }
    }
    panic!("never complete: {v:?}")
}

proptest! {
    #![proptest_config(cases())]

    #[test]
    fn any_bytes_keep_the_contract(
        buf in prop::collection::vec(
            prop_oneof![any::<u8>(), prop::sample::select(b"$*:+-_,#!=(%~>|\r\n0123456789 VALUEND".to_vec())],
            0..96,
        ),
        k in 0..ALL_KINDS.len(),
    ) {
        check_parsers(&buf, ALL_KINDS[k], &Limits::default());
        check_parsers(&buf, ALL_KINDS[k], &Limits { max_line: 16, max_bulk: 32, max_elements: 4, max_depth: 2 });
    }

    #[test]
    fn valid_replies_parse_to_their_outcome(v in any_valid()) {
        check_whole(&v, &parse(v.proto, &v.bytes, v.kind));
    }

    #[test]
    fn truncations_ask_for_more_but_never_past_the_reply(v in any_valid()) {
        for cut in 0..v.bytes.len() {
            match parse(v.proto, &v.bytes[..cut], v.kind) {
                Parse::Need(n) => prop_assert!(
                    n > cut && n <= v.bytes.len(),
                    "{:?} cut at {cut}: Need({n}) of {}", String::from_utf8_lossy(&v.bytes), v.bytes.len()
                ),
                other => prop_assert!(false, "{:?} cut at {cut}: {other:?}", String::from_utf8_lossy(&v.bytes)),
            }
        }
    }

    #[test]
    fn split_at_every_boundary_gives_the_same_reply(v in any_valid()) {
        let whole = parse(v.proto, &v.bytes, v.kind);
        for cut in 1..v.bytes.len() {
            prop_assert_eq!(&feed(&v, &v.bytes, &[cut]), &whole);
        }
    }

    #[test]
    fn random_chunks_and_a_following_reply_change_nothing(
        v in any_valid(),
        next in any_valid(),
        cuts in prop::collection::vec(0usize..400, 0..8),
    ) {
        let mut stream = v.bytes.clone();
        stream.extend_from_slice(&next.bytes);
        let got = feed(&v, &stream, &cuts);
        check_whole(&v, &got);
    }

    #[test]
    fn mutations_of_valid_replies_keep_the_contract(
        v in any_valid(),
        edits in prop::collection::vec((0usize..4, any::<prop::sample::Index>(), any::<u8>()), 1..4),
        k in 0..ALL_KINDS.len(),
    ) {
        let mut b = v.bytes.clone();
        for (op, at, byte) in edits {
            let i = at.index(b.len().max(1)).min(b.len());
            match op {
                0 if i < b.len() => b[i] = byte,
                1 => b.insert(i, byte),
                2 if i < b.len() => { b.remove(i); }
                _ => { let tail = b[i..].to_vec(); b.extend_from_slice(&tail[..tail.len().min(8)]); }
            }
        }
        let lim = Limits::default();
        check_parsers(&b, v.kind, &lim);
        check_parsers(&b, ALL_KINDS[k], &lim);
    }
}
