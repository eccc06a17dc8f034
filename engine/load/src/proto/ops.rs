//! What a request is made of, as the plan describes it and the encoders read it: the protocol,
//! the ops of the mix and their templates. Here, below the configuration, so that the encoders
//! need nothing of `config/` and `config/` builds its plan from these (no import circle).

use super::Kind;
use serde::Deserialize;

#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    Resp2,
    Resp3,
    MemcacheText,
    MemcacheMeta,
    MemcacheBinary,
}

impl Protocol {
    pub fn is_resp(self) -> bool {
        matches!(self, Protocol::Resp2 | Protocol::Resp3)
    }
}

/// One piece of a template argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seg {
    Lit(Vec<u8>),
    Key,
    Value,
    Ttl,
    Len,
}

/// One op of the mix, ready to encode.
#[derive(Clone, Debug)]
pub struct OpPlan {
    /// The name results are reported under.
    pub name: String,
    pub kind: Kind,
    /// Template arguments (RESP: one bulk each; memcached: words of one line, with a
    /// lone `{value}` sent as the data block).
    pub template: Vec<Vec<Seg>>,
    /// Whether the op writes a value (so it draws a size).
    pub writes_value: bool,
    /// Whether a failure of it opens a write outage (`engine/outage.rs`): `set`, `incr`,
    /// and templates that carry a value — the ops the Python workers count as writes.
    pub write: bool,
}
