//! When a connection's task stays awake between segments instead of sleeping.
//!
//! On an idle VM the costly part of a proxy hop is not the proxy's work but waking the vCPU
//! it sleeps on: a halted vCPU costs a round trip through the hypervisor, tens of µs, once
//! per segment. So after a read a pump that expects the next segment soon stays runnable —
//! polling its sockets (a zero-timeout `epoll_wait` and a `sched_yield` per turn) — and
//! sleeps as usual otherwise. "Soon" is learnt per connection, the way the kernel's
//! adaptive halt polling learns it: separately for the gap after a read from the client
//! (the server's answer time) and after a read from the server (the client's think time),
//! each window grows while the gaps it sees are short and shrinks while they are long.
//! Request/response traffic thus spins for the server's answer but not through a client's
//! pause, and an idle connection spins at most one window once.
//!
//! Spinning only pays while the core would otherwise halt. When a `sched_yield` takes long,
//! another thread wanted this core (the machine is busy, and its vCPUs are not halting):
//! the connection stops spinning for a while and gives the core to the work under test.
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

/// Longest learnt window: beyond this the next segment is not "soon", and spinning for
/// it would cost more CPU than the wake-up it saves.
pub const MAX_WINDOW_NS: u64 = 200_000;
/// A growing window starts here, then doubles.
const GROW_START_NS: u64 = 25_000;
/// A `sched_yield` that took this long ran another thread: the core is contended.
const CONTENDED_YIELD_NS: u64 = 50_000;
/// How long a contended connection sleeps as usual before it may spin again.
const BACKOFF_NS: u64 = 20_000_000;

/// One connection's spin state, shared by its two pumps (index 0: after a read from the
/// client, 1: after a read from the server).
#[derive(Default)]
pub struct Spin {
    window_ns: [AtomicU64; 2],
    last_read_ns: AtomicU64,
    last_dir: AtomicUsize,
    backoff_until_ns: AtomicU64,
}

impl Spin {
    /// A read (either way) at `now`: learn from the gap since the previous read.
    pub fn on_read(&self, dir: usize, now: u64) {
        let prev = self.last_dir.load(Relaxed);
        let last = self.last_read_ns.load(Relaxed);
        if last > 0 {
            let gap = now.saturating_sub(last);
            let w = &self.window_ns[prev];
            let window = w.load(Relaxed);
            let next = if gap <= window {
                window // spun and caught it: keep the window
            } else if gap <= MAX_WINDOW_NS {
                (window * 2).clamp(GROW_START_NS, MAX_WINDOW_NS)
            } else if window < GROW_START_NS {
                0
            } else {
                window / 2
            };
            w.store(next, Relaxed);
        }
        self.last_read_ns.store(now, Relaxed);
        self.last_dir.store(dir, Relaxed);
    }

    /// When the connection last read anything, either way (CLOCK_MONOTONIC ns).
    pub fn last_read_ns(&self) -> u64 {
        self.last_read_ns.load(Relaxed)
    }

    /// True while spinning is off because the core was contended.
    pub fn backing_off(&self, now: u64) -> bool {
        now < self.backoff_until_ns.load(Relaxed)
    }

    /// Stay awake until this time (CLOCK_MONOTONIC ns); in the past means sleep.
    pub fn until_ns(&self, now: u64) -> u64 {
        if self.backing_off(now) {
            return 0;
        }
        let dir = self.last_dir.load(Relaxed);
        self.last_read_ns.load(Relaxed) + self.window_ns[dir].load(Relaxed)
    }

    /// A spin turn's `sched_yield` took `took_ns`: back off if another thread ran.
    pub fn yielded(&self, took_ns: u64, now: u64) {
        if took_ns >= CONTENDED_YIELD_NS {
            self.backoff_until_ns.store(now + BACKOFF_NS, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: u64 = 1_000;

    #[test]
    fn short_gaps_grow_the_window_and_long_ones_shrink_it() {
        let s = Spin::default();
        let mut t = 1_000_000;
        s.on_read(0, t);
        for _ in 0..4 {
            t += 30 * US; // the server answers in 30 µs
            s.on_read(1, t);
            t += 30 * US; // and the client asks again 30 µs later
            s.on_read(0, t);
        }
        assert!(s.until_ns(t) >= t + 30 * US, "spins for a 30 µs answer");
        for _ in 0..8 {
            t += 5_000 * US; // the client pauses 5 ms between requests
            s.on_read(0, t);
        }
        assert_eq!(s.until_ns(t), t, "no spinning through long pauses");
    }

    #[test]
    fn each_direction_learns_its_own_gap() {
        let s = Spin::default();
        let mut t = 1_000_000;
        for _ in 0..8 {
            s.on_read(0, t); // request
            t += 20 * US;
            s.on_read(1, t); // its reply 20 µs later
            t += 2_000 * US; // the next request 2 ms later
        }
        s.on_read(0, t);
        assert!(s.until_ns(t) >= t + 20 * US, "waits awake for the reply");
        t += 20 * US;
        s.on_read(1, t);
        assert_eq!(s.until_ns(t), t, "sleeps through the client's pause");
    }

    #[test]
    fn a_contended_core_stops_spinning_for_a_while() {
        let s = Spin::default();
        let mut t = 1_000_000;
        for _ in 0..6 {
            s.on_read(0, t);
            t += 10 * US;
        }
        assert!(s.until_ns(t) > t);
        s.yielded(US, t); // a quick yield: nobody else wanted the core
        assert!(!s.backing_off(t));
        s.yielded(CONTENDED_YIELD_NS, t);
        assert_eq!(s.until_ns(t + 1_000 * US), 0);
        assert!(!s.backing_off(t + BACKOFF_NS + 1));
    }
}
