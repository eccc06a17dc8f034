//! One direction of one proxied connection: read each segment as it arrives, give it its
//! release time, and write it when that comes.
//!
//! A pump timestamps every read the moment it returns (one read = one segment as it
//! arrived, not a fixed-size buffer), computes its release time
//! `max(previous release, arrival [+ serialisation at the bandwidth cap] + delay + jitter)`
//! and writes it when a [`PreciseTimer`] says so. With nothing configured for a direction
//! and nothing queued, a segment is written straight away with no timer involved, so the
//! zero-delay overhead is one read plus one write. Between segments a pump sleeps, or, while
//! nothing is delayed and the next segment is expected soon, stays awake polling ([`crate::spin`]:
//! learnt windows, or the opt-in fixed `busy_poll_us`), so the next segment costs no
//! wake-up of a halted vCPU.
use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::SeedableRng;
use tokio::sync::watch;

use crate::config::{Config, DirConfig};
use crate::shared::{ConnState, Dir, Shared};
use crate::sock::Sock;
use crate::timer::{now_ns, PreciseTimer};

/// Bytes read per call; a segment larger than what is available is never waited for.
const READ_BUF: usize = 64 * 1024;
/// Bytes a direction may hold before it stops reading, so a slow (capped or delayed)
/// direction pushes back on the sender through TCP flow control like a real window.
const MAX_QUEUED: usize = 4 * 1024 * 1024;

struct Segment {
    release_ns: u64,
    data: Vec<u8>,
}

/// One direction's segments waiting for their release time, and the arithmetic that gives
/// each its time.
struct DelayQueue {
    segs: VecDeque<Segment>,
    bytes: usize,
    last_release: u64,
    /// When this connection's own bandwidth cap is next free.
    link_free: u64,
    rng: SmallRng,
}

impl DelayQueue {
    fn new() -> DelayQueue {
        DelayQueue {
            segs: VecDeque::new(),
            bytes: 0,
            last_release: 0,
            link_free: 0,
            rng: SmallRng::from_entropy(),
        }
    }

    /// Queue what arrived at `arrival`, cut into pieces under a bandwidth cap.
    fn schedule(&mut self, d: &DirConfig, dir: Dir, shared: &Shared, arrival: u64, data: &[u8]) {
        for piece in data.chunks(d.piece_bytes()) {
            let mut sent = arrival;
            if d.bandwidth_bps > 0 {
                self.link_free = self.link_free.max(arrival) + d.tx_ns(piece.len());
                sent = self.link_free;
            }
            if d.link_bps > 0 {
                sent = shared.take_link(dir, sent, d.link_tx_ns(piece.len()));
            }
            let jitter = d.jitter.as_ref().map_or(0, |j| j.sample(&mut self.rng));
            let target = (sent as i64 + d.delay_ns as i64 + jitter).max(arrival as i64) as u64;
            // Never overtake the segment ahead: TCP delivers in order.
            self.last_release = self.last_release.max(target);
            self.segs.push_back(Segment {
                release_ns: self.last_release,
                data: piece.to_vec(),
            });
            self.bytes += piece.len();
        }
    }

    /// Write every segment due by `now + slack`; returns when the next one is due.
    async fn release_due(&mut self, out: &Out<'_>, slack: u64) -> io::Result<Option<u64>> {
        while let Some(head) = self.segs.front() {
            let due = head.release_ns.max(out.conn.stall_until_ns.load(Relaxed));
            let now = now_ns();
            if due > now + slack {
                return Ok(Some(due));
            }
            let seg = self.segs.pop_front().expect("front exists");
            out.dst.write_all(&seg.data).await?;
            out.shared.record_release(now as i64 - due as i64);
            self.bytes -= seg.data.len();
            out.forwarded.fetch_add(seg.data.len() as u64, Relaxed);
        }
        Ok(None)
    }
}

/// Where a pump's bytes go, and what it accounts them to.
pub(crate) struct Out<'a> {
    pub(crate) dst: &'a Sock,
    pub(crate) dir: Dir,
    pub(crate) conn: &'a ConnState,
    pub(crate) shared: &'a Shared,
    pub(crate) forwarded: &'a AtomicU64,
}

impl<'a> Out<'a> {
    pub(crate) fn new(shared: &'a Shared, dst: &'a Sock, dir: Dir, conn: &'a ConnState) -> Out<'a> {
        let forwarded = match dir {
            Dir::Up => &shared.stats.bytes_up,
            Dir::Down => &shared.stats.bytes_down,
        };
        Out {
            dst,
            dir,
            conn,
            shared,
            forwarded,
        }
    }
}

/// How a pump waits for its next event.
struct Wait {
    /// Arm the timer for this time (a delayed segment's release, less the wake-up lead).
    timer_at: Option<u64>,
    /// Stay runnable instead of sleeping: the next segment is expected soon.
    spin: bool,
}

/// The wait before the next event: `due` is the head segment's release time, `lead` how early
/// the timer must be armed to wake on time.
fn plan_wait(due: Option<u64>, lead: u64, cfg: &Config, conn: &ConnState, shared: &Shared) -> Wait {
    let now = now_ns();
    // Spinning only while the connection adds nothing either way: with a delay the arrival
    // wake-up is absorbed by the kernel's receive stamp and the timer's by `lead`, and
    // spinning measured worse there (docs/network.md).
    let passthrough = cfg.up.is_passthrough() && cfg.down.is_passthrough();
    let spin = passthrough
        && if cfg.busy_poll_ns > 0 {
            // The opt-in fixed window: always, for that long after each read.
            now < conn.spin.last_read_ns() + cfg.busy_poll_ns
        } else {
            now < conn.spin.until_ns(now) && shared.spare.spare(now)
        };
    Wait {
        timer_at: due.map(|due| due.saturating_sub(lead)),
        spin,
    }
}

/// One direction of one connection, until EOF has been forwarded (Ok) or a socket fails.
pub(crate) async fn pump(
    src: &Sock,
    out: Out<'_>,
    cfg_rx: watch::Receiver<Arc<Config>>,
) -> io::Result<()> {
    let timer = PreciseTimer::new()?;
    // Bytes that reached the client socket before the upstream connection existed were
    // waiting on the connect, not on the emulated link: their clock starts now.
    let started = now_ns();
    let mut buf = vec![0u8; READ_BUF];
    let mut queue = DelayQueue::new();
    let mut eof = false;
    let (conn, shared) = (out.conn, out.shared);
    loop {
        let cfg = cfg_rx.borrow().clone();
        let lead = if cfg.compensate {
            shared.stats.wake_lateness_ns.load(Relaxed)
        } else {
            0
        };
        let due = queue.release_due(&out, lead).await?;
        if eof && queue.segs.is_empty() {
            out.dst.shutdown_write()?;
            return Ok(());
        }
        let wait = plan_wait(due, lead, &cfg, conn, shared);
        if let Some(at) = wait.timer_at {
            timer.arm(at)?;
        }
        tokio::select! {
            biased;
            r = timer.wait(), if wait.timer_at.is_some() => {
                r?;
                if let Some(at) = wait.timer_at {
                    shared.observe_wake(now_ns().saturating_sub(at));
                }
            }
            r = src.recv(&mut buf), if !eof && queue.bytes < MAX_QUEUED => {
                let (n, stamp) = r?;
                conn.spin.on_read(out.dir as usize, now_ns());
                if n == 0 {
                    eof = true;
                    continue;
                }
                forward(&out, &mut queue, &cfg_rx, stamp.max(started), &buf[..n]).await?;
            }
            // Spinning: yield_now lets the runtime poll its epoll with a zero timeout and
            // come straight back, so new data is seen without sleeping.
            _ = tokio::task::yield_now(), if wait.spin => {
                // Let a thread the kernel woke onto this core (the server or client we
                // just wrote to) run now, rather than wait out our time slice.
                let before = now_ns();
                // SAFETY: sched_yield has no preconditions.
                unsafe { libc::sched_yield() };
                let after = now_ns();
                conn.spin.yielded(after - before, after);
            }
        }
    }
}

/// One read's bytes: dropped (black hole), written at once (nothing to add) or queued.
async fn forward(
    out: &Out<'_>,
    queue: &mut DelayQueue,
    cfg_rx: &watch::Receiver<Arc<Config>>,
    arrival: u64,
    data: &[u8],
) -> io::Result<()> {
    let (conn, shared) = (out.conn, out.shared);
    if conn.blackhole.load(Relaxed) {
        shared
            .stats
            .bytes_dropped
            .fetch_add(data.len() as u64, Relaxed);
        return Ok(());
    }
    if let (Some(tap), Some(ct)) = (&shared.tap, &conn.tap) {
        tap.segment(ct, out.dir == Dir::Up, arrival, data);
    }
    let cfg = cfg_rx.borrow().clone();
    let d: &DirConfig = if out.dir == Dir::Up {
        &cfg.up
    } else {
        &cfg.down
    };
    if queue.segs.is_empty() && d.is_passthrough() && conn.stall_until_ns.load(Relaxed) <= arrival {
        out.dst.write_all(data).await?;
        out.forwarded.fetch_add(data.len() as u64, Relaxed);
        return Ok(());
    }
    queue.schedule(d, out.dir, shared, arrival, data);
    Ok(())
}
