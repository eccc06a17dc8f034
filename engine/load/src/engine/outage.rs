//! Write outages, as the Python workers keep them (`src/cachemark/measure/outage.py`): per
//! load thread, a window opens at the first failed write, takes in every failed op after it,
//! and closes at the next write that succeeds, noting where that write went (a Sentinel
//! target's new primary). In a Redis Cluster a window is about the keys of one primary of the
//! map read at the start (its `scope`): writes to the other nodes' keys, which go on during
//! a node's failover, neither open nor close it. Times are the run's clock (`Shared::now`); `run.rs` turns them into
//! CLOCK_MONOTONIC (Python's `perf_counter_ns`) so `merge_outages` joins them like workers'.
//!
//! The cost to the load: a branch on the error path, and on completed replies one compare
//! (is a window open?) — a closed window costs nothing else.

use super::result::WriteOutage;

/// Windows kept per thread and call: a flapping server must not grow the result without end.
pub(super) const MAX_WINDOWS: usize = 50;

/// One closed (or, at the end, unrecovered) window.
#[derive(Clone)]
pub(super) struct Window {
    pub(super) first: u64,
    pub(super) last: u64,
    pub(super) recovered: Option<u64>,
    pub(super) failed_writes: u64,
    pub(super) errors: u64,
    pub(super) server: Option<String>,
}

/// One load thread's write outages in one engine call.
#[derive(Default)]
pub(super) struct Outages {
    /// When the open window's first failed write was sent; 0: no window is open.
    first: u64,
    last: u64,
    failed_writes: u64,
    errors: u64,
    /// Whose keys the open window is about (`scope` of `failed`).
    scope: u16,
    pub(super) windows: Vec<Window>,
}

impl Outages {
    /// Whether a window is open (the only check a successful reply pays).
    #[inline]
    pub(super) fn open(&self) -> bool {
        self.first != 0
    }

    /// A timed op failed: sent at `t0`, failed at `t1`, on a key of `scope` (a cluster's
    /// primary at the start; 0 for other runs). A write opens a window; any failure inside
    /// one is one of its errors.
    pub(super) fn failed(&mut self, t0: u64, t1: u64, write: bool, scope: u16) {
        if write {
            if self.first == 0 {
                self.first = t0.max(1);
                self.scope = scope;
            }
            self.last = t1.max(self.first);
            self.failed_writes += 1;
        }
        if self.first != 0 {
            self.errors += 1;
        }
    }

    /// A write on a key of `scope` succeeded at `t1` against `server`: the open window about
    /// that scope closes.
    pub(super) fn succeeded(&mut self, t1: u64, server: &str, scope: u16) {
        if scope == self.scope {
            self.close(Some((t1, server)));
        }
    }

    fn close(&mut self, recovered: Option<(u64, &str)>) {
        if self.windows.len() < MAX_WINDOWS {
            self.windows.push(Window {
                first: self.first,
                last: self.last,
                recovered: recovered.map(|r| r.0),
                failed_writes: self.failed_writes,
                errors: self.errors,
                server: recovered.map(|r| r.1.to_string()),
            });
        }
        (self.first, self.last, self.failed_writes, self.errors) = (0, 0, 0, 0);
    }

    /// At the end of the call: a window still open ends unrecovered.
    pub(super) fn finish(&mut self) {
        if self.open() {
            self.close(None);
        }
    }
}

impl Window {
    /// The window as one of the result's `write_outages`, its times moved by `offset` ns onto
    /// CLOCK_MONOTONIC.
    pub(super) fn result(&self, offset: u64) -> WriteOutage {
        WriteOutage {
            errors: self.errors,
            failed_writes: self.failed_writes,
            first_ns: self.first + offset,
            last_ns: self.last + offset,
            recovered_ns: self.recovered.map(|t| t + offset),
            server: self.server.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_window_runs_from_the_first_failed_write_to_the_last() {
        let mut o = Outages::default();
        o.failed(10, 11, false, 0); // a failed read alone opens nothing
        assert!(!o.open());
        o.failed(100, 110, true, 0);
        o.failed(120, 130, false, 0); // a read inside the window is one of its errors
        o.failed(200, 210, true, 0);
        o.succeeded(500, "127.0.0.1:2", 0);
        assert!(!o.open());
        o.failed(900, 910, true, 0); // never recovers
        o.finish();
        let outages: Vec<WriteOutage> = o.windows.iter().map(|w| w.result(1_000)).collect();
        assert_eq!(
            serde_json::to_value(outages).unwrap(),
            json!([
                {"first_ns": 1100, "last_ns": 1210, "recovered_ns": 1500, "failed_writes": 2,
                 "errors": 3, "server": "127.0.0.1:2"},
                {"first_ns": 1900, "last_ns": 1910, "recovered_ns": null, "failed_writes": 1,
                 "errors": 1, "server": null},
            ])
        );
    }

    #[test]
    fn a_cluster_window_closes_on_a_write_to_the_keys_that_failed() {
        let mut o = Outages::default();
        o.failed(100, 110, true, 2); // a write to primary 2's keys failed
        o.succeeded(150, "127.0.0.1:1", 1); // primary 1's keys go on: still open
        assert!(o.open());
        o.succeeded(400, "127.0.0.1:4", 2); // primary 2's keys, on the replica promoted
        assert!(!o.open());
        assert_eq!(o.windows[0].server.as_deref(), Some("127.0.0.1:4"));
        assert_eq!(o.windows[0].recovered, Some(400));
    }

    #[test]
    fn at_most_fifty_windows() {
        let mut o = Outages::default();
        for i in 1..=60u64 {
            o.failed(i * 10, i * 10 + 1, true, 0);
            o.succeeded(i * 10 + 5, "s", 0);
        }
        assert_eq!(o.windows.len(), MAX_WINDOWS);
        assert!(!o.open());
    }
}
