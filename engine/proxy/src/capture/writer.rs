//! Writing the trace: one `#cachemark-trace/1` line per record, as the Python `TraceWriter`
//! writes it (the Python side appends the lines to the file).
use std::io::Write;

use cachemark_trace::key_hash;

use super::format::{Rec, OP_NAMES};

/// One `t_us,op,key_hash,key_size,value_size,ttl_s,client[,key]` line, as `TraceWriter` writes it.
pub fn trace_line(out: &mut Vec<u8>, r: &Rec, raw_key: bool) {
    let _ = write!(
        out,
        "{},{},{},{},{},{},{}",
        r.t_us,
        OP_NAMES[r.op as usize],
        key_hash(&r.key),
        r.key.len(),
        r.value_size,
        r.ttl_s,
        r.client
    );
    if raw_key {
        out.push(b',');
        for &b in &r.key {
            if b.is_ascii_alphanumeric() || b"/:;=@!$&'()*+-._~".contains(&b) {
                out.push(b);
            } else {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
    out.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::format::OP_SET;

    #[test]
    fn key_hash_and_lines_match_the_python_writer() {
        let r = Rec {
            t_us: 5,
            op: OP_SET,
            key: b"a,b%\xff".to_vec(),
            value_size: 3,
            ttl_s: 9,
            client: 2,
        };
        let mut out = Vec::new();
        trace_line(&mut out, &r, true);
        let line = String::from_utf8(out).unwrap();
        assert!(line.starts_with("5,set,"), "{line}");
        assert!(line.ends_with(",5,3,9,2,a%2Cb%25%FF\n"), "{line}");
    }
}
