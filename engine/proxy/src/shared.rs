//! What the proxy and its pumps share, below both: the counters `stats()` reads, the state of
//! the whole proxy (upstream, configuration, the shared link's schedule) and of one connection
//! (its faults), and the direction of a pump. [`crate::proxy`] builds them; [`crate::pump`]
//! reads and updates them on every segment.
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use tokio::sync::watch;

use crate::capture::{ConnTap, Tap};
use crate::config::Config;
use crate::spare::SpareCore;
use crate::spin::Spin;

/// Wake-up lateness samples above this are preemption, not timer latency: ignore them.
const MAX_LATENESS_SAMPLE_NS: u64 = 200_000;

/// Upper edges (µs) of the release-lateness buckets: early/on time, then ever later.
pub const LATE_EDGES_US: [u64; 8] = [0, 10, 30, 100, 300, 1_000, 3_000, 10_000];

/// Counters the Python side reads with `stats()`. All monotonic except `connections_active`.
#[derive(Default)]
pub struct Stats {
    pub connections_total: AtomicU64,
    pub connections_active: AtomicI64,
    pub bytes_up: AtomicU64,
    pub bytes_down: AtomicU64,
    pub bytes_dropped: AtomicU64,
    pub upstream_errors: AtomicU64,
    pub faults_reset: AtomicU64,
    pub faults_blackhole: AtomicU64,
    pub faults_stall: AtomicU64,
    /// Segments that went through the delay queue, and how far from their due time they
    /// were written (signed: negative = early), to report the delay actually applied.
    pub segments_delayed: AtomicU64,
    pub release_error_sum_ns: AtomicI64,
    pub release_error_max_ns: AtomicI64,
    pub release_error_min_ns: AtomicI64,
    /// How late delayed segments left, bucketed by [`LATE_EDGES_US`] (last = beyond).
    pub release_late: [AtomicU64; LATE_EDGES_US.len() + 1],
    /// Estimated timer wake-up latency (EWMA); timers are armed this much early.
    pub wake_lateness_ns: AtomicU64,
}

impl Stats {
    pub(crate) fn new() -> Stats {
        let s = Stats::default();
        s.release_error_max_ns.store(i64::MIN, Relaxed);
        s.release_error_min_ns.store(i64::MAX, Relaxed);
        s
    }
}

/// A plain copy of [`Stats`].
#[derive(Debug, Clone, Default)]
pub struct StatsSnapshot {
    pub connections_total: u64,
    pub connections_active: i64,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub bytes_dropped: u64,
    pub upstream_errors: u64,
    pub faults_reset: u64,
    pub faults_blackhole: u64,
    pub faults_stall: u64,
    pub segments_delayed: u64,
    pub release_error_mean_ns: i64,
    pub release_error_max_ns: i64,
    pub release_error_min_ns: i64,
    pub release_late: Vec<u64>,
    pub wake_lateness_ns: u64,
}

pub(crate) struct Shared {
    pub(crate) stats: Stats,
    pub(crate) upstream: SocketAddr,
    pub(crate) cfg_rx: watch::Receiver<Arc<Config>>,
    /// Capturing: every segment read is also handed to the tap (never waited on).
    pub(crate) tap: Option<Arc<Tap>>,
    /// With a shared link cap (`link_bps`): when each direction's link is next free, in
    /// `now_ns` time; every connection's pieces queue for it in the order they arrive.
    link_free: [AtomicU64; 2],
    /// Whether the machine has a core for spinning.
    pub(crate) spare: SpareCore,
}

impl Shared {
    pub(crate) fn new(
        upstream: SocketAddr,
        cfg_rx: watch::Receiver<Arc<Config>>,
        tap: Option<Arc<Tap>>,
    ) -> Shared {
        Shared {
            stats: Stats::new(),
            upstream,
            cfg_rx,
            tap,
            link_free: [AtomicU64::new(0), AtomicU64::new(0)],
            spare: SpareCore::new(),
        }
    }

    /// Reserves the shared link of `dir` for `tx_ns` from `ready_ns` (or from when it is next
    /// free); returns when the piece has left it.
    pub(crate) fn take_link(&self, dir: Dir, ready_ns: u64, tx_ns: u64) -> u64 {
        let link = &self.link_free[dir as usize];
        let before = link
            .fetch_update(Relaxed, Relaxed, |free| Some(free.max(ready_ns) + tx_ns))
            .expect("the update always stores");
        before.max(ready_ns) + tx_ns
    }

    pub(crate) fn observe_wake(&self, sample_ns: u64) {
        if sample_ns > MAX_LATENESS_SAMPLE_NS {
            return;
        }
        // EWMA, weight 1/8; the read-modify-write races between pumps are harmless.
        let old = self.stats.wake_lateness_ns.load(Relaxed) as i64;
        let new = old + (sample_ns as i64 - old) / 8;
        self.stats
            .wake_lateness_ns
            .store(new.max(0) as u64, Relaxed);
    }

    pub(crate) fn record_release(&self, error_ns: i64) {
        self.stats.segments_delayed.fetch_add(1, Relaxed);
        self.stats.release_error_sum_ns.fetch_add(error_ns, Relaxed);
        self.stats.release_error_max_ns.fetch_max(error_ns, Relaxed);
        self.stats.release_error_min_ns.fetch_min(error_ns, Relaxed);
        let late_us = (error_ns.max(0) as u64).div_ceil(1000);
        let bucket = LATE_EDGES_US
            .iter()
            .position(|&edge| late_us <= edge)
            .unwrap_or(LATE_EDGES_US.len());
        self.stats.release_late[bucket].fetch_add(1, Relaxed);
    }
}

/// Fault state one connection's pumps consult on every segment.
#[derive(Default)]
pub(crate) struct ConnState {
    pub(crate) blackhole: AtomicBool,
    pub(crate) stall_until_ns: AtomicU64,
    /// When to stay awake between segments (both pumps learn from every read).
    pub(crate) spin: Spin,
    /// This connection's handle on the capture tap, when capturing.
    pub(crate) tap: Option<ConnTap>,
}

#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) enum Dir {
    Up,
    Down,
}
