//! Fuzz target: every reply parser, on any bytes, for any request kind, must return
//! Done (within the input), Need (more than it was given) or Bad — never panic.
#![no_main]
use cachemark_load::proto::{memcache, resp, Kind, Limits, Parse};
use libfuzzer_sys::fuzz_target;

const KINDS: [Kind; 10] = [
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

fuzz_target!(|data: &[u8]| {
    let Some((&k, buf)) = data.split_first() else { return };
    let kind = KINDS[k as usize % KINDS.len()];
    let lim = Limits { max_line: 256, max_bulk: 4096, max_elements: 64, max_depth: 4 };
    for r in [resp::parse(buf, kind, &lim), memcache::parse_text(buf, kind, &lim), memcache::parse_meta(buf, kind, &lim)] {
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
});
