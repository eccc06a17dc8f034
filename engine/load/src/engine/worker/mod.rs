//! One load thread: its logical clients, the loop that drives one phase over the thread's
//! I/O backend (`uring.rs`, or `epoll.rs`), timeouts, and the thread's whole life (prefill,
//! the wait for the start, warm-up and the timed phase). Each turn of the loop issues
//! (`issue.rs`: what each client sends when, and where), reads (`read.rs`: replies parsed
//! and recorded) and hands the I/O to the backend (`io.rs`). Where a Redis Cluster's or a
//! Sentinel-followed primary's requests go is the router's business (`router/`).

mod io;
mod issue;
mod read;

use super::conn::{Client, Sock};
use super::epoll::Epoll;
use super::record::{Recorder, E_TIMEOUT};
use super::router::Router;
use super::shared::Shared;
use super::stream::Stream;
use super::topology::JOINED_MAX;
use super::uring::{multishot_for, Uring};
use crate::arrivals::Arrivals;
use crate::config::{Arrival, IoBackend, Plan};
use crate::keyspace::{Bernoulli, KeyPicker, Rng};
use crate::outbuf::OutBuf;
use crate::proto::{resp, Kind};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Open loop: least time between two reconnects of one socket (the ops due meanwhile fail).
const RETRY_NS: u64 = 100_000_000;
/// How often a thread publishes its counts, checks timeouts and the stop flag.
const TICK_NS: u64 = 10_000_000;

/// What `Worker::issue` did.
enum Issue {
    /// A request is queued, on this socket.
    Queued(usize),
    /// The op failed at once (its connection is down), and is counted.
    Failed,
}

#[derive(PartialEq, Eq, Clone, Copy)]
enum Phase {
    Prefill,
    Run,
}

/// One load thread's state: its clients and their sockets, its recorder, the phase it is
/// in, its I/O backend (a ring, or else the epoll set) and its router.
struct Worker<'a> {
    plan: &'a Plan,
    shared: &'a Shared,
    epoll: Epoll,
    socks: Vec<Sock>,
    clients: Vec<Client>,
    rng: Rng,
    /// Which reads are verified (`verify_fraction` of them).
    verify: Bernoulli,
    rec: Recorder,
    kb: Vec<u8>,
    tmp: Vec<u8>,
    keys: Vec<u64>,
    phase: Phase,
    depth: usize,
    measure_start: u64,
    end: u64,
    quota: Option<u64>,
    issued: u64,
    /// When the timed phase started (ns): a replay's due times count from it.
    origin: u64,
    inflight_total: usize,
    uring: Option<Uring>,
    /// Closed loop: a client's op failed at once (connection down); it tries again on the
    /// next pass of the loop, without sleeping.
    retry_soon: bool,
    /// Where a Redis Cluster's requests go and a Sentinel-followed primary is (`Plain`
    /// otherwise).
    router: Router,
    /// The sockets each client has room for: one per server, and for a Redis Cluster one
    /// more per node that may join.
    room: usize,
    /// Closed-loop Redis Cluster: requests are held per socket and sent as whole
    /// pipelines (`Sock::held`, `top_up_held`).
    corks: bool,
    /// The run is plain RESP GETs (`plain_gets`): `issue` takes the short way, `issue_get`,
    /// which writes them from these heads, and `input` reads their hits by `take_hits`.
    plain_gets: Option<resp::GetHeads>,
    /// The run draws its ops for one server, and sends each at once (`one_server`):
    /// `issue` takes the short way, `issue_drawn`.
    one_server: bool,
}

impl<'a> Worker<'a> {
    /// Thread `ti`'s worker, before it has clients; `share`: the clients it will have.
    fn new(plan: &'a Plan, shared: &'a Shared, ti: usize, share: u64) -> Worker<'a> {
        let room = plan.servers.len() + if plan.cluster { JOINED_MAX } else { 0 };
        Worker {
            plan,
            shared,
            epoll: Epoll::new(),
            socks: Vec::new(),
            clients: Vec::new(),
            rng: Rng::new(plan.seed.wrapping_mul(1_000_003).wrapping_add(ti as u64)),
            // (its first gap from a stream of its own: `rng` is not there yet)
            verify: Bernoulli::new(plan.verify_fraction, &mut Rng::new(plan.seed ^ ti as u64)),
            rec: Recorder::new(plan.ops.len()),
            kb: Vec::with_capacity(256),
            tmp: Vec::new(),
            keys: Vec::new(),
            phase: Phase::Prefill,
            depth: plan.pipeline.max(16),
            measure_start: u64::MAX,
            end: u64::MAX,
            // a replay ends with its scripts, not at an even share of the ops
            quota: plan
                .ops_limit
                .filter(|_| plan.replay.is_none())
                .map(|q| (q * share).div_ceil(plan.connections as u64)),
            origin: 0,
            issued: 0,
            inflight_total: 0,
            // `run` probed io_uring already; a later failure here (e.g. memory limits) falls
            // back to epoll rather than failing the run. TLS too: rustls seals and opens the
            // records in the sockets' buffers (`tlsbuf.rs`).
            uring: if plan.io != IoBackend::Epoll {
                Uring::new(
                    room * (plan.connections / plan.threads + 1),
                    multishot_for(plan.sizes.max()),
                )
            } else {
                None
            },
            retry_soon: false,
            router: Router::new(plan),
            room,
            corks: plan.cluster,
            plain_gets: plain_gets(plan)
                .then(|| resp::GetHeads::new(&plan.prefix))
                .flatten(),
            one_server: one_server(plan),
        }
    }

    /// Adds the thread's clients (`group`: each one's global index and its connections, one
    /// per server) and their sockets, with room for the nodes a cluster may gain.
    fn add_clients(&mut self, group: Vec<(usize, Vec<Option<Stream>>)>) {
        let plan = self.plan;
        let mut pending_attach = Vec::new();
        for (g, per) in group {
            let c = self.clients.len();
            let first_sock = self.socks.len();
            debug_assert_eq!(per.len(), plan.servers.len());
            for (server, stream) in per.into_iter().enumerate() {
                let si = self.socks.len();
                let mut sock = Sock::new(server, c, plan.pipeline);
                match stream {
                    Some(stream) => pending_attach.push((si, stream)),
                    // A cluster replica, connected if a failover promotes it: buffers grow then.
                    None => (sock.rbuf, sock.wbuf) = (Vec::new(), OutBuf::with_capacity(0)),
                }
                self.socks.push(sock);
            }
            for server in plan.servers.len()..self.room {
                // Room for a node that joins the cluster: buffers grow if one does.
                let mut sock = Sock::new(server, c, plan.pipeline);
                (sock.rbuf, sock.wbuf) = (Vec::new(), OutBuf::with_capacity(0));
                sock.sending = OutBuf::with_capacity(0);
                self.socks.push(sock);
            }
            self.clients.push(Client {
                first_sock,
                inflight: 0,
                next_intended: 0,
                arrivals: Arrivals::fixed(1.0),
                picker: KeyPicker::new(
                    plan.key_count,
                    g as u64 * plan.key_count / plan.connections as u64,
                ),
                prefill_next: g as u64,
                script: plan.replay.as_ref().map(|r| Box::new(r.script(g))),
            });
        }
        for (si, stream) in pending_attach {
            self.attach(si, stream);
        }
    }

    /// Enters the run phase (warm-up, then the timed phase) that starts at `start`.
    fn start_run(&mut self, ti: usize, start: u64) {
        let plan = self.plan;
        self.phase = Phase::Run;
        self.corks = plan.cluster && !plan.open;
        // `pipeline` is per connection, as memtier_benchmark and redis-benchmark --cluster count it:
        // a cluster client holds one socket per primary, and its keys spread evenly over them.
        self.depth = if self.router.slot_map().is_empty() {
            plan.pipeline
        } else {
            // Held or awaiting replies, at most a pipeline each per socket (`top_up_held`).
            2 * plan.pipeline * plan.connected_at_start()
        };
        self.measure_start = start + plan.warmup_ns;
        self.origin = self.measure_start;
        self.end = self.measure_start + plan.duration_ns;
        if self.shared.stop.load(Ordering::Relaxed) {
            self.end = start;
        }
        if plan.open {
            start_schedules(self, plan, ti, start);
        }
    }
}

impl Worker<'_> {
    /// The name of server `server` for messages (`Router::name`).
    fn server_name(&self, server: usize) -> &str {
        self.router.name(self.plan, server)
    }

    /// Client `c`'s sockets, one per server, in the plan's order (then a cluster's joined nodes).
    #[inline]
    fn socks_of(&self, c: usize) -> std::ops::Range<usize> {
        let first = self.clients[c].first_sock;
        first..first + self.room
    }

    /// Client `c`'s socket to server `server`.
    #[inline]
    fn sock_of(&self, c: usize, server: usize) -> usize {
        self.clients[c].first_sock + server
    }

    /// Whether a client may send now, given the phase, the schedule and the limits.
    #[inline]
    fn may_issue(&self, c: usize, now: u64) -> bool {
        let cl = &self.clients[c];
        cl.inflight < self.depth
            && match self.phase {
                Phase::Prefill => cl.prefill_next < self.prefill_total() && !self.shared.stopping(),
                // Nothing is sent once the phase has ended, however far behind its schedule
                // the open loop is (the rest is `missed`), nor once it is told to stop.
                Phase::Run => {
                    self.quota.is_none_or(|q| self.issued < q)
                        && now < self.end
                        && !self.shared.stopping()
                        && (!self.plan.open || cl.next_intended <= now)
                        && self.script_left(c)
                }
            }
    }

    /// Replay: whether client `c` has steps left (always, when ops are drawn).
    #[inline]
    fn script_left(&self, c: usize) -> bool {
        self.plan.replay.is_none()
            || self.clients[c]
                .script
                .as_ref()
                .is_some_and(|s| s.has_next())
    }

    fn prefill_total(&self) -> u64 {
        self.plan.key_count * if self.plan.uses_counters { 2 } else { 1 }
    }

    fn check_timeouts(&mut self, now: u64) {
        for si in 0..self.socks.len() {
            let s = &self.socks[si];
            if let Some(p) = s.inflight.front() {
                if s.unstamped < s.inflight.len()
                    && now.saturating_sub(p.sent) > self.plan.timeout_ns
                {
                    let msg = format!(
                        "{}: no reply within {} ms",
                        self.server_name(s.server),
                        self.plan.timeout_ns / 1_000_000
                    );
                    let c = s.client;
                    self.fail_sock(si, E_TIMEOUT, msg, now);
                    self.top_up(c, self.shared.now()); // a reconnect before may have blocked
                }
            }
        }
    }

    /// Runs the event loop until the phase has nothing left to do.
    fn event_loop(&mut self) {
        let mut next_tick = 0u64;
        loop {
            let now = self.shared.now();
            let tick = now >= next_tick;
            if tick {
                next_tick = now + TICK_NS;
                if self.shared.stopping() && self.phase == Phase::Run {
                    self.end = self.end.min(now);
                }
                self.shared.publish(&mut self.rec);
                self.check_timeouts(now);
            }
            if tick || std::mem::take(&mut self.retry_soon) {
                for c in 0..self.clients.len() {
                    // The clock is read again for each client: a reconnect may have blocked.
                    self.top_up(c, self.shared.now());
                }
            } else if self.plan.open && self.phase == Phase::Run {
                for c in 0..self.clients.len() {
                    if self.clients[c].next_intended <= now {
                        self.top_up(c, now);
                    }
                }
            }
            let now = self.shared.now();
            let issuing = (0..self.clients.len()).any(|c| self.could_issue_later(c, now));
            if !issuing && self.inflight_total == 0 {
                break;
            }
            if !issuing
                && now
                    > self
                        .end
                        .saturating_add(self.plan.timeout_ns + 1_000_000_000)
            {
                for si in 0..self.socks.len() {
                    if !self.socks[si].inflight.is_empty() {
                        self.fail_sock(
                            si,
                            E_TIMEOUT,
                            "no reply before the end of the drain".into(),
                            now,
                        );
                    }
                }
                break;
            }
            // Sleep until the next tick, or the next intended send in open loop; not at all
            // when a closed-loop client is to retry a failed op.
            let mut wake = if self.retry_soon { now } else { next_tick };
            if self.plan.open && self.phase == Phase::Run && now < self.end {
                for cl in &self.clients {
                    if cl.inflight < self.depth && cl.next_intended < self.end {
                        wake = wake.min(cl.next_intended);
                    }
                }
            }
            let wait = wake.saturating_sub(self.shared.now());
            if self.uring.is_some() {
                self.uring_round(wait);
                continue;
            }
            self.epoll_round(wait);
        }
        self.rec.last_done = self.shared.now();
        self.shared.publish(&mut self.rec);
        if self.phase == Phase::Run && self.plan.open {
            self.count_missed();
        }
    }

    /// Open loop: the ops of each client's schedule that fell due in the timed phase but
    /// were never sent, because the load could not keep up or the phase was stopped early.
    /// Reaching the op budget (`ops`) misses nothing.
    fn count_missed(&mut self) {
        if self.quota.is_some_and(|q| self.issued >= q) {
            return;
        }
        // A phase stopped early ends when its loop did, not at its deadline.
        let end = self.end.min(self.rec.last_done);
        if self.plan.replay.is_some() {
            let deadline = end.saturating_sub(self.origin);
            for script in self.clients.iter_mut().filter_map(|cl| cl.script.as_mut()) {
                self.rec.missed += script.missed_before(deadline);
            }
            return;
        }
        for cl in &mut self.clients {
            let from = cl.next_intended.max(self.measure_start);
            self.rec.missed += cl.arrivals.due_in(from, end);
        }
    }

    /// Whether client `c` has more to send in this phase (at `now` or later).
    fn could_issue_later(&self, c: usize, now: u64) -> bool {
        let cl = &self.clients[c];
        !self.shared.stopping()
            && match self.phase {
                Phase::Prefill => cl.prefill_next < self.prefill_total(),
                Phase::Run => {
                    self.quota.is_none_or(|q| self.issued < q)
                        && now < self.end
                        && (!self.plan.open || cl.next_intended < self.end)
                        && self.script_left(c)
                }
            }
    }
}

/// Open loop: each client's arrivals and first intended send. Fixed gaps interleave the
/// clients evenly (client g starts g/rate after the run); Poisson clients each start
/// with an exponential gap.
fn start_schedules(w: &mut Worker, plan: &Plan, ti: usize, start: u64) {
    let spacing = 1e9 / plan.rate; // between any two sends of the whole run
    let mean = spacing * plan.connections as f64;
    if plan.replay.is_some() {
        for cl in w.clients.iter_mut() {
            let first = cl.script.as_ref().and_then(|s| s.peek());
            cl.next_intended = w.origin + first.map_or(0, |s| s.at);
        }
        return;
    }
    for (k, cl) in w.clients.iter_mut().enumerate() {
        let g = k * plan.threads + ti;
        cl.arrivals = match plan.arrival {
            Arrival::Fixed => Arrivals::fixed(mean),
            Arrival::Poisson => Arrivals::poisson(mean, plan.seed, g as u64),
            Arrival::Etc => Arrivals::etc(mean, plan.seed, g as u64),
        };
        cl.next_intended = start
            + match plan.arrival {
                Arrival::Fixed => (spacing * g as f64) as u64,
                Arrival::Poisson | Arrival::Etc => cl.arrivals.gap(),
            };
    }
}

/// Whether the timed load is plain RESP GETs in closed loop, each `GET prefix<number>` to
/// the one server: one op, no trace, no cluster or replicas (`Worker::issue_get`, and
/// `take_hits` for their replies).
fn plain_gets(plan: &Plan) -> bool {
    plan.protocol.is_resp()
        && matches!(plan.ops.as_slice(), [op] if op.kind == Kind::Get)
        && plan.key_lengths.is_empty()
        && plan.replay.is_none()
        && !plan.open
        && !plan.cluster
        && !plan.read_from_replicas
        && plan.servers.len() == 1
}

/// Ops drawn (no replay) for one server (no cluster, no replicas, no pool), sent as
/// they are issued (no corks): `issue_drawn`'s case.
fn one_server(plan: &Plan) -> bool {
    plan.replay.is_none() && !plan.cluster && !plan.read_from_replicas && plan.servers.len() == 1
}

/// Waits for the orchestrating thread to set the run's start, then until that start: a
/// thread that began at once would send ops before it, executed but not timed.
fn wait_for_start(shared: &Shared) -> u64 {
    let start = loop {
        let s = shared.run_start.load(Ordering::Acquire);
        if s != 0 {
            break s;
        }
        std::thread::sleep(Duration::from_micros(200));
    };
    // The start is set a little ahead, so that every thread begins on one clock.
    while shared.now() < start {
        std::thread::sleep(Duration::from_nanos(
            start.saturating_sub(shared.now()).min(200_000),
        ));
    }
    start
}

/// A load thread's whole life: prefill, wait for the run to start, warm-up and the timed
/// phase, then what it measured.
pub(super) fn run(
    plan: &Plan,
    shared: &Shared,
    ti: usize,
    group: Vec<(usize, Vec<Option<Stream>>)>,
    share: u64,
) -> Recorder {
    let mut w = Worker::new(plan, shared, ti, share);
    w.add_clients(group);
    if plan.prefill {
        w.event_loop();
    }
    shared.ready.fetch_add(1, Ordering::AcqRel);
    let start = wait_for_start(shared);
    w.start_run(ti, start);
    w.rec.first_due = if plan.open {
        w.measure_start
    } else {
        shared.now().max(w.measure_start)
    };
    w.event_loop();
    w.uring_teardown();
    // a replay whose spool could not be read back ended early: say why
    for error in w
        .clients
        .iter()
        .filter_map(|cl| cl.script.as_ref()?.error())
    {
        w.rec.sample(|| error.to_string());
    }
    w.rec.outages.finish();
    w.rec.settle();
    w.rec.slots = std::mem::replace(&mut w.router, Router::Plain).into_slot_map();
    w.rec
}
