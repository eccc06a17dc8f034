//! Capture: the proxy's optional tap, and the recorder that turns tapped bytes into trace records.
//!
//! By job:
//! - reading — [`tap`] (the pumps' cheap copy of each segment), [`recorder`] (per-connection
//!   streams ([`stream`]), requests matched to their replies, records handed out in time order) and the
//!   wire parsers it uses: [`parse`] (shared helpers), [`resp`] (RESP2/3) and [`memcached`]
//!   (text and meta);
//! - the trace format — [`format`]: the op codes and the record;
//! - writing — [`writer`]: one `#cachemark-trace/1` line per record.
//!
//! The pumps must never wait for the recorder: they append to the tap, and parsing happens
//! when the owner drains ([`Capture::drain`], every ~100 ms from Python, with the GIL
//! released). Values are never kept: only their sizes.
use std::sync::{Arc, Mutex};

pub mod format;
pub mod memcached;
pub mod parse;
pub mod recorder;
pub mod resp;
pub mod stream;
pub mod tap;
pub mod writer;

pub use format::{Rec, OP_DELETE, OP_EXISTS, OP_GET, OP_INCR, OP_NAMES, OP_SET};
pub use recorder::{CaptureCounts, Protocol, Recorder};
pub use tap::{ConnTap, Tap, DEFAULT_TAP_BYTES};

/// The tap plus its recorder: what a capturing proxy holds.
pub struct Capture {
    pub tap: Arc<Tap>,
    recorder: Mutex<Recorder>,
}

/// One drain: trace lines ready to append to a `#cachemark-trace/1` file.
pub struct Drained {
    pub lines: Vec<u8>,
    pub count: usize,
    /// Records per op code.
    pub per_op: [u64; OP_NAMES.len()],
}

impl Capture {
    /// `tap_bytes`: what the tap may hold between drains ([`DEFAULT_TAP_BYTES`]).
    pub fn new(protocol: Protocol, tap_bytes: usize) -> Capture {
        Capture {
            tap: Arc::new(Tap::new(tap_bytes)),
            recorder: Mutex::new(Recorder::new(protocol)),
        }
    }

    /// Parse what was tapped and format the records ready so far (all of them if `last`)
    /// as trace lines: keys hashed, and also kept (percent-encoded) if `raw_keys`.
    pub fn drain(&self, last: bool, raw_keys: bool) -> Drained {
        let mut rec = self.recorder.lock().unwrap_or_else(|e| e.into_inner());
        rec.feed_from(&self.tap);
        let ready = rec.take_ready(last);
        let mut out = Drained {
            lines: Vec::with_capacity(ready.len() * 64),
            count: ready.len(),
            per_op: [0; OP_NAMES.len()],
        };
        for r in &ready {
            out.per_op[r.op as usize] += 1;
            writer::trace_line(&mut out.lines, r, raw_keys);
        }
        out
    }

    pub fn counts(&self) -> CaptureCounts {
        self.recorder
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .counts
            .clone()
    }
}
