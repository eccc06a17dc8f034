//! The trace format's record, as the capture produces it: cachemark's op codes and one
//! request's fields (docs/traces.md). The key hash is `cachemark_trace::key_hash`, defined
//! once for the capture and the simulator.

/// cachemark's op codes (`workload/traces/record.py` OPS).
pub const OP_GET: u8 = 0;
pub const OP_SET: u8 = 1;
pub const OP_DELETE: u8 = 2;
pub const OP_EXISTS: u8 = 3;
pub const OP_INCR: u8 = 6;

/// The op names of the trace format, by op code.
pub const OP_NAMES: [&str; 7] = [
    "get", "set", "delete", "exists", "get_many", "set_many", "incr",
];

/// One request as the trace records it.
#[derive(Clone, Debug, PartialEq)]
pub struct Rec {
    pub t_us: i64,
    pub op: u8,
    pub key: Vec<u8>,
    pub value_size: u32,
    pub ttl_s: u32,
    pub client: u32,
}
