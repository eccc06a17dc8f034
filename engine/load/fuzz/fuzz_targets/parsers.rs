//! Fuzz target: every reply parser, on any bytes, for any request kind, must return
//! Done (within the input), Need (more than it was given) or Bad — never panic.
#![no_main]
use cachemark_load::proto::{check_parsers, Limits, ALL_KINDS};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&k, buf)) = data.split_first() else { return };
    let lim = Limits { max_line: 256, max_bulk: 4096, max_elements: 64, max_depth: 4 };
    check_parsers(buf, ALL_KINDS[k as usize % ALL_KINDS.len()], &lim);
});
