//! The proxy itself: a listener on its own tokio runtime, one task per client connection,
//! two pumps ([`crate::pump`]: client -> upstream "up", upstream -> client "down") inside
//! that task, and the per-connection fault controller. The state both it and the pumps read
//! (counters, the shared link, a connection's faults) is [`crate::shared`]'s.
use std::io;
use std::net::{SocketAddr, TcpListener as StdListener, ToSocketAddrs};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use tokio::sync::watch;

use crate::capture::Tap;
use crate::config::{Config, FaultKind};
use crate::pump::{pump, Out};
use crate::shared::{ConnState, Dir, Shared, Stats, StatsSnapshot};
use crate::sock::Sock;
use crate::timer::{now_ns, PreciseTimer};

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
        let shared = Arc::new(Shared::new(upstream_addr, cfg_rx, tap));
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
