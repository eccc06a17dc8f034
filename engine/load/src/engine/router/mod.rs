//! Where a load thread's requests go, and whom a reconnect connects to, when that is more
//! than the plan's list of servers: a Redis Cluster's slot map, redirects, replica turns
//! and joined nodes (`cluster.rs`, as memtier_benchmark keeps its cluster routing in a
//! client of its own), or the primary the Sentinels name now (`primary.rs`). The router
//! decides; the worker owns the sockets and does the I/O. A run against one server or a
//! memcached pool routes `Plain`: the worker's short paths never call in here.

mod cluster;
mod primary;

use super::conn::{connect, Pending};
use super::record::Recorder;
use super::shared::Shared;
use super::stream::Stream;
use crate::config::Plan;
use crate::proto::Reply;
use std::time::Duration;

pub(super) use cluster::{Cluster, ASKING};
pub(super) use primary::Primary;

/// Least time between two questions of one thread about where the servers are (the
/// Sentinels, or a cluster's nodes after one could not be reached): a closed-loop client
/// reconnects per op while a server is down.
const ASK_EVERY_NS: u64 = 100_000_000;
/// The most one such question may block its thread per node asked (connect, then the reply).
const ASK_TIMEOUT_NS: u64 = 500_000_000;

/// A load thread's routing beyond its plan's servers.
pub(super) enum Router {
    /// The plan's servers as they are: one server, or a memcached pool (the worker hashes
    /// keys over it).
    Plain,
    Cluster(Cluster),
    Sentinel(Primary),
}

impl Router {
    pub(super) fn new(plan: &Plan) -> Router {
        if plan.cluster {
            Router::Cluster(Cluster::new(plan))
        } else if plan.sentinel.is_some() {
            Router::Sentinel(Primary::new(plan))
        } else {
            Router::Plain
        }
    }

    /// The name of server `server` for messages: the primary followed now with Sentinels, a
    /// joined node's address in a cluster, else the plan's name.
    pub(super) fn name<'a>(&'a self, plan: &'a Plan, server: usize) -> &'a str {
        match self {
            Router::Sentinel(p) => p.name(),
            Router::Cluster(c) => c.node_name(plan, server),
            Router::Plain => &plan.server_names[server],
        }
    }

    /// Opens a new connection for a socket to server `server` (a reconnect): the primary the
    /// Sentinels name now, a cluster node (one that joined, too), or the plan's server.
    pub(super) fn connect(
        &mut self,
        plan: &Plan,
        shared: &Shared,
        rec: &mut Recorder,
        server: usize,
        wait: Duration,
    ) -> Result<Stream, String> {
        match self {
            Router::Sentinel(p) => p.connect(plan, shared, rec, wait),
            Router::Cluster(c) => c.connect(plan, server, wait),
            Router::Plain => connect(plan, server, wait),
        }
    }

    /// Server `server` could not be reached: a cluster's slots may have moved away from it.
    pub(super) fn unreachable(
        &mut self,
        plan: &Plan,
        shared: &Shared,
        rec: &mut Recorder,
        server: usize,
    ) {
        if let Router::Cluster(c) = self {
            c.refresh_slots(plan, shared, rec, server);
        }
    }

    /// A reply that is no op's own (a cluster's `ASKING` `+OK`, or a redirect kept to be
    /// followed once the read is done): true when it was taken here.
    #[inline]
    pub(super) fn took(&mut self, p: &Pending, r: &Reply, avail: &[u8]) -> bool {
        match self {
            Router::Cluster(c) => c.take_reply(p, r, avail),
            _ => false,
        }
    }

    /// Whether a failed reply says the primary the Sentinels named was demoted to a replica
    /// (`READONLY`): the socket is closed once its replies are read, and the reconnect asks
    /// the Sentinels again.
    #[inline]
    pub(super) fn demoted(&self, r: &Reply, avail: &[u8]) -> bool {
        matches!(self, Router::Sentinel(_))
            && r.message
                .as_ref()
                .is_some_and(|m| avail[m.clone()].starts_with(b"READONLY"))
    }

    /// Whether the last read left redirects to follow (`Cluster::take_redirects`).
    #[inline]
    pub(super) fn has_redirects(&self) -> bool {
        match self {
            Router::Cluster(c) => c.has_redirects(),
            _ => false,
        }
    }

    /// The cluster's routing, for what only a cluster does (redirects, replica turns).
    #[inline]
    pub(super) fn cluster(&mut self) -> Option<&mut Cluster> {
        match self {
            Router::Cluster(c) => Some(c),
            _ => None,
        }
    }

    /// This thread's slot map (empty when not a cluster).
    pub(super) fn slot_map(&self) -> &[u16] {
        match self {
            Router::Cluster(c) => c.slot_map(),
            _ => &[],
        }
    }

    /// The slot map at the end of the run: the result's, for the canaries to follow.
    pub(super) fn into_slot_map(self) -> Vec<u16> {
        match self {
            Router::Cluster(c) => c.into_slot_map(),
            _ => Vec::new(),
        }
    }
}
