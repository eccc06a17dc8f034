//! Redis Cluster, the connecting part: before a cluster run connects its clients, one seed
//! is asked for `CLUSTER SLOTS` (blocking, over a connection with the usual handshake) and
//! the plan is rewritten to the primaries it names, with the owner of every hash slot, and
//! their replicas after them. Seeds are tried in order; the run is unavailable only when
//! none answers. A load thread that cannot reach a node asks the others again
//! ([`slot_ranges`]), so it follows a failover to a replica; a node that joins the cluster
//! during the run is learned from the first redirect to it ([`Joined`]).

use super::conn::{connect, read_some};
use super::error::RunError;
use crate::cluster::{parse_slots, SlotRange, SLOTS, UNOWNED};
use crate::config::{Plan, ServerAddr};
use crate::proto::{self, Kind, Parse};
use crate::tls::sni;
use rustls::pki_types::ServerName;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Largest `CLUSTER SLOTS` reply read (a cluster of hundreds of nodes fits easily).
const MAX_REPLY: usize = 8 << 20;

/// The plan with the cluster's primaries as its servers and their slots.
pub(super) fn resolve(plan: &Plan) -> Result<Plan, RunError> {
    let timeout = Duration::from_nanos(plan.timeout_ns.min(5_000_000_000));
    let mut why = Vec::new();
    for seed in 0..plan.servers.len() {
        match ask_seed(plan, seed, timeout) {
            Ok(p) => return Ok(p),
            Err(RunError::Unavailable(m)) => why.push(m),
            Err(other) => return Err(other),
        }
    }
    Err(RunError::Unavailable(format!(
        "no cluster seed gave its slot map: {}",
        why.join("; ")
    )))
}

/// The slot ranges node `server` of the plan gives (`CLUSTER SLOTS`, over a new connection
/// with the usual handshake): at the start from a seed, and during a run from any node a
/// load thread can still reach (`Cluster::refresh_slots`, `router/cluster.rs`).
pub(super) fn slot_ranges(
    plan: &Plan,
    server: usize,
    timeout: Duration,
) -> Result<Vec<SlotRange>, String> {
    let name = &plan.server_names[server];
    let mut s = connect(plan, server, timeout)?;
    s.set_nonblocking(false).map_err(|e| e.to_string())?;
    s.write_all(b"*2\r\n$7\r\nCLUSTER\r\n$5\r\nSLOTS\r\n")
        .map_err(|e| format!("{name}: cannot send CLUSTER SLOTS: {e}"))?;
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let limits = proto::Limits::for_values(MAX_REPLY);
    let consumed = loop {
        match proto::parse(plan.protocol, &buf, Kind::Setup, &limits) {
            Parse::Done(r) => break r.consumed,
            Parse::Need(_) if buf.len() < MAX_REPLY => {
                let n = read_some(&mut s, &mut chunk)
                    .map_err(|e| format!("{name}: no reply to CLUSTER SLOTS: {e}"))?;
                if n == 0 {
                    return Err(format!("{name}: connection closed during CLUSTER SLOTS"));
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            Parse::Need(_) => {
                return Err(format!(
                    "{name}: CLUSTER SLOTS reply larger than {MAX_REPLY} bytes"
                ))
            }
            Parse::Bad(m) => return Err(format!("{name}: bad reply to CLUSTER SLOTS: {m}")),
        }
    };
    let host = name
        .rsplit_once(':')
        .map_or(name.as_str(), |(h, _)| h)
        .trim_matches(['[', ']']);
    parse_slots(&buf[..consumed], host).map_err(|m| format!("{name}: {m}"))
}

fn ask_seed(plan: &Plan, seed: usize, timeout: Duration) -> Result<Plan, RunError> {
    let name = &plan.server_names[seed];
    let ranges = slot_ranges(plan, seed, timeout).map_err(RunError::Unavailable)?;
    let mut names: Vec<String> = Vec::new();
    let mut slots = vec![UNOWNED; SLOTS];
    for r in &ranges {
        let i = match names.iter().position(|n| *n == r.addr) {
            Some(i) => i,
            None => {
                names.push(r.addr.clone());
                names.len() - 1
            }
        };
        slots[r.first as usize..=r.last as usize].fill(i as u16);
    }
    if names.is_empty() {
        return Err(RunError::Unavailable(format!(
            "{name}: the cluster serves no slots yet (CLUSTER SLOTS is empty)"
        )));
    }
    // The replicas follow the primaries in `servers`, each primary listing its own: read from
    // with `read_from_replicas`, and a known address when a failover promotes one (the load
    // threads connect to them only then, or when they are read from).
    let primaries = names.len();
    let mut replicas: Vec<Vec<u16>> = vec![Vec::new(); primaries];
    for r in &ranges {
        let owner = names
            .iter()
            .position(|n| *n == r.addr)
            .expect("named above");
        for addr in &r.replicas {
            let i = match names.iter().position(|n| n == addr) {
                Some(i) => i,
                None => {
                    names.push(addr.clone());
                    replicas.push(Vec::new());
                    names.len() - 1
                }
            };
            if i >= primaries && !replicas[owner].contains(&(i as u16)) {
                replicas[owner].push(i as u16);
            }
        }
    }
    let servers = names
        .iter()
        .map(|n| ServerAddr::parse(n))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|m| RunError::Unavailable(format!("{name}: CLUSTER SLOTS: {m}")))?;
    let mut out = plan.clone();
    if plan.tls.is_some() {
        // Every node is verified by its own name, as the seeds were.
        out.tls_names = names
            .iter()
            .map(|n| sni(plan.tls_server_name.as_deref(), n))
            .collect::<Result<Vec<_>, _>>()
            .map_err(RunError::Spec)?;
    }
    out.servers = servers;
    out.server_names = names;
    out.slots = Some(Arc::new(slots));
    out.primaries = primaries;
    out.replicas = Arc::new(replicas);
    Ok(out)
}

/// Nodes a run follows beyond those of the slot map read at the start (a cluster grown by
/// resharding while it runs): each client keeps a socket's room for each.
pub(super) const JOINED_MAX: usize = 8;

/// A node the slot map read at the start did not name, learned during the run from a
/// redirect to it or a refreshed slot map: one added to the cluster and given slots. Its
/// index is `plan.servers.len()` + its place in [`Joined`], the same in every load thread.
#[derive(Clone)]
pub(super) struct JoinedNode {
    pub(super) addr: ServerAddr,
    pub(super) name: String,
    /// Verified by its own address, as the nodes of the start map are (TLS only).
    pub(super) tls_name: Option<ServerName<'static>>,
}

/// The run's joined nodes, in the order the load threads learned them (each thread keeps a
/// copy, refreshed when it meets an address it does not know).
#[derive(Default)]
pub(super) struct Joined(Mutex<Vec<JoinedNode>>);

impl Joined {
    /// Adds node `addr` (`host:port`, as a node named it) unless known; the nodes known now.
    /// Past [`JOINED_MAX`], or for an address that cannot be connected to, says why not.
    pub(super) fn learn(&self, plan: &Plan, addr: &str) -> Result<Vec<JoinedNode>, String> {
        let mut nodes = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if !nodes.iter().any(|n| n.name == addr) {
            if nodes.len() >= JOINED_MAX {
                return Err(format!(
                    "{addr}: a node that joined the cluster during the run, after the {JOINED_MAX} followed"
                ));
            }
            let tls_name = match plan.tls {
                Some(_) => Some(sni(plan.tls_server_name.as_deref(), addr)?),
                None => None,
            };
            nodes.push(JoinedNode {
                addr: ServerAddr::parse(addr).map_err(|m| format!("{addr}: {m}"))?,
                name: addr.to_string(),
                tls_name,
            });
        }
        Ok(nodes.clone())
    }

    /// Their addresses, for the result.
    pub(super) fn names(&self) -> Vec<String> {
        let nodes = self.0.lock().unwrap_or_else(|e| e.into_inner());
        nodes.iter().map(|n| n.name.clone()).collect()
    }

    /// `plan` with the joined nodes after its own: a load thread's last slot map may name them.
    pub(super) fn extend(&self, plan: &Plan) -> Plan {
        let mut out = plan.clone();
        for n in self.0.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            out.servers.push(n.addr.clone());
            out.server_names.push(n.name.clone());
            out.tls_names.extend(n.tls_name.clone());
        }
        out
    }
}
