//! The run configuration (JSON from Python) and its validation into a [`Plan`]: the
//! read-only description every load thread shares. Anything a user can get wrong
//! fails here with one clear line, before a connection is opened. [`Config::plan`] checks
//! the sections in order, each by the module that owns it: the target (`target.rs`:
//! servers, TLS, credentials, cluster, Sentinels), the load's size and time (`limits.rs`),
//! keys (`keys.rs`), values (`values.rs`) and the mix (`mix.rs`).

mod keys;
mod limits;
mod mix;
mod target;
mod values;

use crate::keyspace::{make_filler, KeyDist, ValueSizes};
pub use crate::proto::{Kind, Limits, OpPlan, Protocol, Seg};
use crate::replay::Replay;
use crate::tls::TlsConfig;
use rustls::pki_types::ServerName;
use serde::Deserialize;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;

/// How load threads do I/O: io_uring batches every socket's sends and receives into
/// one system call per round; epoll is the portable fallback. `auto` picks io_uring
/// when the kernel allows it.
#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum IoBackend {
    Auto,
    Uring,
    Epoll,
}

#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Closed,
    Open,
}

/// What a phase does when its server stops answering: `stop` once every op of the last
/// `error_grace_s` seconds failed (the result says why), or `continue` to the deadline.
#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    Stop,
    Continue,
}

/// Open-loop arrivals: evenly spaced, a Poisson process (exponential gaps), or Facebook
/// ETC's generalised-Pareto gaps.
#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Arrival {
    Fixed,
    Poisson,
    Etc,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct KeysConfig {
    #[serde(default = "d_key_count")]
    pub count: u64,
    #[serde(default = "d_prefix")]
    pub prefix: String,
    #[serde(default = "d_dist")]
    pub dist: String,
    #[serde(default = "d_zipf")]
    pub zipf_s: f64,
    #[serde(default = "d_hot_fraction")]
    pub hot_fraction: f64,
    #[serde(default = "d_hot_prob")]
    pub hot_prob: f64,
    /// Key `i` is padded to `lengths[h(i)]` bytes (`keyspace::write_key`); empty: plain keys.
    #[serde(default)]
    pub lengths: Vec<u16>,
}

#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct ValuesConfig {
    pub sizes: Option<Vec<(usize, f64)>>,
    pub min: Option<usize>,
    pub max: Option<usize>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct MixEntry {
    pub op: String,
    #[serde(default = "d_weight")]
    pub weight: f64,
    pub count: Option<u32>,
    pub name: Option<String>,
    pub args: Option<Vec<String>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub protocol: Protocol,
    pub servers: Vec<String>,
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default)]
    pub password: Option<String>,
    #[serde(default)]
    pub db: u32,
    #[serde(default = "d_one")]
    pub threads: usize,
    #[serde(default = "d_connections")]
    pub connections: usize,
    #[serde(default = "d_one")]
    pub pipeline: usize,
    #[serde(default = "d_mode")]
    pub mode: Mode,
    #[serde(default)]
    pub rate: Option<f64>,
    #[serde(default = "d_duration")]
    pub duration_s: f64,
    #[serde(default)]
    pub ops: Option<u64>,
    #[serde(default)]
    pub warmup_s: f64,
    #[serde(default = "d_true")]
    pub prefill: bool,
    #[serde(default = "d_keys")]
    pub keys: KeysConfig,
    #[serde(default)]
    pub values: ValuesConfig,
    #[serde(default = "d_mix")]
    pub mix: Vec<MixEntry>,
    #[serde(default)]
    pub ttl_s: u64,
    #[serde(default = "d_verify")]
    pub verify_fraction: f64,
    #[serde(default = "d_one_u64")]
    pub seed: u64,
    #[serde(default = "d_timeout")]
    pub timeout_ms: u64,
    #[serde(default = "d_io")]
    pub io: IoBackend,
    #[serde(default = "d_on_error")]
    pub on_error: OnError,
    #[serde(default = "d_grace")]
    pub error_grace_s: f64,
    #[serde(default = "d_arrival")]
    pub arrival: Arrival,
    /// TLS on every connection (`crate::tls`); epoll only.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// A recorded trace replayed instead of drawn ops (`crate::replay`).
    #[serde(default)]
    pub replay: Option<ReplayConfig>,
    /// Redis Cluster: `servers` are seeds; the slot map they give decides where keys go.
    #[serde(default)]
    pub cluster: bool,
    /// Redis Cluster: reads (get, gets, exists) also go to the replicas `CLUSTER SLOTS`
    /// names, in rotation with their primary (redis-py's `ROUND_ROBIN`); writes to the primary.
    #[serde(default)]
    pub read_from_replicas: bool,
    /// Redis Sentinel: `servers` names the primary at the start; a reconnect asks these
    /// Sentinels which address is primary now (`engine/sentinel.rs`).
    #[serde(default)]
    pub sentinel: Option<SentinelConfig>,
}

/// The Sentinels watching a RESP target's primary (`redis+sentinel://`).
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct SentinelConfig {
    /// `host:port` of each Sentinel, asked in this order.
    pub sentinels: Vec<String>,
    /// The service (master) name the Sentinels know the primary by.
    pub service: String,
    /// The Sentinels' own password (`AUTH`), if they want one.
    #[serde(default)]
    pub password: Option<String>,
}

/// Validated [`SentinelConfig`]: the Sentinels' addresses and names (for messages).
#[derive(Debug, Clone)]
pub struct SentinelPlan {
    pub addrs: Vec<ServerAddr>,
    pub names: Vec<String>,
    pub service: String,
    pub password: Option<String>,
}

/// Where a prepared replay's arrays are (`crate::replay`).
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct ReplayConfig {
    pub dir: PathBuf,
}

fn d_on_error() -> OnError {
    OnError::Stop
}
fn d_grace() -> f64 {
    2.0
}
fn d_arrival() -> Arrival {
    Arrival::Fixed
}

fn d_io() -> IoBackend {
    IoBackend::Auto
}

fn d_key_count() -> u64 {
    10_000
}
fn d_prefix() -> String {
    "cm:engine:".into()
}
fn d_dist() -> String {
    "uniform".into()
}
fn d_zipf() -> f64 {
    0.99
}
fn d_hot_fraction() -> f64 {
    0.2
}
fn d_hot_prob() -> f64 {
    0.8
}
fn d_weight() -> f64 {
    1.0
}
fn d_one() -> usize {
    1
}
fn d_one_u64() -> u64 {
    1
}
fn d_connections() -> usize {
    50
}
fn d_mode() -> Mode {
    Mode::Closed
}
fn d_duration() -> f64 {
    5.0
}
fn d_true() -> bool {
    true
}
fn d_keys() -> KeysConfig {
    serde_json::from_str("{}").expect("defaults")
}
fn d_mix() -> Vec<MixEntry> {
    vec![MixEntry {
        op: "get".into(),
        weight: 1.0,
        count: None,
        name: None,
        args: None,
    }]
}
fn d_verify() -> f64 {
    0.01
}
fn d_timeout() -> u64 {
    5000
}

/// Where a server listens: `host:port`, or `unix:/path/to.sock` (a Unix domain socket).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl ServerAddr {
    pub fn parse(s: &str) -> Result<ServerAddr, String> {
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(format!(
                    "server {s:?}: a Unix socket needs a path (unix:/path)"
                ));
            }
            return Ok(ServerAddr::Unix(PathBuf::from(path)));
        }
        s.to_socket_addrs()
            .map_err(|e| format!("server {s:?} is not host:port or unix:/path ({e})"))?
            .next()
            .map(ServerAddr::Tcp)
            .ok_or_else(|| format!("server {s:?} resolves to no address"))
    }
}

/// Everything the load threads share, validated.
#[derive(Debug, Clone)]
pub struct Plan {
    pub protocol: Protocol,
    pub servers: Vec<ServerAddr>,
    pub server_names: Vec<String>,
    /// TLS: one client configuration for all connections, and each server's name (SNI).
    pub tls: Option<Arc<rustls::ClientConfig>>,
    pub tls_names: Vec<ServerName<'static>>,
    /// The `tls` section's `server_name`, for names of servers learnt later (cluster nodes).
    pub tls_server_name: Option<String>,
    pub username: Option<String>,
    pub password: Option<String>,
    pub db: u32,
    pub threads: usize,
    pub connections: usize,
    pub pipeline: usize,
    pub open: bool,
    pub rate: f64,
    pub arrival: Arrival,
    /// `on_error: stop`: how long only errors may last before the phase stops (ns).
    pub error_grace_ns: Option<u64>,
    pub duration_ns: u64,
    pub ops_limit: Option<u64>,
    pub warmup_ns: u64,
    pub prefill: bool,
    pub key_count: u64,
    pub prefix: Vec<u8>,
    pub key_lengths: Vec<u16>,
    pub dist: KeyDist,
    pub sizes: ValueSizes,
    pub filler: Vec<u8>,
    pub ops: Vec<OpPlan>,
    /// Cumulative mix weights, normalised to end at 1.0.
    pub cumulative: Vec<f64>,
    pub ttl_s: u64,
    pub verify_fraction: f64,
    pub seed: u64,
    pub timeout_ns: u64,
    pub io: IoBackend,
    pub limits: Limits,
    /// Whether counters (`prefix + "n:" + i`) must be created before timing.
    pub uses_counters: bool,
    /// A recorded trace's scripts, one per logical client, sent instead of drawn ops.
    pub replay: Option<Arc<Replay>>,
    /// Redis Cluster: `servers` are the seeds until the run asks one for the slot map
    /// (`engine/topology.rs`); then the primaries, and `slots` the owner of every slot.
    pub cluster: bool,
    pub slots: Option<Arc<Vec<u16>>>,
    /// Redis Cluster: the hash slot of each key `0..key_count` (not the `incr` counters'
    /// own keys), computed once for all load threads — formatting each key and its CRC16
    /// on every request was a tenth of the engine's own work. Empty when not a cluster or
    /// past `KEY_SLOTS_MAX` keys (then a request's key is hashed as it goes).
    pub key_slots: Arc<[u16]>,
    /// Redis Cluster: `servers` are the primaries (the first `primaries`), then their
    /// replicas; `replicas[server]` the replicas of a primary (empty for a replica). Reads
    /// go to the replicas too with `read_from_replicas`.
    pub read_from_replicas: bool,
    pub primaries: usize,
    pub replicas: Arc<Vec<Vec<u16>>>,
    /// Redis Sentinel: whom a load thread asks for the primary when it reconnects.
    pub sentinel: Option<Arc<SentinelPlan>>,
}

impl Plan {
    /// How many of `servers` each client connects to at the start: all of them, but for a
    /// Redis Cluster whose replicas are not read from, the primaries only (a replica is
    /// connected once a failover makes it the owner of slots).
    pub fn connected_at_start(&self) -> usize {
        if self.read_from_replicas {
            self.servers.len()
        } else {
            self.primaries
        }
    }
}

impl Config {
    pub fn from_json(text: &str) -> Result<Config, String> {
        serde_json::from_str(text).map_err(|e| format!("engine config: {e}"))
    }

    /// The plan, validated: every check in the order the sections are read (servers and
    /// what reaches them, the load's limits, keys, values, mix, replies, replay), each
    /// failing with one line.
    pub fn plan(&self) -> Result<Plan, String> {
        let target = self.target()?;
        self.check_limits()?;
        let rate = self.open_rate()?;
        self.check_phases()?;
        let k = &self.keys;
        let dist = keys::dist(k, self.protocol.is_resp())?;
        let sizes = values::sizes(&self.values)?;
        let (ops, cumulative) = mix::ops(&self.mix, self.protocol)?;
        if !(0.0..=1.0).contains(&self.verify_fraction) {
            return Err("verify_fraction must be within 0..1".into());
        }
        if self.timeout_ms == 0 {
            return Err("timeout_ms must be positive".into());
        }
        let max_value = sizes.max();
        let replay = match &self.replay {
            Some(r) => Some(Arc::new(Replay::load(&r.dir, self.connections, ops.len())?)),
            None => None,
        };
        if let Some(r) = replay.as_ref().filter(|r| r.largest() > max_value) {
            // a value is written from the run's filler, which reaches the values' maximum only
            return Err(format!(
                "replay: a request records a {}-byte value, over the values' maximum of {max_value}",
                r.largest()
            ));
        }
        Ok(Plan {
            protocol: self.protocol,
            server_names: self.servers.clone(),
            servers: target.servers,
            tls: target.tls,
            tls_names: target.tls_names,
            tls_server_name: self.tls.as_ref().and_then(|t| t.server_name.clone()),
            username: self.username.clone(),
            password: self.password.clone(),
            db: self.db,
            threads: self.threads,
            connections: self.connections,
            pipeline: self.pipeline,
            open: self.mode == Mode::Open,
            rate,
            arrival: self.arrival,
            error_grace_ns: (self.on_error == OnError::Stop)
                .then_some((self.error_grace_s * 1e9) as u64),
            duration_ns: (self.duration_s * 1e9) as u64,
            ops_limit: self.ops,
            warmup_ns: (self.warmup_s * 1e9) as u64,
            prefill: self.prefill,
            key_count: k.count,
            prefix: k.prefix.as_bytes().to_vec(),
            key_lengths: k.lengths.clone(),
            dist,
            filler: make_filler(max_value.max(16)),
            sizes,
            uses_counters: ops.iter().any(|o| o.kind == Kind::Incr),
            ops,
            cumulative,
            ttl_s: self.ttl_s,
            verify_fraction: self.verify_fraction,
            seed: self.seed,
            timeout_ns: self.timeout_ms * 1_000_000,
            io: self.io,
            limits: Limits::for_values(max_value),
            replay,
            cluster: self.cluster,
            slots: None,
            key_slots: keys::key_slots(self.cluster, k.count, k.prefix.as_bytes(), &k.lengths),
            read_from_replicas: self.read_from_replicas,
            primaries: self.servers.len(),
            replicas: Arc::new(Vec::new()),
            sentinel: target.sentinel,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_addresses() {
        assert_eq!(
            ServerAddr::parse("unix:/tmp/r.sock").unwrap(),
            ServerAddr::Unix(PathBuf::from("/tmp/r.sock"))
        );
        assert!(matches!(
            ServerAddr::parse("127.0.0.1:6379").unwrap(),
            ServerAddr::Tcp(_)
        ));
        assert!(ServerAddr::parse("unix:")
            .unwrap_err()
            .contains("needs a path"));
        assert!(ServerAddr::parse("nohost").is_err());
    }

    #[test]
    fn defaults_and_errors() {
        let c = Config::from_json(r#"{"protocol":"resp2","servers":["127.0.0.1:1"]}"#).unwrap();
        let p = c.plan().unwrap();
        assert_eq!(p.connections, 50);
        assert_eq!(p.ops[0].kind, Kind::Get);
        assert!(Config::from_json(r#"{"protocol":"resp9","servers":[]}"#).is_err());
        assert!(Config::from_json(r#"{"protocol":"resp2","servers":["x:1"],"bogus":1}"#).is_err());
        let c =
            Config::from_json(r#"{"protocol":"resp2","servers":["127.0.0.1:1"],"mode":"open"}"#)
                .unwrap();
        assert!(c.plan().unwrap_err().contains("rate"));
        assert_eq!(p.error_grace_ns, Some(2_000_000_000));
        assert_eq!(p.arrival, Arrival::Fixed);
        let c = Config::from_json(
            r#"{"protocol":"resp2","servers":["127.0.0.1:1"],"on_error":"continue","arrival":"poisson"}"#,
        )
        .unwrap();
        let p = c.plan().unwrap();
        assert_eq!((p.error_grace_ns, p.arrival), (None, Arrival::Poisson));
        let c = Config::from_json(
            r#"{"protocol":"resp2","servers":["127.0.0.1:1"],"error_grace_s":0}"#,
        )
        .unwrap();
        assert!(c.plan().unwrap_err().contains("error_grace_s"));
        assert!(Config::from_json(
            r#"{"protocol":"resp2","servers":["127.0.0.1:1"],"on_error":"ignore"}"#
        )
        .is_err());
    }
}
