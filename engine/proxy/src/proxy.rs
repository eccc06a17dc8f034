//! The proxy itself: a listener on its own tokio runtime, one task per client connection,
//! two pumps (client -> upstream "up", upstream -> client "down") inside that task, and
//! the per-connection fault controller.
//!
//! A pump timestamps every read the moment it returns (one read = one segment as it
//! arrived, not a fixed-size buffer), computes its release time
//! `max(previous release, arrival [+ serialisation at the bandwidth cap] + delay + jitter)`
//! and writes it when a [`PreciseTimer`] says so. With nothing configured for a direction
//! and nothing queued, a segment is written straight away with no timer involved, so the
//! zero-delay overhead is one read plus one write. With the opt-in `busy_poll_us` and
//! nothing to delay, the task stays runnable (polling) for that long after each read
//! instead of sleeping, so the next segment costs no idle-core wake-up.
use std::collections::VecDeque;
use std::io;
use std::net::{SocketAddr, TcpListener as StdListener, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use tokio::sync::watch;

use crate::capture::{ConnTap, Tap};
use crate::config::{Config, DirConfig, FaultKind};
use crate::sock::Sock;
use crate::timer::{now_ns, PreciseTimer};

/// Bytes read per call; a segment larger than what is available is never waited for.
const READ_BUF: usize = 64 * 1024;
/// Bytes a direction may hold before it stops reading, so a slow (capped or delayed)
/// direction pushes back on the sender through TCP flow control like a real window.
const MAX_QUEUED: usize = 4 * 1024 * 1024;
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
    fn new() -> Stats {
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

struct Shared {
    stats: Stats,
    upstream: SocketAddr,
    cfg_rx: watch::Receiver<Arc<Config>>,
    /// Capturing: every segment read is also handed to the tap (never waited on).
    tap: Option<Arc<Tap>>,
    /// With a shared link cap (`link_bps`): when each direction's link is next free, in
    /// `now_ns` time; every connection's pieces queue for it in the order they arrive.
    link_free: [AtomicU64; 2],
}

impl Shared {
    /// Reserves the shared link of `dir` for `tx_ns` from `ready_ns` (or from when it is next
    /// free); returns when the piece has left it.
    fn take_link(&self, dir: Dir, ready_ns: u64, tx_ns: u64) -> u64 {
        let link = &self.link_free[dir as usize];
        let before = link
            .fetch_update(Relaxed, Relaxed, |free| Some(free.max(ready_ns) + tx_ns))
            .expect("the update always stores");
        before.max(ready_ns) + tx_ns
    }

    fn observe_wake(&self, sample_ns: u64) {
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

    fn record_release(&self, error_ns: i64) {
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
struct ConnState {
    blackhole: AtomicBool,
    stall_until_ns: AtomicU64,
    /// CLOCK_MONOTONIC of the connection's last read, either way (busy-poll mode only).
    last_io_ns: AtomicU64,
    /// This connection's handle on the capture tap, when capturing.
    tap: Option<ConnTap>,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Dir {
    Up,
    Down,
}

struct Segment {
    release_ns: u64,
    data: Vec<u8>,
}

/// One direction of one connection, until EOF has been forwarded (Ok) or a socket fails.
async fn pump(
    src: &Sock,
    dst: &Sock,
    dir: Dir,
    cfg_rx: watch::Receiver<Arc<Config>>,
    conn: &ConnState,
    shared: &Shared,
) -> io::Result<()> {
    let timer = PreciseTimer::new()?;
    // Bytes that reached the client socket before the upstream connection existed were
    // waiting on the connect, not on the emulated link: their clock starts now.
    let started = now_ns();
    let mut rng = SmallRng::from_entropy();
    let mut buf = vec![0u8; READ_BUF];
    let mut queue: VecDeque<Segment> = VecDeque::new();
    let mut queued = 0usize;
    let mut last_release = 0u64;
    let mut link_free = 0u64;
    let mut eof = false;
    let forwarded = match dir {
        Dir::Up => &shared.stats.bytes_up,
        Dir::Down => &shared.stats.bytes_down,
    };
    loop {
        let (compensate, busy_ns) = {
            let c = cfg_rx.borrow();
            // Busy polling (opt-in) only while the connection adds nothing either way. With
            // a delay configured the arrival wake-up is absorbed by the kernel's receive
            // stamp and the timer's by `compensate`, and spinning measured *worse* (a
            // spinning proxy keeps one of two vCPUs busy, so the client's and server's
            // wake-ups land on the other, halted one): see docs/network.md.
            let busy = if c.up.is_passthrough() && c.down.is_passthrough() {
                c.busy_poll_ns
            } else {
                0
            };
            (c.compensate, busy)
        };
        let early = if compensate {
            shared.stats.wake_lateness_ns.load(Relaxed)
        } else {
            0
        };
        let mut armed_at = None;
        while let Some(head) = queue.front() {
            let due = head.release_ns.max(conn.stall_until_ns.load(Relaxed));
            let now = now_ns();
            if due > now + early {
                armed_at = Some(due - early);
                break;
            }
            let seg = queue.pop_front().expect("front exists");
            dst.write_all(&seg.data).await?;
            shared.record_release(now as i64 - due as i64);
            queued -= seg.data.len();
            forwarded.fetch_add(seg.data.len() as u64, Relaxed);
        }
        if eof && queue.is_empty() {
            dst.shutdown_write()?;
            return Ok(());
        }
        if let Some(at) = armed_at {
            timer.arm(at)?;
        }
        // Busy-poll: stay runnable for busy_ns after the connection's last read, so the
        // next segment either way is picked up without an idle-core wake-up.
        let spin = busy_ns > 0 && now_ns() < conn.last_io_ns.load(Relaxed) + busy_ns;
        tokio::select! {
            biased;
            r = timer.wait(), if armed_at.is_some() => {
                r?;
                if let Some(at) = armed_at {
                    shared.observe_wake(now_ns().saturating_sub(at));
                }
            }
            r = src.recv(&mut buf), if !eof && queued < MAX_QUEUED => {
                let (n, stamp) = r?;
                let arrival = stamp.max(started);
                if busy_ns > 0 {
                    conn.last_io_ns.store(now_ns(), Relaxed);
                }
                if n == 0 {
                    eof = true;
                    continue;
                }
                if conn.blackhole.load(Relaxed) {
                    shared.stats.bytes_dropped.fetch_add(n as u64, Relaxed);
                    continue;
                }
                if let (Some(tap), Some(ct)) = (&shared.tap, &conn.tap) {
                    tap.segment(ct, dir == Dir::Up, arrival, &buf[..n]);
                }
                let cfg = cfg_rx.borrow().clone();
                let d: &DirConfig = if dir == Dir::Up { &cfg.up } else { &cfg.down };
                if queue.is_empty() && d.is_passthrough() && conn.stall_until_ns.load(Relaxed) <= arrival {
                    dst.write_all(&buf[..n]).await?;
                    forwarded.fetch_add(n as u64, Relaxed);
                    continue;
                }
                for piece in buf[..n].chunks(d.piece_bytes()) {
                    let mut sent = arrival;
                    if d.bandwidth_bps > 0 {
                        link_free = link_free.max(arrival) + d.tx_ns(piece.len());
                        sent = link_free;
                    }
                    if d.link_bps > 0 {
                        sent = shared.take_link(dir, sent, d.link_tx_ns(piece.len()));
                    }
                    let jitter = d.jitter.as_ref().map_or(0, |j| j.sample(&mut rng));
                    let target = (sent as i64 + d.delay_ns as i64 + jitter).max(arrival as i64) as u64;
                    // Never overtake the segment ahead: TCP delivers in order.
                    last_release = last_release.max(target);
                    queue.push_back(Segment { release_ns: last_release, data: piece.to_vec() });
                    queued += piece.len();
                }
            }
            // Busy-poll: yield_now lets the runtime poll its epoll with a zero timeout and
            // come straight back, so new data is seen without sleeping.
            _ = tokio::task::yield_now(), if spin => {
                // Let a thread the kernel woke onto this core (the server or client we
                // just wrote to) run now, rather than wait out our time slice.
                // SAFETY: sched_yield has no preconditions.
                unsafe { libc::sched_yield() };
            }
        }
    }
}

enum Ending {
    /// Both directions forwarded their EOF.
    Done,
    /// Close both sides with RST: a reset fault, or one side failed.
    Reset,
}

/// When (and whether) the configured fault fires on this connection.
fn schedule_fault(cfg: &Config, from_ns: u64, rng: &mut SmallRng) -> Option<u64> {
    let fault = cfg.fault.as_ref()?;
    if fault.probability < 1.0 && rng.gen::<f64>() >= fault.probability {
        return None;
    }
    Some(from_ns + fault.after_ms * 1_000_000)
}

async fn serve(client: TcpStream, shared: Arc<Shared>) {
    shared.stats.connections_total.fetch_add(1, Relaxed);
    shared.stats.connections_active.fetch_add(1, Relaxed);
    let _active = ActiveGuard(&shared.stats);
    let accepted = now_ns();
    let mut cfg_rx = shared.cfg_rx.clone();
    let cfg = cfg_rx.borrow_and_update().clone();
    let Ok(client) = Sock::new(client) else {
        return;
    };
    if cfg.connect_delay_ns > 0 {
        // The kernel has already completed the client's handshake; the delay shows up as
        // the first request waiting, which is where a real handshake RTT would be paid.
        if let Ok(t) = PreciseTimer::new() {
            let _ = t.sleep_until(accepted + cfg.connect_delay_ns).await;
        }
    }
    let upstream = match TcpStream::connect(shared.upstream)
        .await
        .and_then(Sock::new)
    {
        Ok(s) => s,
        Err(_) => {
            shared.stats.upstream_errors.fetch_add(1, Relaxed);
            client.reset_on_close();
            return;
        }
    };
    let conn = ConnState {
        tap: shared.tap.as_ref().map(|t| t.open()),
        ..ConnState::default()
    };
    let mut rng = SmallRng::from_entropy();
    let mut fault_at = schedule_fault(&cfg, accepted, &mut rng);
    let mut fault_cfg = cfg.fault.clone();
    let fault_timer = PreciseTimer::new().ok();

    let ending = {
        let up = pump(&client, &upstream, Dir::Up, cfg_rx.clone(), &conn, &shared);
        let down = pump(
            &upstream,
            &client,
            Dir::Down,
            cfg_rx.clone(),
            &conn,
            &shared,
        );
        tokio::pin!(up, down);
        let (mut up_done, mut down_done) = (false, false);
        loop {
            if up_done && down_done {
                break Ending::Done;
            }
            if let (Some(at), Some(t)) = (fault_at, fault_timer.as_ref()) {
                let _ = t.arm(at);
            }
            tokio::select! {
                r = &mut up, if !up_done => {
                    up_done = true;
                    if r.is_err() { break Ending::Reset; }
                }
                r = &mut down, if !down_done => {
                    down_done = true;
                    if r.is_err() { break Ending::Reset; }
                }
                changed = cfg_rx.changed() => {
                    if changed.is_err() {
                        break Ending::Done; // the proxy is shutting down
                    }
                    let cfg = cfg_rx.borrow_and_update().clone();
                    if cfg.fault != fault_cfg {
                        fault_cfg = cfg.fault.clone();
                        conn.blackhole.store(false, Relaxed);
                        conn.stall_until_ns.store(0, Relaxed);
                        fault_at = schedule_fault(&cfg, now_ns(), &mut rng);
                    }
                }
                _ = async { fault_timer.as_ref().expect("armed").wait().await }, if fault_at.is_some() => {
                    fault_at = None;
                    match fault_cfg.as_ref().map(|f| (f.kind, f.stall_ms)) {
                        Some((FaultKind::Reset, _)) => {
                            shared.stats.faults_reset.fetch_add(1, Relaxed);
                            break Ending::Reset;
                        }
                        Some((FaultKind::Blackhole, _)) => {
                            shared.stats.faults_blackhole.fetch_add(1, Relaxed);
                            conn.blackhole.store(true, Relaxed);
                        }
                        Some((FaultKind::Stall, ms)) => {
                            shared.stats.faults_stall.fetch_add(1, Relaxed);
                            conn.stall_until_ns.store(now_ns() + ms * 1_000_000, Relaxed);
                        }
                        None => {}
                    }
                }
            }
        }
    };
    if let Ending::Reset = ending {
        client.reset_on_close();
        upstream.reset_on_close();
    }
    if let (Some(tap), Some(ct)) = (&shared.tap, &conn.tap) {
        tap.closed(ct);
    }
}

struct ActiveGuard<'a>(&'a Stats);

impl Drop for ActiveGuard<'_> {
    fn drop(&mut self) {
        self.0.connections_active.fetch_sub(1, Relaxed);
    }
}

/// A running proxy. Dropping it (or [`Proxy::close`]) stops the runtime, which closes the
/// listener and every connection.
pub struct Proxy {
    rt: Option<Runtime>,
    cfg_tx: watch::Sender<Arc<Config>>,
    shared: Arc<Shared>,
    local: SocketAddr,
}

impl Proxy {
    /// Bind `listen` now (so the port is known and errors are immediate) and start serving.
    pub fn start(listen: &str, upstream: &str, cfg: Config, threads: usize) -> io::Result<Proxy> {
        Proxy::start_with_tap(listen, upstream, cfg, threads, None)
    }

    /// [`Proxy::start`], also copying every segment read to `tap` (capture).
    pub fn start_with_tap(
        listen: &str,
        upstream: &str,
        cfg: Config,
        threads: usize,
        tap: Option<Arc<Tap>>,
    ) -> io::Result<Proxy> {
        let upstream_addr = upstream.to_socket_addrs()?.next().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("upstream {upstream:?} resolves to no address"),
            )
        })?;
        let rt = crate::runtime::build(threads)?;
        let std_listener = StdListener::bind(listen)
            .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {listen}: {e}")))?;
        std_listener.set_nonblocking(true)?;
        let local = std_listener.local_addr()?;
        let (cfg_tx, cfg_rx) = watch::channel(Arc::new(cfg));
        let shared = Arc::new(Shared {
            stats: Stats::new(),
            upstream: upstream_addr,
            cfg_rx,
            tap,
            link_free: [AtomicU64::new(0), AtomicU64::new(0)],
        });
        let listener = {
            let _guard = rt.enter();
            TcpListener::from_std(std_listener)?
        };
        let accept_shared = shared.clone();
        rt.spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((sock, _)) => {
                        tokio::spawn(serve(sock, accept_shared.clone()));
                    }
                    // Out of fds and the like: back off instead of spinning.
                    Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                }
            }
        });
        Ok(Proxy {
            rt: Some(rt),
            cfg_tx,
            shared,
            local,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Takes effect for every segment that arrives from now on, on every connection.
    pub fn set_config(&self, cfg: Config) {
        self.cfg_tx.send_replace(Arc::new(cfg));
    }

    pub fn config(&self) -> Config {
        (**self.cfg_tx.borrow()).clone()
    }

    pub fn is_closed(&self) -> bool {
        self.rt.is_none()
    }

    pub fn stats(&self) -> StatsSnapshot {
        let s = &self.shared.stats;
        let delayed = s.segments_delayed.load(Relaxed);
        StatsSnapshot {
            connections_total: s.connections_total.load(Relaxed),
            connections_active: s.connections_active.load(Relaxed),
            bytes_up: s.bytes_up.load(Relaxed),
            bytes_down: s.bytes_down.load(Relaxed),
            bytes_dropped: s.bytes_dropped.load(Relaxed),
            upstream_errors: s.upstream_errors.load(Relaxed),
            faults_reset: s.faults_reset.load(Relaxed),
            faults_blackhole: s.faults_blackhole.load(Relaxed),
            faults_stall: s.faults_stall.load(Relaxed),
            segments_delayed: delayed,
            release_error_mean_ns: if delayed > 0 {
                s.release_error_sum_ns.load(Relaxed) / delayed as i64
            } else {
                0
            },
            release_error_max_ns: if delayed > 0 {
                s.release_error_max_ns.load(Relaxed)
            } else {
                0
            },
            release_error_min_ns: if delayed > 0 {
                s.release_error_min_ns.load(Relaxed)
            } else {
                0
            },
            release_late: s.release_late.iter().map(|b| b.load(Relaxed)).collect(),
            wake_lateness_ns: s.wake_lateness_ns.load(Relaxed),
        }
    }

    /// Stop serving and close every connection. Idempotent.
    pub fn close(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_timeout(Duration::from_secs(2));
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.close();
    }
}
