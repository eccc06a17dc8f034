//! One load thread: its logical clients, what they send when (closed loop, open-loop
//! schedules, prefill), what happens to a reply or a broken connection, timeouts, and the
//! loop that drives one phase over the thread's I/O backend (`uring.rs`, or `epoll.rs`).

use super::conn::{
    connect, connect_to, Client, Completion, Pending, Sock, MAX_HOPS, P_ASKING, P_COUNTER,
    P_RESENT, P_VERIFY, SKIP_MIN,
};
use super::epoll::Epoll;
use super::record::{
    complete, complete_hit, outage_scope, record_error, Recorder, E_CONNECTION, E_PROTOCOL,
    E_SERVER, E_TIMEOUT, INTERNAL,
};
use super::sentinel;
use super::shared::Shared;
use super::stream::Stream;
use super::topology::{self, JoinedNode, JOINED_MAX};
use super::uring::Uring;
use crate::arrivals::Arrivals;
use crate::cluster::{key_slot, parse_redirect, UNOWNED};
use crate::config::{Arrival, IoBackend, Plan, ServerAddr};
use crate::keyspace::{route, Bernoulli, KeyPicker, Rng};
use crate::outbuf::OutBuf;
use crate::proto::request::PREFILL_SET;
use crate::proto::resp;
use crate::proto::{
    self, encode, encode_counter, key_bytes, printable, Kind, Outcome, Parse, Reply, Request,
};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Open loop: least time between two reconnects of one socket (the ops due meanwhile fail).
const RETRY_NS: u64 = 100_000_000;
/// How often a thread publishes its counts, checks timeouts and the stop flag.
const TICK_NS: u64 = 10_000_000;
/// Redis Sentinel: least time between two questions of one thread to the Sentinels (a
/// closed-loop client reconnects per op while the primary is down), and the most one
/// question may block its thread per Sentinel (connect, then the reply).
const ASK_EVERY_NS: u64 = 100_000_000;
const SENTINEL_TIMEOUT_NS: u64 = 500_000_000;

/// Redis Sentinel: the primary a thread connects to now, and when it last asked.
struct Primary {
    addr: ServerAddr,
    name: String,
    asked_at: Option<u64>,
}

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
/// in, and its I/O backend (a ring, or else the epoll set).
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
    /// Redis Cluster: this thread's slot map (slot → server), corrected by `MOVED`, and
    /// the redirected requests of the reply being read: (request, ASK?, slot, node named).
    slots: Vec<u16>,
    redirected: Vec<(Pending, bool, u16, String)>,
    /// Redis Cluster: this thread's copy of the nodes that joined during the run (servers
    /// `plan.servers.len()..`), and the sockets each client has room for (those of the
    /// start map, then one per node that may join).
    joined: Vec<JoinedNode>,
    room: usize,
    /// Redis Cluster: when this thread last asked the nodes for the slot map after one
    /// could not be reached (`refresh_slots`).
    slots_asked_at: Option<u64>,
    /// Redis Cluster with `read_from_replicas`: per primary, the turn of its next read
    /// (0: the primary, k: its k-th replica), as redis-py's `ROUND_ROBIN` keeps it.
    turns: Vec<u32>,
    /// Closed-loop Redis Cluster: requests are held per socket and sent as whole
    /// pipelines (`Sock::held`, `top_up_held`).
    corks: bool,
    /// The run is plain RESP GETs (`plain_gets`): `issue` takes the short way, `issue_get`,
    /// which writes them from these heads, and `input` reads their hits by `take_hits`.
    plain_gets: Option<resp::GetHeads>,
    /// The run draws its ops for one server, and sends each at once (`one_server`):
    /// `issue` takes the short way, `issue_drawn`.
    one_server: bool,
    /// Redis Sentinel: where this thread's reconnects go (None: the plan's servers).
    primary: Option<Primary>,
}

impl Worker<'_> {
    /// The name of server `server` for messages: the primary followed now, with Sentinels.
    fn server_name(&self, server: usize) -> &str {
        match &self.primary {
            Some(p) => &p.name,
            None => node_name(self.plan, &self.joined, server),
        }
    }

    /// Redis Cluster: the server index of node `addr` (as a redirect or slot map names it);
    /// a node the start map did not name has joined the cluster: learned, and connected to
    /// on first use.
    fn node_index(&mut self, addr: &str) -> Result<usize, String> {
        let base = self.plan.servers.len();
        let known = |joined: &[JoinedNode]| joined.iter().position(|n| n.name == addr);
        if let Some(i) = self.plan.server_names.iter().position(|n| n == addr) {
            return Ok(i);
        }
        if let Some(j) = known(&self.joined) {
            return Ok(base + j);
        }
        self.joined = self.shared.joined.learn(self.plan, addr)?;
        Ok(base + known(&self.joined).expect("learned"))
    }

    /// Opens a connection to server `server`: one of the plan's, or a node that joined.
    fn connect_node(&self, server: usize, wait: Duration) -> Result<Stream, String> {
        let plan = self.plan;
        match server.checked_sub(plan.servers.len()) {
            None => connect(plan, server, wait),
            Some(j) => {
                let n = &self.joined[j];
                let tls = plan.tls.as_ref().zip(n.tls_name.as_ref());
                connect_to(plan, &n.addr, &n.name, tls, wait)
            }
        }
    }

    /// Puts a connected stream in socket `si` and registers it with the backend.
    fn attach(&mut self, si: usize, stream: Stream) {
        let s = &mut self.socks[si];
        s.fd = stream.as_raw_fd();
        s.stream = Some(stream);
        s.want_out = false;
        s.need = 0;
        s.sending.clear();
        s.spos = 0;
        match self.uring.as_mut() {
            Some(u) => {
                s.fixed = u.register(si, s.fd);
                u.arm(si);
            }
            None => self.epoll.add(si, s),
        }
    }

    /// Socket `si` is being closed: the ring's table lets go of it (else it stays open).
    fn unregister(&mut self, si: usize) {
        let s = &mut self.socks[si];
        if s.fixed {
            s.fixed = false;
            if let Some(u) = self.uring.as_mut() {
                u.register(si, -1);
            }
        }
    }

    /// Fails every request in flight on a socket and closes it (it reconnects on next use).
    fn fail_sock(&mut self, si: usize, kind: usize, msg: String, now: u64) {
        let plan = self.plan;
        let s = &mut self.socks[si];
        let n = s.inflight.len();
        let mut first = true;
        while let Some(p) = s.inflight.pop_front() {
            if p.flags & P_ASKING != 0 {
                continue; // not an op: the request behind it gets the error
            }
            // The request whose reply broke the stream gets the stream's error; the others
            // were lost with the connection.
            let k = if first || kind == E_TIMEOUT {
                kind
            } else {
                E_CONNECTION
            };
            first = false;
            record_error(&mut self.rec, plan, &p, k, now);
        }
        self.rec.sample(|| msg);
        self.unregister(si);
        let s = &mut self.socks[si];
        if s.recv_busy || s.send_busy {
            // io_uring operations still reference this socket's buffers: wake them with a
            // shutdown and close the socket only once they have completed.
            // SAFETY: shutting down a socket we own.
            unsafe { libc::shutdown(s.fd, libc::SHUT_RDWR) };
            s.zombie = s.stream.take();
        }
        s.stream = None; // closing the fd also removes it from the epoll set
        s.fd = -1;
        s.wbuf.clear();
        s.wpos = 0;
        s.held.clear();
        s.held_ops = 0;
        s.rbuf.clear();
        s.rpos = 0;
        s.need = 0;
        s.skip = 0;
        s.skipping = None;
        s.head_first = false;
        s.unstamped = 0;
        s.dirty = false;
        s.retry_at = now;
        let c = s.client;
        self.clients[c].inflight -= n;
        self.inflight_total -= n;
    }

    /// Stamps send times on newly queued requests and hands them to the I/O backend:
    /// io_uring sends them in its next round, epoll writes them at once.
    fn flush(&mut self, si: usize) {
        let now = self.shared.now();
        let s = &mut self.socks[si];
        if s.fd < 0 {
            return;
        }
        if s.unstamped > s.held_ops {
            // Held requests (the last `held_ops`) are not in `wbuf`: they stay unstamped.
            let len = s.inflight.len();
            for p in s.inflight.range_mut(len - s.unstamped..len - s.held_ops) {
                if p.flags & P_RESENT != 0 {
                    continue; // a redirect's latency counts from the first send
                }
                p.sent = now;
                if !self.plan.open {
                    p.intended = now;
                }
            }
            s.unstamped = s.held_ops;
        }
        if let Some(u) = self.uring.as_mut() {
            u.queue(si, s);
            return;
        }
        if let Some(done) = self.epoll.write(si, s, &self.plan.filler) {
            self.on_io(si, done, now);
        }
    }

    /// Acts on what the I/O backend did on socket `si`.
    fn on_io(&mut self, si: usize, done: Completion, now: u64) {
        let why = match done {
            Completion::Read(n) => return self.input(si, n, now),
            Completion::Wrote(n) => {
                if now >= self.measure_start {
                    self.rec.wire_out += n as u64;
                }
                return;
            }
            Completion::Closed => {
                let s = &self.socks[si];
                if s.rbuf.len() > s.rpos {
                    "server closed the connection mid-reply (truncated reply)".to_string()
                } else {
                    "server closed the connection".to_string()
                }
            }
            Completion::ReadFailed(e) => format!("read failed: {e}"),
            Completion::WriteFailed(e) => format!("write failed: {e}"),
        };
        let msg = format!("{}: {why}", self.server_name(self.socks[si].server));
        self.fail_sock(si, E_CONNECTION, msg, now);
    }

    /// One io_uring round (`Uring::round`), then every completion it brought.
    fn uring_round(&mut self, wait_ns: u64) {
        let u = self.uring.as_mut().expect("uring backend");
        if let Err(e) = u.round(&mut self.socks, &self.plan.filler, wait_ns) {
            self.rec.sample(|| format!("io_uring_enter failed: {e}"));
        }
        let u = self.uring.as_mut().expect("uring backend");
        let cqes = std::mem::take(&mut u.cqes);
        let now = self.shared.now();
        for &cqe in &cqes {
            let u = self.uring.as_mut().expect("uring backend");
            if let Some((si, done)) = u.complete(cqe, &mut self.socks) {
                self.on_io(si, done, now);
            }
        }
        self.uring.as_mut().expect("uring backend").cqes = cqes;
    }

    /// One epoll wait (at most `wait_ns`), then every ready socket: writes, then reads.
    fn epoll_round(&mut self, wait_ns: u64) {
        let n = self.epoll.wait(wait_ns);
        for k in 0..n {
            let (si, writable, readable) = self.epoll.ready(k);
            if writable {
                self.flush(si);
            }
            if readable {
                if let Some(done) = self.epoll.read(&mut self.socks[si]) {
                    self.on_io(si, done, self.shared.now());
                }
            }
        }
    }

    /// Before the ring and the buffers go away: stop every operation in flight.
    fn uring_teardown(&mut self) {
        if self.uring.is_none() {
            return;
        }
        for si in 0..self.socks.len() {
            self.unregister(si);
            let s = &mut self.socks[si];
            if s.fd >= 0 {
                // SAFETY: shutting down a socket we own wakes its pending RECV.
                unsafe { libc::shutdown(s.fd, libc::SHUT_RDWR) };
                s.zombie = s.stream.take();
                s.fd = -1;
            }
        }
        let deadline = self.shared.now() + 2_000_000_000;
        while self.socks.iter().any(|s| s.recv_busy || s.send_busy) && self.shared.now() < deadline
        {
            self.uring_round(10_000_000);
        }
        if self.socks.iter().any(|s| s.recv_busy || s.send_busy) {
            // Leak rather than free buffers the kernel may still write into.
            for s in &mut self.socks {
                if s.recv_busy || s.send_busy {
                    std::mem::forget(std::mem::take(&mut s.rbuf));
                    std::mem::forget(std::mem::take(&mut s.tls_in));
                    std::mem::forget(std::mem::take(&mut s.sending));
                }
            }
        }
    }

    /// Parses and records what arrived on a socket, then lets its client send more.
    fn input(&mut self, si: usize, n: usize, now: u64) {
        let plan = self.plan;
        if now >= self.measure_start {
            self.rec.wire_in += n as u64;
        }
        let s = &mut self.socks[si];
        let mut done = 0;
        let mut bad: Option<String> = None;
        let mut readonly = false;
        if s.rbuf.len() >= s.need {
            if self.plain_gets.is_some() && s.skipping.is_none() {
                done = take_hits(s, &mut self.rec, plan.limits.max_bulk, now);
            }
            while let Some(p) = s.inflight.front().copied() {
                if s.unstamped >= s.inflight.len() {
                    break; // a reply cannot precede its request's write
                }
                if let Some(head) = s.skipping {
                    // The front reply's value is being discarded: once it is gone, what must
                    // follow it completes the reply (a hit of that length, as parsed whole).
                    let avail = &s.rbuf[s.rpos..];
                    if s.skip > 0 || avail.len() < head.tail.len() {
                        s.need = s.rpos + head.tail.len();
                        break;
                    }
                    if !avail.starts_with(head.tail) {
                        bad = Some(format!(
                            "a value of {} bytes not followed by {:?}: {:?}",
                            head.len,
                            printable(head.tail),
                            printable(avail)
                        ));
                        break;
                    }
                    let r = Reply {
                        consumed: head.tail.len(),
                        outcome: Outcome::Hit,
                        value: None,
                        payload: head.len,
                        message: None,
                    };
                    complete(&mut self.rec, plan, &p, &r, None, avail, now);
                    s.skipping = None;
                    s.rpos += r.consumed;
                    s.inflight.pop_front();
                    done += 1;
                    s.need = 0;
                    continue;
                }
                let avail = &s.rbuf[s.rpos..];
                let kind = if p.flags & P_ASKING != 0 {
                    Kind::Setup
                } else {
                    p.kind
                };
                match proto::parse(plan.protocol, avail, kind, &plan.limits) {
                    Parse::Done(r) if plan.cluster && p.flags & P_ASKING != 0 => {
                        // ASKING's own +OK (an error would show in the request behind it)
                        s.rpos += r.consumed;
                        s.inflight.pop_front();
                        done += 1;
                        s.need = 0;
                    }
                    Parse::Done(r)
                        if plan.cluster
                            && r.outcome == Outcome::ServerError
                            && r.message
                                .as_ref()
                                .is_some_and(|m| parse_redirect(&avail[m.clone()]).is_some()) =>
                    {
                        let m = r.message.clone().expect("checked above");
                        let to = parse_redirect(&avail[m]).expect("checked above");
                        self.redirected
                            .push((p, to.ask, to.slot, to.addr.to_string()));
                        s.rpos += r.consumed;
                        s.inflight.pop_front();
                        done += 1;
                        s.need = 0;
                    }
                    Parse::Done(r) => {
                        if r.value.is_some() {
                            s.head_first = false; // a value read whole: read as usual again
                        }
                        let value = r.value.clone().map(|v| &avail[v]);
                        complete(&mut self.rec, plan, &p, &r, value, avail, now);
                        let failed =
                            matches!(r.outcome, Outcome::ServerError | Outcome::ProtocolError);
                        if failed
                            && self.primary.is_some()
                            && r.message
                                .as_ref()
                                .is_some_and(|m| avail[m.clone()].starts_with(b"READONLY"))
                        {
                            // A demoted primary, back as a replica: this socket is closed once
                            // its replies are read, and the reconnect asks the Sentinels.
                            readonly = true;
                        } else if self.rec.outages.open()
                            && !failed
                            && p.timed
                            && p.op != INTERNAL
                            && plan.ops[p.op as usize].write
                        {
                            let name = match &self.primary {
                                Some(primary) => primary.name.as_str(),
                                None => node_name(plan, &self.joined, s.server),
                            };
                            self.rec
                                .outages
                                .succeeded(now, name, outage_scope(plan, &p));
                        }
                        s.rpos += r.consumed;
                        s.inflight.pop_front();
                        done += 1;
                        s.need = 0;
                    }
                    Parse::Need(k) => {
                        s.need = s.rpos + k;
                        s.head_first = false; // a value to read whole, or a head cut short
                        if p.flags & P_VERIFY == 0 && k >= avail.len() + SKIP_MIN && s.may_discard()
                        {
                            // An unverified GET's large value: only its length counts, so
                            // the rest of it is discarded from the socket unread.
                            if let Some(head) =
                                proto::value_head(plan.protocol, avail, kind, &plan.limits)
                            {
                                let have = avail.len() - head.at;
                                if head.len >= have + SKIP_MIN {
                                    s.rpos += head.at;
                                    s.rbuf.truncate(s.rpos);
                                    s.skip = head.len - have;
                                    s.skipping = Some(head);
                                    s.head_first = true;
                                    s.need = s.rpos + head.tail.len();
                                }
                            }
                        }
                        break;
                    }
                    Parse::Bad(m) => {
                        bad = Some(m);
                        break;
                    }
                }
            }
            if bad.is_none() && s.inflight.is_empty() && s.rpos < s.rbuf.len() {
                bad = Some(format!(
                    "unsolicited data from the server: {:?}",
                    printable(&s.rbuf[s.rpos..])
                ));
            }
        }
        let c = s.client;
        let server = s.server;
        self.clients[c].inflight -= done;
        self.inflight_total -= done;
        let was_bad = bad.is_some() || readonly;
        if let Some(m) = bad {
            let msg = format!("{}: protocol error: {m}", self.server_name(server));
            self.fail_sock(si, E_PROTOCOL, msg, now);
        } else if readonly {
            let msg = format!(
                "{}: READONLY (a replica now): connection closed, the Sentinels are asked again",
                self.server_name(server)
            );
            self.fail_sock(si, E_CONNECTION, msg, now);
        }
        if !self.redirected.is_empty() {
            self.follow_redirects(c, now);
        }
        if done > 0 || was_bad {
            self.top_up(c, now);
        }
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
        let cl = &self.clients[c];
        self.plan
            .replay
            .as_ref()
            .is_none_or(|r| cl.cursor < r.scripts[cl.script].len())
    }

    fn prefill_total(&self) -> u64 {
        self.plan.key_count * if self.plan.uses_counters { 2 } else { 1 }
    }

    /// Issues requests for client `c` while it may, then writes them.
    fn top_up(&mut self, c: usize, now: u64) {
        if self.corks {
            return self.top_up_held(c, now);
        }
        let mut any = false;
        let mut failed = 0;
        let open = self.plan.open && self.phase == Phase::Run;
        while self.may_issue(c, now) {
            if let Issue::Queued(_) = self.issue(c, now) {
                any = true;
                continue;
            }
            // Its connection is down. Open loop: every op already due fails the same way
            // (a few at a time, so that the clock is read again). Closed loop: the client
            // tries again at once, after the other clients had their turn.
            failed += 1;
            if !open || failed >= 1024 {
                self.retry_soon = true;
                break;
            }
        }
        if any {
            for si in self.socks_of(c) {
                if self.socks[si].unstamped > 0 {
                    self.flush(si);
                }
            }
        }
    }

    /// `top_up` for a closed-loop cluster client: each socket sends whole pipelines. Every
    /// request is held on its socket (`Sock::held`) and a socket's held batch is written once
    /// its previous batch has been answered and it holds a whole pipeline (as each of
    /// redis-benchmark's clients sends: the server reads P commands at a time); the client
    /// draws its next keys only while no socket holds a whole pipeline — its key sequence is
    /// kept, so a node that answers slower holds the others back, as it would hold back an
    /// application's client. Part of a pipeline goes only when no more is coming: the client
    /// may issue no more (its quota, the deadline, a stop, its in-flight cap) or a
    /// connection is down.
    fn top_up_held(&mut self, c: usize, now: u64) {
        self.send_held(c, false);
        let whole = self.plan.pipeline;
        // only the socket a request was queued on can have become full
        let mut full = self.socks_of(c).any(|si| self.socks[si].held_ops >= whole);
        let mut down = false;
        while !full && self.may_issue(c, now) {
            match self.issue(c, now) {
                Issue::Queued(si) => full = self.socks[si].held_ops >= whole,
                Issue::Failed => {
                    self.retry_soon = true; // its connection is down: tried again after the others
                    down = true;
                    break;
                }
            }
        }
        let last = down || !self.may_issue(c, now);
        self.send_held(c, last);
    }

    /// Writes the held batch of each of client `c`'s sockets that awaits no reply: a whole
    /// pipeline, or any part of one when `partial`.
    fn send_held(&mut self, c: usize, partial: bool) {
        let whole = self.plan.pipeline;
        for si in self.socks_of(c) {
            let s = &mut self.socks[si];
            if s.held_ops > 0 && s.awaiting() == 0 && (partial || s.held_ops >= whole) {
                s.release_held();
                self.flush(si);
            }
        }
    }

    /// Queues one request for client `c`, or counts it failed when its connection is down.
    fn issue(&mut self, c: usize, now: u64) -> Issue {
        if self.phase == Phase::Run {
            let short = if self.plain_gets.is_some() {
                self.issue_get(c, now)
            } else if self.one_server {
                self.issue_drawn(c, now)
            } else {
                None
            };
            if let Some(done) = short {
                return done;
            }
        }
        let plan = self.plan;
        let (op_idx, kind, intended, size) = match self.phase {
            Phase::Prefill => {
                let cl = &mut self.clients[c];
                let i = cl.prefill_next;
                self.keys.clear();
                let counter = i >= plan.key_count;
                self.keys.push(if counter { i - plan.key_count } else { i });
                let kind = if counter { Kind::Incr } else { Kind::Set };
                (
                    INTERNAL,
                    kind,
                    now,
                    if counter {
                        1
                    } else {
                        plan.sizes.sample(&mut self.rng)
                    },
                )
            }
            Phase::Run if plan.replay.is_some() => {
                let cl = &self.clients[c];
                let step = plan.replay.as_ref().unwrap().scripts[cl.script][cl.cursor];
                let op = &plan.ops[step.op as usize];
                self.keys.clear();
                self.keys.push(step.key);
                let intended = if plan.open { cl.next_intended } else { now };
                let size = if op.writes_value {
                    step.size as usize
                } else {
                    0
                };
                (step.op, op.kind, intended, size)
            }
            Phase::Run => {
                let (op_idx, kind, size) = self.draw(c);
                let intended = if plan.open {
                    self.clients[c].next_intended
                } else {
                    now
                };
                (op_idx, kind, intended, size)
            }
        };
        let owner = self.server_of(kind, self.keys[0]);
        let mut si = if plan.read_from_replicas
            && op_idx != INTERNAL
            && matches!(kind, Kind::Get | Kind::Gets | Kind::Exists | Kind::MGet(_))
        {
            let server = self.read_server(c, owner, now);
            self.sock_of(c, server)
        } else {
            self.sock_of(c, owner)
        };
        let timed = self.phase == Phase::Run && intended >= self.measure_start;
        if self.socks[si].fd < 0 {
            let mut connected = self.reconnect(si, now);
            if connected.is_err() && self.socks[si].server != owner {
                // A replica that cannot be reached: the read goes to its primary, as
                // redis-py's retry goes to the next node, and so do the next ones until
                // the replica's retry time (`read_server`).
                if let Err(Some(m)) = connected {
                    self.rec
                        .sample(|| format!("{m} (a replica: its reads go to the primary)"));
                }
                si = self.sock_of(c, owner);
                connected = if self.socks[si].fd < 0 {
                    self.reconnect(si, now)
                } else {
                    Ok(())
                };
            }
            if let Err(m) = connected {
                let p = Pending {
                    op: op_idx,
                    kind,
                    timed,
                    intended,
                    sent: now,
                    bytes_out: 0,
                    key: self.keys[0],
                    size: size as u32,
                    flags: 0,
                    hops: 0,
                };
                record_error(&mut self.rec, plan, &p, E_CONNECTION, self.shared.now());
                if let Some(m) = m {
                    self.rec.sample(|| m);
                }
                self.after_issue(c, timed);
                return Issue::Failed;
            }
        }
        let verify = matches!(kind, Kind::Get | Kind::Gets) && self.verify.next(&mut self.rng);
        let counter = op_idx == INTERNAL && kind == Kind::Incr;
        let hold = self.corks;
        let bytes = self.encode_request(si, op_idx, counter, size, hold);
        let kind = if op_idx == INTERNAL { Kind::Set } else { kind };
        self.socks[si].held_ops += hold as usize;
        let p = Pending {
            op: op_idx,
            kind,
            timed,
            intended,
            sent: now,
            bytes_out: bytes as u32,
            key: self.keys[0],
            size: size as u32,
            flags: if counter { P_COUNTER } else { 0 } | if verify { P_VERIFY } else { 0 },
            hops: 0,
        };
        self.queue(si, c, p);
        self.after_issue(c, timed);
        Issue::Queued(si)
    }

    /// Puts request `p`, just encoded for client `c`, in flight on socket `si` (it is stamped
    /// when it is flushed): both ways of `issue` end here.
    #[inline]
    fn queue(&mut self, si: usize, c: usize, p: Pending) {
        let s = &mut self.socks[si];
        s.inflight.push_back(p);
        s.unstamped += 1;
        self.clients[c].inflight += 1;
        self.inflight_total += 1;
    }

    /// `issue` in a run of plain GETs (`plain_gets`) on a connected socket (`None` when it is
    /// down: the general path reconnects): the same request, the same draws in the same
    /// order and the same record, without the general path's choices, which were over half
    /// the engine's own instructions per GET at pipeline 16.
    #[inline]
    fn issue_get(&mut self, c: usize, now: u64) -> Option<Issue> {
        let plan = self.plan;
        let si = self.sock_of(c, 0);
        let heads = self.plain_gets.as_ref()?;
        if self.socks[si].fd < 0 {
            return None;
        }
        let key = self.clients[c].picker.pick(&plan.dist, &mut self.rng);
        let verify = self.verify.next(&mut self.rng);
        let timed = now >= self.measure_start;
        let klen = heads.get(&mut self.socks[si].wbuf, key);
        let p = Pending {
            op: 0,
            kind: Kind::Get,
            timed,
            intended: now,
            sent: now,
            bytes_out: klen as u32,
            key,
            size: 0,
            flags: if verify { P_VERIFY } else { 0 },
            hops: 0,
        };
        self.queue(si, c, p);
        self.issued += timed as u64; // `after_issue` of a closed-loop run without a trace
        Some(Issue::Queued(si))
    }

    /// Draws the next op of a run that draws its ops (no replay): the op, its keys (in
    /// `self.keys`), its value size. Both ways of `issue` draw here, so they draw alike.
    #[inline(always)]
    fn draw(&mut self, c: usize) -> (u16, Kind, usize) {
        let plan = self.plan;
        let op_idx = if plan.ops.len() == 1 {
            0 // a mix of one op: nothing to draw
        } else {
            // `cumulative` is sorted: the ops it is past, counted in order (a mix has a
            // few ops: cheaper than `partition_point`'s halving, and the same answer)
            let x = self.rng.next_f64();
            let past = plan.cumulative.iter().take_while(|&&c| c <= x).count();
            past.min(plan.ops.len() - 1)
        };
        let op = &plan.ops[op_idx];
        self.keys.clear();
        let first = self.clients[c].picker.pick(&plan.dist, &mut self.rng);
        self.keys.push(first);
        if let Kind::MGet(n) = op.kind {
            let server = self.server_of(Kind::Get, first);
            for _ in 1..n {
                // All keys of one multi-get live on one server of the pool: draw
                // until one does; a key that never does is left out (rare: the
                // multi-get is then that much shorter, and judged as such).
                for _ in 0..64 {
                    let k = self.clients[c].picker.pick(&plan.dist, &mut self.rng);
                    if plan.servers.len() == 1 || self.server_of(Kind::Get, k) == server {
                        self.keys.push(k);
                        break;
                    }
                }
            }
        }
        let kind = if let Kind::MGet(_) = op.kind {
            Kind::MGet(self.keys.len() as u32)
        } else {
            op.kind
        };
        let size = if op.writes_value {
            plan.sizes.sample(&mut self.rng)
        } else {
            0
        };
        (op_idx as u16, kind, size)
    }

    /// `issue` in a run of drawn ops against one server (`one_server`) on a connected
    /// socket (`None` when it is down: the general path reconnects): the same draws and
    /// the same record, without the general path's choices of server, replica and batch.
    #[inline]
    fn issue_drawn(&mut self, c: usize, now: u64) -> Option<Issue> {
        let plan = self.plan;
        let si = self.sock_of(c, 0);
        if self.socks[si].fd < 0 {
            return None;
        }
        let (op_idx, kind, size) = self.draw(c);
        let intended = if plan.open {
            self.clients[c].next_intended
        } else {
            now
        };
        let timed = intended >= self.measure_start;
        let verify = matches!(kind, Kind::Get | Kind::Gets) && self.verify.next(&mut self.rng);
        let bytes = self.encode_request(si, op_idx, false, size, false);
        let p = Pending {
            op: op_idx,
            kind,
            timed,
            intended,
            sent: now,
            bytes_out: bytes as u32,
            key: self.keys[0],
            size: size as u32,
            flags: if verify { P_VERIFY } else { 0 },
            hops: 0,
        };
        self.queue(si, c, p);
        // `after_issue` of a run without a trace
        self.issued += timed as u64;
        if plan.open {
            let cl = &mut self.clients[c];
            cl.next_intended += cl.arrivals.gap();
        }
        Some(Issue::Queued(si))
    }

    /// Encodes the request for `self.keys` into socket `si`'s write buffer, or behind its
    /// held requests (`hold`); returns the payload bytes it carries.
    #[inline(always)]
    fn encode_request(
        &mut self,
        si: usize,
        op_idx: u16,
        counter: bool,
        size: usize,
        hold: bool,
    ) -> usize {
        let plan = self.plan;
        let s = &mut self.socks[si];
        let out = if hold {
            &mut s.held
        } else {
            s.release_held(); // the wire keeps the order of `inflight`
            &mut s.wbuf
        };
        if counter {
            // Counters start at "0" so memcached's incr finds them.
            key_bytes(&mut self.kb, &plan.prefix, &[], Kind::Incr, self.keys[0]);
            encode_counter(plan.protocol, out, &self.kb);
            return 0;
        }
        let op = if op_idx == INTERNAL {
            &PREFILL_SET
        } else {
            &plan.ops[op_idx as usize]
        };
        let req = Request {
            op,
            prefix: &plan.prefix,
            lengths: &plan.key_lengths,
            keys: &self.keys,
            size,
            ttl: plan.ttl_s,
            filler: &plan.filler,
        };
        encode(plan.protocol, out, &req, &mut self.kb, &mut self.tmp)
    }

    /// Redis Cluster: sends the requests a node redirected to the node named, on client
    /// `c`'s socket there. `MOVED` first corrects this thread's slot map; `ASK` goes once,
    /// behind `ASKING`, and leaves the map alone (the slot is being migrated). A request
    /// keeps its first send's times, so its latency includes the detour. A node the map read
    /// at the start did not name (one added to the cluster since) is learned and connected
    /// to; past `JOINED_MAX` such nodes, a request sent to one more is a `server` error.
    fn follow_redirects(&mut self, c: usize, now: u64) {
        let plan = self.plan;
        let redirected = std::mem::take(&mut self.redirected);
        for (mut p, ask, slot, to) in redirected.iter().map(|(p, a, s, t)| (*p, *a, *s, t)) {
            if ask {
                self.rec.ask += 1;
            } else {
                self.rec.moved += 1;
            }
            let server = match self.node_index(to) {
                Ok(server) => server,
                Err(m) => {
                    record_error(&mut self.rec, plan, &p, E_SERVER, now);
                    self.rec.sample(|| format!("slot {slot} redirected to {m}"));
                    continue;
                }
            };
            p.hops += 1;
            if p.hops > MAX_HOPS {
                record_error(&mut self.rec, plan, &p, E_SERVER, now);
                self.rec.sample(|| {
                    format!("slot {slot}: redirected more than {MAX_HOPS} times (nodes disagree)")
                });
                continue;
            }
            if !ask {
                self.slots[slot as usize] = server as u16;
            }
            let si = self.sock_of(c, server);
            if self.socks[si].fd < 0 {
                if let Err(m) = self.reconnect(si, now) {
                    record_error(&mut self.rec, plan, &p, E_CONNECTION, self.shared.now());
                    if let Some(m) = m {
                        self.rec.sample(|| m);
                    }
                    continue;
                }
            }
            let mut queued = 1;
            if ask {
                let s = &mut self.socks[si];
                s.release_held(); // the wire keeps the order of `inflight`
                s.wbuf.extend_from_slice(b"*1\r\n$6\r\nASKING\r\n");
                s.inflight.push_back(Pending {
                    op: INTERNAL,
                    kind: Kind::Setup,
                    timed: false,
                    flags: P_ASKING | P_RESENT,
                    bytes_out: 0,
                    ..p
                });
                queued += 1;
            }
            self.keys.clear();
            self.keys.push(p.key);
            self.encode_request(si, p.op, p.flags & P_COUNTER != 0, p.size as usize, false);
            p.flags |= P_RESENT;
            let s = &mut self.socks[si];
            s.inflight.push_back(p);
            s.unstamped += queued;
            self.clients[c].inflight += queued;
            self.inflight_total += queued;
            self.flush(si);
        }
        self.redirected = redirected;
        self.redirected.clear();
    }

    /// Reconnects a broken socket; `Err(Some(why))` when that failed, `Err(None)` when an
    /// open-loop socket is still backing off from its last failure.
    fn reconnect(&mut self, si: usize, now: u64) -> Result<(), Option<String>> {
        let back_off = self.plan.open && self.phase == Phase::Run;
        if back_off && now < self.socks[si].retry_at {
            return Err(None);
        }
        // A connect may block (up to 1 s against a hung server): let the on-error watch see
        // the failures so far first, so that it can stop the run meanwhile.
        self.shared.publish(&mut self.rec);
        let plan = self.plan;
        let wait = Duration::from_nanos(plan.timeout_ns.min(1_000_000_000));
        if let (Some(sentinels), Some(primary)) = (&plan.sentinel, &mut self.primary) {
            let now = self.shared.now();
            if primary
                .asked_at
                .is_none_or(|t| now >= t.saturating_add(ASK_EVERY_NS))
            {
                primary.asked_at = Some(now);
                let ask_wait = Duration::from_nanos(plan.timeout_ns.min(SENTINEL_TIMEOUT_NS));
                match sentinel::ask(sentinels, ask_wait) {
                    Ok((addr, name)) => (primary.addr, primary.name) = (addr, name),
                    // The last primary named is tried again; the next question in 100 ms.
                    Err(m) => self.rec.sample(|| m),
                }
            }
        }
        let connected = match &self.primary {
            Some(p) => connect_to(plan, &p.addr, &p.name, None, wait),
            None => self.connect_node(self.socks[si].server, wait),
        };
        match connected {
            Ok(stream) => {
                self.attach(si, stream);
                Ok(())
            }
            Err(m) => {
                self.socks[si].retry_at = self.shared.now() + RETRY_NS;
                if plan.cluster {
                    self.refresh_slots(self.socks[si].server);
                }
                Err(Some(m))
            }
        }
    }

    /// Redis Cluster: node `down` cannot be reached, so its slots may have moved (a failover
    /// promotes a replica; no node that is down can answer `MOVED`). The other nodes are
    /// asked for the slot map, at most every `ASK_EVERY_NS` per thread, and each slot goes to
    /// the node now named (a primary or replica of the map read at the start, or a node that
    /// joined since); the next requests for those slots go there. Slots no node owns yet
    /// stay where they were.
    fn refresh_slots(&mut self, down: usize) {
        let now = self.shared.now();
        if self
            .slots_asked_at
            .is_some_and(|t| now < t.saturating_add(ASK_EVERY_NS))
        {
            return;
        }
        self.slots_asked_at = Some(now);
        let plan = self.plan;
        let wait = Duration::from_nanos(plan.timeout_ns.min(SENTINEL_TIMEOUT_NS));
        for server in (0..plan.servers.len()).filter(|&s| s != down) {
            let Ok(ranges) = topology::slot_ranges(plan, server, wait) else {
                continue; // down too, or not answering: the next node
            };
            for r in &ranges {
                match self.node_index(&r.addr) {
                    Ok(owner) => self.slots[r.first as usize..=r.last as usize].fill(owner as u16),
                    Err(m) => self.rec.sample(|| m),
                }
            }
            return;
        }
    }

    fn after_issue(&mut self, c: usize, timed: bool) {
        match self.phase {
            Phase::Prefill => {
                let cl = &mut self.clients[c];
                cl.prefill_next += self.plan.connections as u64;
            }
            Phase::Run => {
                if timed {
                    self.issued += 1;
                }
                if let Some(replay) = &self.plan.replay {
                    let cl = &mut self.clients[c];
                    cl.cursor += 1;
                    if let Some(next) = replay.scripts[cl.script].get(cl.cursor) {
                        cl.next_intended = self.origin + next.at;
                    }
                } else if self.plan.open {
                    let cl = &mut self.clients[c];
                    cl.next_intended += cl.arrivals.gap();
                }
            }
        }
    }

    #[inline(always)]
    fn server_of(&mut self, kind: Kind, key: u64) -> usize {
        if self.plan.servers.len() == 1 && !self.plan.cluster {
            return 0;
        }
        self.server_among_many(kind, key)
    }

    /// `server_of` for a pool or a cluster: by the key's bytes (a cluster's keys' slots
    /// are looked up in `plan.key_slots` when it has them).
    fn server_among_many(&mut self, kind: Kind, key: u64) -> usize {
        let plan = self.plan;
        if plan.cluster {
            let slot = match plan.key_slots.get(key as usize) {
                Some(&slot) if kind != Kind::Incr => slot,
                _ => {
                    key_bytes(&mut self.kb, &plan.prefix, &plan.key_lengths, kind, key);
                    key_slot(&self.kb)
                }
            };
            let owner = self.slots[slot as usize];
            return if owner == UNOWNED { 0 } else { owner as usize };
        }
        key_bytes(&mut self.kb, &plan.prefix, &plan.key_lengths, kind, key);
        route(&self.kb, plan.servers.len())
    }

    /// Redis Cluster with `read_from_replicas`: where client `c`'s read of a key `primary`
    /// owns goes — the primary and each of its replicas in turn. A server with no replicas
    /// (a replica a `MOVED` named as owner after a failover, a node that joined) serves its
    /// reads itself, and so does the primary in the turn of a replica this client could not
    /// reach, until that one's retry time.
    fn read_server(&mut self, c: usize, primary: usize, now: u64) -> usize {
        let Some(replicas) = self.plan.replicas.get(primary).filter(|r| !r.is_empty()) else {
            return primary;
        };
        let turn = &mut self.turns[primary];
        let k = *turn as usize % (replicas.len() + 1);
        *turn = turn.wrapping_add(1);
        if k == 0 {
            return primary;
        }
        let replica = replicas[k - 1] as usize;
        let s = &self.socks[self.sock_of(c, replica)];
        if s.fd < 0 && now < s.retry_at {
            primary
        } else {
            replica
        }
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
        if let Some(replay) = &self.plan.replay {
            for cl in &self.clients {
                let rest =
                    &replay.scripts[cl.script][cl.cursor.min(replay.scripts[cl.script].len())..];
                self.rec.missed +=
                    rest.iter().take_while(|s| self.origin + s.at < end).count() as u64;
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
    if let Some(replay) = &plan.replay {
        for cl in w.clients.iter_mut() {
            cl.next_intended = w.origin + replay.scripts[cl.script].first().map_or(0, |s| s.at);
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

/// The name of server `server`: one of the plan's, or a cluster node that joined (`joined`).
fn node_name<'a>(plan: &'a Plan, joined: &'a [JoinedNode], server: usize) -> &'a str {
    match server.checked_sub(plan.servers.len()) {
        None => &plan.server_names[server],
        Some(j) => &joined[j].name,
    }
}

/// The short way of a plain-GET run's replies (`plain_gets`): the whole hits to GETs not to
/// verify at the front of socket `s`, recorded as the general loop of `input` records them;
/// returns how many. It stops at anything else (a miss, an error, a read to verify, a
/// prefill's reply, a reply not all here), which that loop reads next.
#[inline]
fn take_hits(s: &mut Sock, rec: &mut Recorder, max_bulk: usize, now: u64) -> usize {
    let mut done = 0;
    while s.inflight.len() > s.unstamped {
        let p = s.inflight.front().expect("more in flight than unwritten");
        if p.kind != Kind::Get || p.flags & P_VERIFY != 0 {
            break;
        }
        let Some((at, len)) = resp::whole_hit(&s.rbuf[s.rpos..], max_bulk) else {
            break;
        };
        complete_hit(rec, p, len, now);
        s.rpos += at + len + 2;
        s.inflight.pop_front();
        done += 1;
    }
    if done > 0 {
        s.need = 0;
        s.head_first = false; // values read whole: read as usual
    }
    done
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

/// A load thread's whole life: prefill, wait for the run to start, warm-up and the timed
/// phase, then what it measured.
pub(super) fn run(
    plan: &Plan,
    shared: &Shared,
    ti: usize,
    group: Vec<(usize, Vec<Option<Stream>>)>,
    share: u64,
) -> Recorder {
    let mut w = Worker {
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
        uring: None,
        retry_soon: false,
        slots: plan.slots.as_ref().map(|s| s.to_vec()).unwrap_or_default(),
        redirected: Vec::new(),
        slots_asked_at: None,
        joined: Vec::new(),
        room: plan.servers.len() + if plan.cluster { JOINED_MAX } else { 0 },
        turns: vec![0; plan.replicas.len()],
        corks: plan.cluster,
        plain_gets: plain_gets(plan)
            .then(|| resp::GetHeads::new(&plan.prefix))
            .flatten(),
        one_server: one_server(plan),
        primary: plan.sentinel.as_ref().map(|_| Primary {
            addr: plan.servers[0].clone(),
            name: plan.server_names[0].clone(),
            asked_at: None,
        }),
    };
    if plan.io != IoBackend::Epoll {
        // `run` probed io_uring already; a later failure here (e.g. memory limits) falls
        // back to epoll rather than failing the run. TLS too: rustls seals and opens the
        // records in the sockets' buffers (`tlsbuf.rs`).
        w.uring = Uring::new(w.room * (plan.connections / plan.threads + 1));
    }
    let mut pending_attach = Vec::new();
    for (g, per) in group {
        let c = w.clients.len();
        let first_sock = w.socks.len();
        debug_assert_eq!(per.len(), plan.servers.len());
        for (server, stream) in per.into_iter().enumerate() {
            let si = w.socks.len();
            let mut sock = Sock::new(server, c, plan.pipeline);
            match stream {
                Some(stream) => pending_attach.push((si, stream)),
                // A cluster replica, connected if a failover promotes it: buffers grow then.
                None => (sock.rbuf, sock.wbuf) = (Vec::new(), OutBuf::with_capacity(0)),
            }
            w.socks.push(sock);
        }
        for server in plan.servers.len()..w.room {
            // Room for a node that joins the cluster: buffers grow if one does.
            let mut sock = Sock::new(server, c, plan.pipeline);
            (sock.rbuf, sock.wbuf) = (Vec::new(), OutBuf::with_capacity(0));
            sock.sending = OutBuf::with_capacity(0);
            w.socks.push(sock);
        }
        w.clients.push(Client {
            first_sock,
            inflight: 0,
            next_intended: 0,
            arrivals: Arrivals::fixed(1.0),
            picker: KeyPicker::new(
                plan.key_count,
                g as u64 * plan.key_count / plan.connections as u64,
            ),
            prefill_next: g as u64,
            script: g,
            cursor: 0,
        });
    }
    for (si, stream) in pending_attach {
        w.attach(si, stream);
    }
    if plan.prefill {
        w.event_loop();
    }
    shared.ready.fetch_add(1, Ordering::AcqRel);
    let start = loop {
        let s = shared.run_start.load(Ordering::Acquire);
        if s != 0 {
            break s;
        }
        std::thread::sleep(Duration::from_micros(200));
    };
    // The start is set a little ahead, so that every thread begins on one clock: a thread
    // that began at once would send ops before it, executed but not timed.
    while shared.now() < start {
        std::thread::sleep(Duration::from_nanos(
            start.saturating_sub(shared.now()).min(200_000),
        ));
    }
    w.phase = Phase::Run;
    w.corks = plan.cluster && !plan.open;
    // `pipeline` is per connection, as memtier_benchmark and redis-benchmark --cluster count it:
    // a cluster client holds one socket per primary, and its keys spread evenly over them.
    w.depth = if w.slots.is_empty() {
        plan.pipeline
    } else {
        // Held or awaiting replies, at most a pipeline each per socket (`top_up_held`).
        2 * plan.pipeline * plan.connected_at_start()
    };
    w.measure_start = start + plan.warmup_ns;
    w.origin = w.measure_start;
    w.end = w.measure_start + plan.duration_ns;
    if shared.stop.load(Ordering::Relaxed) {
        w.end = start;
    }
    if plan.open {
        start_schedules(&mut w, plan, ti, start);
    }
    w.event_loop();
    w.uring_teardown();
    w.rec.outages.finish();
    w.rec.settle();
    w.rec.slots = std::mem::take(&mut w.slots);
    w.rec
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    /// One reply read the general way (`input`'s loop): `false` when it is not all here.
    fn general_step(s: &mut Sock, rec: &mut Recorder, plan: &Plan, now: u64) -> bool {
        let Some(p) = s.inflight.front().copied() else {
            return false;
        };
        let avail = &s.rbuf[s.rpos..];
        let Parse::Done(r) = proto::parse(plan.protocol, avail, p.kind, &plan.limits) else {
            return false;
        };
        let value = r.value.clone().map(|v| &avail[v]);
        complete(rec, plan, &p, &r, value, avail, now);
        s.rpos += r.consumed;
        s.inflight.pop_front();
        true
    }

    /// Random replies to a plain-GET run's reads (hits of any size, misses, errors, reads to
    /// verify, warm-up reads), arriving in random pieces, read the short way wherever it
    /// goes and the general way after each of its stops: recorded as the general way alone
    /// records them.
    #[test]
    fn the_short_way_of_replies_records_what_the_general_loop_records() {
        let plan = Config::from_json(
            r#"{"protocol":"resp2","servers":["127.0.0.1:1"],"mix":[{"op":"get","weight":1}]}"#,
        )
        .unwrap()
        .plan()
        .unwrap();
        let mut rng = Rng::new(11);
        let (mut stream, mut requests) = (Vec::new(), Vec::new());
        for i in 0..20_000u64 {
            requests.push(Pending {
                op: 0,
                kind: Kind::Get,
                timed: rng.below(8) != 0,
                intended: 1_000 + i,
                sent: 1_000 + i,
                bytes_out: 8,
                key: i,
                size: 0,
                flags: if rng.below(10) == 0 { P_VERIFY } else { 0 },
                hops: 0,
            });
            match rng.below(10) {
                0 => stream.extend_from_slice(b"$-1\r\n"),
                1 => stream.extend_from_slice(b"-ERR no such thing\r\n"),
                _ => {
                    let n = rng.below(300) as usize;
                    stream.extend_from_slice(format!("${n}\r\n").as_bytes());
                    stream.resize(stream.len() + n, b'v');
                    stream.extend_from_slice(b"\r\n");
                }
            }
        }
        let now = 9_000_000;
        let mut whole = Sock::new(0, 0, 16);
        whole.inflight.extend(requests.iter().copied());
        whole.rbuf = stream.clone();
        let mut reference = Recorder::new(1);
        while general_step(&mut whole, &mut reference, &plan, now) {}
        assert!(whole.inflight.is_empty() && whole.rpos == stream.len());

        let mut s = Sock::new(0, 0, 16);
        s.inflight.extend(requests.iter().copied());
        let mut rec = Recorder::new(1);
        let (mut at, mut short) = (0, 0);
        while at < stream.len() {
            let piece = (1 + rng.below(2_000) as usize).min(stream.len() - at);
            s.rbuf.extend_from_slice(&stream[at..at + piece]);
            at += piece;
            loop {
                short += take_hits(&mut s, &mut rec, plan.limits.max_bulk, now);
                if !general_step(&mut s, &mut rec, &plan, now) {
                    break;
                }
            }
        }
        assert!(s.inflight.is_empty() && s.rpos == stream.len());
        assert!(short > 10_000, "the short way took {short} of 20,000");
        reference.settle();
        rec.settle();
        assert_eq!(
            rec.ops[0].to_json(false, true),
            reference.ops[0].to_json(false, true)
        );
        assert_eq!(
            (rec.tally_ok, rec.tally_failed, rec.samples),
            (
                reference.tally_ok,
                reference.tally_failed,
                reference.samples
            )
        );
        assert!(reference.ops[0].errors[E_PROTOCOL] + reference.ops[0].errors[E_SERVER] > 0);
    }
}
