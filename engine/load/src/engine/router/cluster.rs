//! Redis Cluster, the routing part: a load thread's slot map (slot → server), corrected by
//! `MOVED` and refreshed from the nodes when one cannot be reached; the redirects of the
//! reply being read; the nodes that joined during the run; with `read_from_replicas`, the
//! turn of each primary's next read. The slot map read at the start and the joined nodes
//! every thread shares are `topology.rs`'s.

use super::super::conn::{connect, connect_to, Pending, MAX_HOPS, P_ASKING};
use super::super::record::{record_error, Recorder, E_SERVER};
use super::super::shared::Shared;
use super::super::stream::Stream;
use super::super::topology::{self, JoinedNode};
use super::{ASK_EVERY_NS, ASK_TIMEOUT_NS};
use crate::cluster::{key_slot, parse_redirect, UNOWNED};
use crate::config::Plan;
use crate::proto::{key_bytes, Kind, Outcome, Reply};
use std::time::Duration;

/// What goes before a request sent to the node a slot is migrating to (`ASK`).
pub(in crate::engine) const ASKING: &[u8] = b"*1\r\n$6\r\nASKING\r\n";

/// A request a node redirected: to node `to` (`host:port`), for slot `slot`; `ask`: once,
/// behind `ASKING`, else (`MOVED`) for good.
pub(in crate::engine) struct Redirect {
    pub(in crate::engine) p: Pending,
    pub(in crate::engine) ask: bool,
    pub(in crate::engine) slot: u16,
    pub(in crate::engine) to: String,
}

/// One load thread's view of the cluster.
pub(in crate::engine) struct Cluster {
    slots: Vec<u16>,
    /// The redirected requests of the reply being read, followed once it is read.
    redirects: Vec<Redirect>,
    /// This thread's copy of the nodes that joined during the run (servers
    /// `plan.servers.len()..`).
    joined: Vec<JoinedNode>,
    /// When this thread last asked the nodes for the slot map (`refresh_slots`).
    slots_asked_at: Option<u64>,
    /// With `read_from_replicas`: per primary, the turn of its next read (0: the primary,
    /// k: its k-th replica), as redis-py's `ROUND_ROBIN` keeps it.
    turns: Vec<u32>,
}

impl Cluster {
    pub(super) fn new(plan: &Plan) -> Cluster {
        Cluster {
            slots: plan.slots.as_ref().map(|s| s.to_vec()).unwrap_or_default(),
            redirects: Vec::new(),
            joined: Vec::new(),
            slots_asked_at: None,
            turns: vec![0; plan.replicas.len()],
        }
    }

    /// The name of server `server`: one of the plan's, or a node that joined.
    pub(super) fn node_name<'a>(&'a self, plan: &'a Plan, server: usize) -> &'a str {
        match server.checked_sub(plan.servers.len()) {
            None => &plan.server_names[server],
            Some(j) => &self.joined[j].name,
        }
    }

    /// Opens a connection to server `server`: one of the plan's, or a node that joined.
    pub(super) fn connect(
        &self,
        plan: &Plan,
        server: usize,
        wait: Duration,
    ) -> Result<Stream, String> {
        match server.checked_sub(plan.servers.len()) {
            None => connect(plan, server, wait),
            Some(j) => {
                let n = &self.joined[j];
                let tls = plan.tls.as_ref().zip(n.tls_name.as_ref());
                connect_to(plan, &n.addr, &n.name, tls, wait)
            }
        }
    }

    /// The server index of node `addr` (as a redirect or slot map names it); a node the
    /// start map did not name has joined the cluster: learned (by every thread), and
    /// connected to on first use.
    fn node_index(&mut self, plan: &Plan, shared: &Shared, addr: &str) -> Result<usize, String> {
        let base = plan.servers.len();
        let known = |joined: &[JoinedNode]| joined.iter().position(|n| n.name == addr);
        if let Some(i) = plan.server_names.iter().position(|n| n == addr) {
            return Ok(i);
        }
        if let Some(j) = known(&self.joined) {
            return Ok(base + j);
        }
        self.joined = shared.joined.learn(plan, addr)?;
        Ok(base + known(&self.joined).expect("learned"))
    }

    /// The server that owns a key's slot (a slot no node owns yet: the first). The slot is
    /// looked up in `plan.key_slots` when it has the key, else hashed from its bytes.
    #[inline]
    pub(in crate::engine) fn owner_of(
        &self,
        plan: &Plan,
        kb: &mut Vec<u8>,
        kind: Kind,
        key: u64,
    ) -> usize {
        let slot = match plan.key_slots.get(key as usize) {
            Some(&slot) if kind != Kind::Incr => slot,
            _ => {
                key_bytes(kb, &plan.prefix, &plan.key_lengths, kind, key);
                key_slot(kb)
            }
        };
        let owner = self.slots[slot as usize];
        if owner == UNOWNED {
            0
        } else {
            owner as usize
        }
    }

    /// With `read_from_replicas`: where a read of a key `primary` owns goes — the primary and
    /// each of its replicas in turn. A server with no replicas (a replica a `MOVED` named as
    /// owner after a failover, a node that joined) serves its reads itself, and so does the
    /// primary in the turn of a replica `backing_off` (this client could not reach it, and
    /// its retry time has not come).
    #[inline]
    pub(in crate::engine) fn read_server(
        &mut self,
        plan: &Plan,
        primary: usize,
        backing_off: impl Fn(usize) -> bool,
    ) -> usize {
        let Some(replicas) = plan.replicas.get(primary).filter(|r| !r.is_empty()) else {
            return primary;
        };
        let turn = &mut self.turns[primary];
        let k = *turn as usize % (replicas.len() + 1);
        *turn = turn.wrapping_add(1);
        if k == 0 {
            return primary;
        }
        let replica = replicas[k - 1] as usize;
        if backing_off(replica) {
            primary
        } else {
            replica
        }
    }

    /// Takes a reply that is no op's own: `ASKING`'s `+OK` (an error would show in the
    /// request behind it), or a redirect, kept to be followed once the read is done.
    #[inline]
    pub(super) fn take_reply(&mut self, p: &Pending, r: &Reply, avail: &[u8]) -> bool {
        if p.flags & P_ASKING != 0 {
            return true;
        }
        if r.outcome != Outcome::ServerError {
            return false;
        }
        let Some(to) = r
            .message
            .as_ref()
            .and_then(|m| parse_redirect(&avail[m.clone()]))
        else {
            return false;
        };
        self.redirects.push(Redirect {
            p: *p,
            ask: to.ask,
            slot: to.slot,
            to: to.addr.to_string(),
        });
        true
    }

    #[inline]
    pub(super) fn has_redirects(&self) -> bool {
        !self.redirects.is_empty()
    }

    /// The redirects of the last read, to follow; hand the list back (`give_back`) to keep
    /// its room.
    pub(in crate::engine) fn take_redirects(&mut self) -> Vec<Redirect> {
        std::mem::take(&mut self.redirects)
    }

    pub(in crate::engine) fn give_back(&mut self, mut redirects: Vec<Redirect>) {
        redirects.clear();
        self.redirects = redirects;
    }

    /// Where redirect `r` goes now: counts it (`ask` or `moved`), learns the node it names
    /// and, for `MOVED`, corrects this thread's slot map. `None` when it cannot be followed
    /// (the node is a joined one past `JOINED_MAX`, or the request was redirected more than
    /// `MAX_HOPS` times: nodes that disagree): the op is then a `server` error, recorded.
    pub(in crate::engine) fn follow(
        &mut self,
        plan: &Plan,
        shared: &Shared,
        rec: &mut Recorder,
        r: &mut Redirect,
        now: u64,
    ) -> Option<usize> {
        if r.ask {
            rec.ask += 1;
        } else {
            rec.moved += 1;
        }
        let slot = r.slot;
        let server = match self.node_index(plan, shared, &r.to) {
            Ok(server) => server,
            Err(m) => {
                record_error(rec, plan, &r.p, E_SERVER, now);
                rec.sample(|| format!("slot {slot} redirected to {m}"));
                return None;
            }
        };
        r.p.hops += 1;
        if r.p.hops > MAX_HOPS {
            record_error(rec, plan, &r.p, E_SERVER, now);
            rec.sample(|| {
                format!("slot {slot}: redirected more than {MAX_HOPS} times (nodes disagree)")
            });
            return None;
        }
        if !r.ask {
            self.slots[slot as usize] = server as u16;
        }
        Some(server)
    }

    /// Node `down` cannot be reached, so its slots may have moved (a failover promotes a
    /// replica; no node that is down can answer `MOVED`). The other nodes are asked for the
    /// slot map, at most every `ASK_EVERY_NS` per thread, and each slot goes to the node now
    /// named (a primary or replica of the map read at the start, or a node that joined
    /// since); the next requests for those slots go there. Slots no node owns yet stay
    /// where they were.
    pub(super) fn refresh_slots(
        &mut self,
        plan: &Plan,
        shared: &Shared,
        rec: &mut Recorder,
        down: usize,
    ) {
        let now = shared.now();
        if self
            .slots_asked_at
            .is_some_and(|t| now < t.saturating_add(ASK_EVERY_NS))
        {
            return;
        }
        self.slots_asked_at = Some(now);
        let wait = Duration::from_nanos(plan.timeout_ns.min(ASK_TIMEOUT_NS));
        for server in (0..plan.servers.len()).filter(|&s| s != down) {
            let Ok(ranges) = topology::slot_ranges(plan, server, wait) else {
                continue; // down too, or not answering: the next node
            };
            for r in &ranges {
                match self.node_index(plan, shared, &r.addr) {
                    Ok(owner) => self.slots[r.first as usize..=r.last as usize].fill(owner as u16),
                    Err(m) => rec.sample(|| m),
                }
            }
            return;
        }
    }

    pub(super) fn slot_map(&self) -> &[u16] {
        &self.slots
    }

    pub(super) fn into_slot_map(self) -> Vec<u16> {
        self.slots
    }
}
