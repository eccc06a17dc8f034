//! The proxy itself: a listener on its own tokio runtime, one task per client connection,
//! two pumps ([`crate::pump`]: client -> upstream "up", upstream -> client "down") inside
//! that task, and the per-connection fault controller.
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
use crate::config::{Config, FaultKind};
use crate::pump::{pump, Out};
use crate::sock::Sock;
use crate::spare::SpareCore;
use crate::spin::Spin;
use crate::timer::{now_ns, PreciseTimer};

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

pub(crate) struct Shared {
    pub(crate) stats: Stats,
    upstream: SocketAddr,
    cfg_rx: watch::Receiver<Arc<Config>>,
    /// Capturing: every segment read is also handed to the tap (never waited on).
    pub(crate) tap: Option<Arc<Tap>>,
    /// With a shared link cap (`link_bps`): when each direction's link is next free, in
    /// `now_ns` time; every connection's pieces queue for it in the order they arrive.
    link_free: [AtomicU64; 2],
    /// Whether the machine has a core for spinning.
    pub(crate) spare: SpareCore,
}

impl Shared {
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
        let up = pump(
            &client,
            Out::new(&shared, &upstream, Dir::Up, &conn),
            cfg_rx.clone(),
        );
        let down = pump(
            &upstream,
            Out::new(&shared, &client, Dir::Down, &conn),
            cfg_rx.clone(),
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
            spare: SpareCore::new(),
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
