//! A load thread's issuing: what each client sends when (the prefill's keys, a replay's
//! steps, drawn ops), to which socket (a pool's hash, or the router's answer for a cluster),
//! encoded into the socket's write buffer — or held, for a cluster client's whole pipelines
//! — and the requests a cluster node redirected, sent again. Two short ways skip the
//! general path's choices: `issue_get` (plain GETs) and `issue_drawn` (one server).

use super::super::conn::{Pending, P_ASKING, P_COUNTER, P_RESENT, P_VERIFY};
use super::super::record::{record_error, E_CONNECTION, INTERNAL};
use super::super::router::{Router, ASKING};
use super::{Issue, Phase, Worker};
use crate::keyspace::route;
use crate::proto::common::PREFILL_SET;
use crate::proto::{encode, encode_counter, key_bytes, Kind, Request};
use crate::replay::Step;

impl Worker<'_> {
    /// Issues requests for client `c` while it may, then writes them.
    #[inline]
    pub(super) fn top_up(&mut self, c: usize, now: u64) {
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
    pub(super) fn top_up_held(&mut self, c: usize, now: u64) {
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
    pub(super) fn send_held(&mut self, c: usize, partial: bool) {
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
    pub(super) fn issue(&mut self, c: usize, now: u64) -> Issue {
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
        let (op_idx, kind, intended, size) = self.next_op(c, now);
        let owner = self.server_of(kind, self.keys[0]);
        let timed = self.phase == Phase::Run && intended >= self.measure_start;
        let si = match self.sock_for(c, owner, op_idx, kind, now) {
            Ok(si) => si,
            Err(m) => {
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
        };
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

    /// The general path's next op for client `c`, its keys in `self.keys`: the prefill's next
    /// key, a replay's next step, or a drawn op; with when it was due and its value size.
    #[inline(always)]
    fn next_op(&mut self, c: usize, now: u64) -> (u16, Kind, u64, usize) {
        let plan = self.plan;
        match self.phase {
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
                let step = self.replay_step(c);
                let op = &plan.ops[step.op as usize];
                self.keys.clear();
                self.keys.push(step.key);
                let intended = if plan.open {
                    self.clients[c].next_intended
                } else {
                    now
                };
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
        }
    }

    /// Client `c`'s socket for an op on a key of server `owner`: the owner's, or for a read
    /// from a cluster's replicas the server in turn. A socket that is down is reconnected;
    /// `Err` as `reconnect`'s when that failed.
    #[inline(always)]
    fn sock_for(
        &mut self,
        c: usize,
        owner: usize,
        op_idx: u16,
        kind: Kind,
        now: u64,
    ) -> Result<usize, Option<String>> {
        let mut si = if self.plan.read_from_replicas
            && op_idx != INTERNAL
            && matches!(kind, Kind::Get | Kind::Gets | Kind::Exists | Kind::MGet(_))
        {
            let server = self.read_server(c, owner, now);
            self.sock_of(c, server)
        } else {
            self.sock_of(c, owner)
        };
        if self.socks[si].fd >= 0 {
            return Ok(si);
        }
        let mut connected = self.reconnect(si, now);
        if connected.is_err() && self.socks[si].server != owner {
            // A replica that cannot be reached: the read goes to its primary, as
            // redis-py's retry goes to the next node, and so do the next ones until
            // the replica's retry time (`Cluster::read_server`).
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
        connected.map(|()| si)
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

    /// Redis Cluster: sends the requests a node redirected to the node the router says, on
    /// client `c`'s socket there (`Cluster::follow`: `MOVED` corrects the slot map, `ASK`
    /// goes once, behind `ASKING`). A request keeps its first send's times, so its latency
    /// includes the detour.
    pub(super) fn follow_redirects(&mut self, c: usize, now: u64) {
        let plan = self.plan;
        let Some(cluster) = self.router.cluster() else {
            return;
        };
        let mut redirects = cluster.take_redirects();
        for r in &mut redirects {
            let cluster = self.router.cluster().expect("redirects are a cluster's");
            let Some(server) = cluster.follow(plan, self.shared, &mut self.rec, r, now) else {
                continue;
            };
            let si = self.sock_of(c, server);
            if self.socks[si].fd < 0 {
                if let Err(m) = self.reconnect(si, now) {
                    record_error(&mut self.rec, plan, &r.p, E_CONNECTION, self.shared.now());
                    if let Some(m) = m {
                        self.rec.sample(|| m);
                    }
                    continue;
                }
            }
            self.resend(si, c, r.p, r.ask);
        }
        if let Some(cluster) = self.router.cluster() {
            cluster.give_back(redirects);
        }
    }

    /// Sends redirected request `p` again on socket `si` of client `c`, behind `ASKING`
    /// when `ask`.
    fn resend(&mut self, si: usize, c: usize, mut p: Pending, ask: bool) {
        let mut queued = 1;
        if ask {
            let s = &mut self.socks[si];
            s.release_held(); // the wire keeps the order of `inflight`
            s.wbuf.extend_from_slice(ASKING);
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

    pub(super) fn after_issue(&mut self, c: usize, timed: bool) {
        match self.phase {
            Phase::Prefill => {
                let cl = &mut self.clients[c];
                cl.prefill_next += self.plan.connections as u64;
            }
            Phase::Run => {
                if timed {
                    self.issued += 1;
                }
                if self.plan.replay.is_some() {
                    self.next_step(c);
                } else if self.plan.open {
                    let cl = &mut self.clients[c];
                    cl.next_intended += cl.arrivals.gap();
                }
            }
        }
    }

    /// Replay: client `c`'s next step (`may_issue` saw one left: `script_left`). Not inlined,
    /// nor is `next_step`: the paths of drawn ops stay as short as without a trace.
    #[inline(never)]
    fn replay_step(&self, c: usize) -> Step {
        let script = self.clients[c].script.as_ref();
        script.and_then(|s| s.peek()).expect("a step left")
    }

    /// Replay: client `c` moves on to its next step, due at its recorded time.
    #[inline(never)]
    fn next_step(&mut self, c: usize) {
        let cl = &mut self.clients[c];
        if let Some(script) = &mut cl.script {
            script.advance();
            if let Some(next) = script.peek() {
                cl.next_intended = self.origin + next.at;
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

    /// `server_of` for a pool or a cluster: a pool's server by the key's bytes, a cluster's
    /// by its slot (`Cluster::owner_of`).
    fn server_among_many(&mut self, kind: Kind, key: u64) -> usize {
        let plan = self.plan;
        if let Router::Cluster(cluster) = &self.router {
            return cluster.owner_of(plan, &mut self.kb, kind, key);
        }
        key_bytes(&mut self.kb, &plan.prefix, &plan.key_lengths, kind, key);
        route(&self.kb, plan.servers.len())
    }

    /// Redis Cluster with `read_from_replicas`: the server in turn for client `c`'s read of a
    /// key `primary` owns (`Cluster::read_server`); a replica this client could not reach
    /// sits its turns out until its retry time.
    fn read_server(&mut self, c: usize, primary: usize, now: u64) -> usize {
        let plan = self.plan;
        let first = self.clients[c].first_sock;
        let socks = &self.socks;
        match self.router.cluster() {
            Some(cluster) => cluster.read_server(plan, primary, |replica| {
                let s = &socks[first + replica];
                s.fd < 0 && now < s.retry_at
            }),
            None => primary,
        }
    }
}
