//! What the orchestrating thread and the load threads share while a run lasts: the run's clock,
//! the stop flag, the start, the counts the on-error watch reads, the nodes a cluster gained.
//! A module of its own, so that `run.rs` (which makes it) and `worker/` (which reads it) do
//! not import each other.

use super::record::Recorder;
use super::topology;
use crate::watch::Kinds;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// State shared between the orchestrating thread and the load threads.
pub(super) struct Shared {
    epoch: Instant,
    /// CLOCK_MONOTONIC (Python's `perf_counter_ns`) at `epoch`: results given on Python's
    /// clock (write outages) are `now()` readings plus this.
    pub(super) mono_epoch: u64,
    pub(super) stop: AtomicBool,
    pub(super) ready: AtomicUsize,
    /// Start of the run phase (warm-up first), ns since `epoch`; 0 until set.
    pub(super) run_start: AtomicU64,
    /// Ops completed by all threads (every phase), published every tick: the on-error watch.
    ok: AtomicU64,
    failed: [AtomicU64; 6],
    pub(super) last_error: Mutex<Option<String>>,
    /// Redis Cluster: nodes learned during the run (one added and given slots).
    pub(super) joined: topology::Joined,
}

impl Shared {
    pub(super) fn new() -> Self {
        let epoch = Instant::now();
        let mono_epoch = monotonic_ns().saturating_sub(epoch.elapsed().as_nanos() as u64);
        Shared {
            epoch,
            mono_epoch,
            stop: AtomicBool::new(false),
            ready: AtomicUsize::new(0),
            run_start: AtomicU64::new(0),
            ok: AtomicU64::new(0),
            failed: Default::default(),
            last_error: Mutex::new(None),
            joined: topology::Joined::default(),
        }
    }

    #[inline]
    pub(super) fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    pub(super) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Adds a thread's counts since its last publication.
    pub(super) fn publish(&self, rec: &mut Recorder) {
        self.ok
            .fetch_add(std::mem::take(&mut rec.tally_ok), Ordering::Relaxed);
        for (total, n) in self.failed.iter().zip(&mut rec.tally_failed) {
            total.fetch_add(std::mem::take(n), Ordering::Relaxed);
        }
        if let Some(m) = rec.last.take() {
            *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(m);
        }
        rec.want_last = true;
    }

    pub(super) fn totals(&self) -> (u64, Kinds) {
        let failed = std::array::from_fn(|k| self.failed[k].load(Ordering::Relaxed));
        (self.ok.load(Ordering::Relaxed), failed)
    }
}

/// CLOCK_MONOTONIC now, in ns: the clock of Python's `time.perf_counter_ns()` (and of
/// `Instant`, on Linux).
fn monotonic_ns() -> u64 {
    // SAFETY: clock_gettime fills the struct we pass.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn run_clock_converts_to_clock_monotonic() {
        let shared = Shared::new();
        std::thread::sleep(Duration::from_millis(20));
        let ours = shared.now() + shared.mono_epoch;
        let theirs = monotonic_ns();
        assert!(ours.abs_diff(theirs) < 1_000_000, "{ours} vs {theirs}");
    }
}
