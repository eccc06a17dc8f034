//! The connection tap: the pumps' side of a capture, cheap appends that never block on parsing.
//!
//! The tap is a byte-capped buffer behind an uncontended mutex: a pump appends a copy of each
//! segment it read (one `memcpy`; no allocation, wake-up or system call) and, if the buffer
//! is full, drops it and stops tapping that connection (its parse would be out of step),
//! counting what it dropped.
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// Tapped bytes held between drains, by default, before segments are dropped.
pub const DEFAULT_TAP_BYTES: usize = 64 * 1024 * 1024;

pub(super) enum Event {
    /// `len` bytes at `start` of [`Tapped::bytes`].
    Data {
        conn: u32,
        up: bool,
        t_ns: u64,
        start: usize,
        len: usize,
    },
    Closed(u32),
}

/// Segments in arrival order, their bytes back to back in one buffer: a pump's copy is one
/// `memcpy` into capacity kept from drain to drain (two buffers swap), with no allocation.
#[derive(Default)]
pub(super) struct Tapped {
    pub(super) events: Vec<Event>,
    pub(super) bytes: Vec<u8>,
}

/// One connection's handle on the tap, owned by its two pumps.
pub struct ConnTap {
    pub id: u32,
    broken: AtomicBool,
}

/// The pumps' side: cheap appends, never blocking on parsing.
pub struct Tap {
    tapped: Mutex<Tapped>,
    /// Bytes held between drains before segments are dropped.
    limit: usize,
    next_conn: AtomicU32,
    pub dropped_segments: AtomicU64,
    pub dropped_bytes: AtomicU64,
}

impl Tap {
    pub fn new(limit: usize) -> Tap {
        Tap {
            tapped: Mutex::new(Tapped::default()),
            limit,
            next_conn: AtomicU32::new(0),
            dropped_segments: AtomicU64::new(0),
            dropped_bytes: AtomicU64::new(0),
        }
    }

    pub fn open(&self) -> ConnTap {
        ConnTap {
            id: self.next_conn.fetch_add(1, Relaxed) + 1,
            broken: AtomicBool::new(false),
        }
    }

    /// A copy of one segment as it arrived (`t_ns`: CLOCK_MONOTONIC).
    pub fn segment(&self, conn: &ConnTap, up: bool, t_ns: u64, data: &[u8]) {
        if !conn.broken.load(Relaxed) {
            if let Ok(mut t) = self.tapped.lock() {
                let start = t.bytes.len();
                if start + data.len() <= self.limit {
                    t.bytes.extend_from_slice(data);
                    t.events.push(Event::Data {
                        conn: conn.id,
                        up,
                        t_ns,
                        start,
                        len: data.len(),
                    });
                    return;
                }
            }
            conn.broken.store(true, Relaxed);
        }
        self.dropped_segments.fetch_add(1, Relaxed);
        self.dropped_bytes.fetch_add(data.len() as u64, Relaxed);
    }

    pub fn closed(&self, conn: &ConnTap) {
        if let Ok(mut t) = self.tapped.lock() {
            t.events.push(Event::Closed(conn.id));
        }
    }

    /// Swap what was tapped into `into` (emptied first: its capacity goes back to the pumps).
    pub(super) fn take(&self, into: &mut Tapped) {
        into.events.clear();
        into.bytes.clear();
        if let Ok(mut t) = self.tapped.lock() {
            std::mem::swap(&mut *t, into);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_tap_drops_and_stops_tapping_that_connection() {
        let tap = Tap::new(10);
        let (a, b) = (tap.open(), tap.open());
        tap.segment(&a, true, 1, b"GET k\r\n");
        tap.segment(&a, true, 2, b"GET longer\r\n"); // over the limit: dropped
        tap.segment(&a, true, 3, b"x"); // would fit, but this connection is out of step now
        tap.segment(&b, true, 4, b"GET z\r\n"); // too: 7 + 7 > 10
        assert_eq!(tap.dropped_segments.load(Relaxed), 3);
        let mut got = Tapped::default();
        tap.take(&mut got);
        assert_eq!(
            (got.events.len(), got.bytes.as_slice()),
            (1, &b"GET k\r\n"[..])
        );
        tap.segment(&b, true, 5, b"x");
        tap.take(&mut got);
        assert!(
            got.events.is_empty(),
            "b dropped a segment: no longer tapped"
        );
    }
}
