//! The run configuration (JSON from Python) and its validation into a [`Plan`]: the
//! read-only description every load thread shares. Anything a user can get wrong
//! fails here with one clear line, before a connection is opened.

use crate::cluster::key_slot;
use crate::keyspace::{make_filler, KeyDist, ValueSizes};
use crate::proto::request::key_bytes;
pub use crate::proto::{Kind, Limits, OpPlan, Protocol, Seg};
use crate::replay::Replay;
use crate::tls::{client_config, server_name, TlsConfig};
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

fn parse_template(args: &[String], is_resp: bool) -> Result<Vec<Vec<Seg>>, String> {
    if args.is_empty() {
        return Err("a template op needs a non-empty \"args\" list".into());
    }
    let mut out = Vec::new();
    for a in args {
        let mut segs = Vec::new();
        let mut rest = a.as_str();
        while !rest.is_empty() {
            let next = ["{key}", "{value}", "{ttl}", "{len}"]
                .iter()
                .filter_map(|p| rest.find(p).map(|i| (i, *p)))
                .min();
            match next {
                None => {
                    segs.push(Seg::Lit(rest.as_bytes().to_vec()));
                    rest = "";
                }
                Some((i, p)) => {
                    if i > 0 {
                        segs.push(Seg::Lit(rest.as_bytes()[..i].to_vec()));
                    }
                    segs.push(match p {
                        "{key}" => Seg::Key,
                        "{value}" => Seg::Value,
                        "{ttl}" => Seg::Ttl,
                        _ => Seg::Len,
                    });
                    rest = &rest[i + p.len()..];
                }
            }
        }
        if !is_resp && segs.contains(&Seg::Value) && segs.len() != 1 {
            return Err(format!("template arg {a:?}: in memcached templates {{value}} must stand alone (it is sent as the data block)"));
        }
        if !is_resp && a.contains(char::is_whitespace) {
            return Err(format!(
                "template arg {a:?}: memcached arguments cannot contain whitespace"
            ));
        }
        out.push(segs);
    }
    if !is_resp && out.iter().filter(|s| s.as_slice() == [Seg::Value]).count() > 1 {
        return Err("a memcached template can carry at most one {value}".into());
    }
    Ok(out)
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

    /// What cluster mode cannot do: every request must name one key the engine can route.
    fn check_cluster(&self) -> Result<(), String> {
        if !self.protocol.is_resp() {
            return Err("engine config: \"cluster\" is for RESP (Redis Cluster) only".into());
        }
        if self.db != 0 {
            return Err("engine config: a Redis Cluster has database 0 only".into());
        }
        if let Some(m) = self
            .mix
            .iter()
            .find(|m| matches!(m.op.as_str(), "mget" | "template"))
        {
            return Err(format!(
                "engine config: {:?} in cluster mode: its keys are not routed by hash slot \
                 (use get, gets, set, delete, exists, incr, touch)",
                m.op
            ));
        }
        Ok(())
    }

    /// The Sentinels section, checked: RESP, one server (the primary at the start), TCP.
    fn sentinel_plan(&self) -> Result<Option<Arc<SentinelPlan>>, String> {
        let Some(c) = &self.sentinel else {
            return Ok(None);
        };
        if !self.protocol.is_resp() || self.cluster {
            return Err("engine config: \"sentinel\" is for one RESP primary (not memcached, not a cluster)".into());
        }
        if self.tls.is_some() {
            return Err("engine config: \"sentinel\" with \"tls\" is not supported".into());
        }
        if c.sentinels.is_empty() || c.service.is_empty() {
            return Err(
                "engine config: \"sentinel\" needs \"sentinels\" and a \"service\" name".into(),
            );
        }
        let mut addrs = Vec::new();
        for s in &c.sentinels {
            match ServerAddr::parse(s)? {
                ServerAddr::Unix(_) => {
                    return Err(format!(
                        "engine config: sentinel {s:?}: Sentinels are host:port"
                    ))
                }
                a => addrs.push(a),
            }
        }
        Ok(Some(Arc::new(SentinelPlan {
            addrs,
            names: c.sentinels.clone(),
            service: c.service.clone(),
            password: c.password.clone(),
        })))
    }

    pub fn plan(&self) -> Result<Plan, String> {
        let is_resp = self.protocol.is_resp();
        if self.servers.is_empty() {
            return Err("engine config: \"servers\" is empty".into());
        }
        if is_resp && self.servers.len() > 1 && !self.cluster {
            return Err(
                "engine config: RESP targets take one server (or seeds, with \"cluster\": true)"
                    .into(),
            );
        }
        if self.cluster {
            self.check_cluster()?;
        } else if self.read_from_replicas {
            return Err(
                "engine config: \"read_from_replicas\" is for a Redis Cluster (\"cluster\": true)"
                    .into(),
            );
        }
        let sentinel = self.sentinel_plan()?;
        let mut servers = Vec::new();
        for s in &self.servers {
            servers.push(ServerAddr::parse(s)?);
        }
        let (tls, tls_names) = match &self.tls {
            None => (None, Vec::new()),
            Some(t) => {
                if servers.iter().any(|a| matches!(a, ServerAddr::Unix(_))) {
                    return Err(
                        "tls: the engine speaks TLS over TCP only, not over a Unix socket".into(),
                    );
                }
                let names = self
                    .servers
                    .iter()
                    .map(|s| server_name(t, s))
                    .collect::<Result<Vec<_>, _>>()?;
                (Some(client_config(t)?), names)
            }
        };
        if !is_resp
            && self.protocol != Protocol::MemcacheBinary
            && (self.password.is_some() || self.username.is_some())
        {
            return Err(
                "engine config: memcached credentials need protocol memcache_binary (SASL)".into(),
            );
        }
        if self.protocol == Protocol::MemcacheBinary
            && self.username.is_some() != self.password.is_some()
        {
            return Err("engine config: SASL needs both username and password".into());
        }
        if self.threads == 0 || self.threads > 256 {
            return Err(format!("threads must be 1..256, not {}", self.threads));
        }
        if self.connections < self.threads || self.connections > 100_000 {
            return Err(format!(
                "connections must be at least threads ({}) and at most 100000, not {}",
                self.threads, self.connections
            ));
        }
        if self.pipeline == 0 || self.pipeline > 4096 {
            return Err(format!("pipeline must be 1..4096, not {}", self.pipeline));
        }
        let open = self.mode == Mode::Open;
        let rate = self.rate.unwrap_or(0.0);
        if open && !(rate.is_finite() && rate > 0.0) {
            return Err("open loop needs a positive \"rate\" (ops/s)".into());
        }
        if open && rate > 1e9 {
            // Far beyond any one host; gaps under a nanosecond per client would stall the schedule.
            return Err(format!("rate must be at most 1e9 ops/s, not {rate}"));
        }
        if !(self.duration_s.is_finite() && self.duration_s > 0.0 && self.duration_s < 1e7) {
            return Err(format!(
                "duration_s must be positive, not {}",
                self.duration_s
            ));
        }
        if !(self.error_grace_s.is_finite()
            && self.error_grace_s > 0.0
            && self.error_grace_s <= 3600.0)
        {
            return Err(format!(
                "error_grace_s must be within (0, 3600], not {}",
                self.error_grace_s
            ));
        }
        if !(self.warmup_s.is_finite() && self.warmup_s >= 0.0) {
            return Err(format!("warmup_s must be >= 0, not {}", self.warmup_s));
        }
        if self.ops == Some(0) {
            return Err("ops must be positive when given".into());
        }
        let k = &self.keys;
        if k.count == 0 || k.count > 1_000_000_000 {
            return Err(format!("keys.count must be 1..1e9, not {}", k.count));
        }
        if !is_resp && (k.prefix.contains(char::is_whitespace) || k.prefix.len() > 200) {
            return Err(
                "keys.prefix must be shorter than 200 bytes and have no whitespace for memcached"
                    .into(),
            );
        }
        if k.lengths.len() > 65_536 || k.lengths.iter().any(|&n| n == 0 || (!is_resp && n > 250)) {
            return Err("keys.lengths: at most 65536 lengths, each 1..250 bytes for memcached (1.. for RESP)".into());
        }
        let dist = match k.dist.as_str() {
            "uniform" => KeyDist::Uniform,
            "sequential" => KeyDist::Sequential,
            "zipf" | "zipfian" => {
                if !(k.zipf_s.is_finite() && k.zipf_s > 0.0) {
                    return Err(format!("keys.zipf_s must be positive, not {}", k.zipf_s));
                }
                if k.count > 50_000_000 {
                    return Err(
                        "zipf over more than 50M keys is not supported by the engine".into(),
                    );
                }
                KeyDist::zipf(k.count, k.zipf_s)
            }
            "hotspot" => {
                if !(0.0..=1.0).contains(&k.hot_fraction) || !(0.0..=1.0).contains(&k.hot_prob) {
                    return Err("keys.hot_fraction and keys.hot_prob must be within 0..1".into());
                }
                KeyDist::Hotspot {
                    hot_keys: ((k.count as f64 * k.hot_fraction).round() as u64).max(1),
                    hot_prob: k.hot_prob,
                }
            }
            other => {
                return Err(format!(
                    "keys.dist {other:?} is not one of uniform, zipf, sequential, hotspot"
                ))
            }
        };
        const MAX_VALUE: usize = 64 * 1024 * 1024;
        let v = &self.values;
        let sizes = match (&v.sizes, v.min, v.max) {
            (Some(list), None, None) => {
                if list.is_empty() {
                    return Err("values.sizes is empty".into());
                }
                let mut acc = 0.0;
                let mut cumulative = Vec::new();
                for &(size, w) in list {
                    if size > MAX_VALUE || !(w.is_finite() && w >= 0.0) {
                        return Err(format!("values.sizes entry [{size}, {w}] is out of range"));
                    }
                    acc += w;
                    cumulative.push(acc);
                }
                if acc <= 0.0 {
                    return Err("values.sizes weights sum to zero".into());
                }
                ValueSizes::Weighted {
                    sizes: list.iter().map(|x| x.0).collect(),
                    cumulative,
                }
            }
            (None, Some(min), Some(max)) => {
                if min > max || max > MAX_VALUE {
                    return Err(format!("values min {min} / max {max} are out of range"));
                }
                ValueSizes::Range { min, max }
            }
            (None, None, None) => ValueSizes::Weighted {
                sizes: vec![100],
                cumulative: vec![1.0],
            },
            _ => return Err("values takes either \"sizes\" or \"min\" and \"max\"".into()),
        };
        if self.mix.is_empty() {
            return Err("mix is empty".into());
        }
        let mut ops = Vec::new();
        let mut cumulative = Vec::new();
        let mut acc = 0.0;
        for m in &self.mix {
            if !(m.weight.is_finite() && m.weight >= 0.0) {
                return Err(format!("mix weight for {:?} must be >= 0", m.op));
            }
            let mut template = Vec::new();
            let kind = match m.op.as_str() {
                "get" => Kind::Get,
                "gets" => Kind::Gets,
                "set" => Kind::Set,
                "delete" => Kind::Delete,
                "exists" => Kind::Exists,
                "incr" => Kind::Incr,
                "touch" => Kind::Touch,
                "mget" | "get_many" => {
                    let n = m.count.unwrap_or(10);
                    if n == 0 || n > 10_000 {
                        return Err(format!("mget count must be 1..10000, not {n}"));
                    }
                    Kind::MGet(n)
                }
                "template" if self.protocol == Protocol::MemcacheBinary => {
                    return Err(
                        "templates are text commands; protocol memcache_binary has none".into(),
                    )
                }
                "template" => {
                    template = parse_template(m.args.as_deref().unwrap_or(&[]), is_resp)?;
                    Kind::Template
                }
                other => {
                    return Err(format!(
                        "mix op {other:?} is not one of get, gets, set, delete, exists, incr, touch, mget, template"
                    ))
                }
            };
            let name = m.name.clone().unwrap_or_else(|| m.op.clone());
            if ops.iter().any(|o: &OpPlan| o.name == name) {
                return Err(format!(
                    "mix op name {name:?} appears twice (give one a \"name\")"
                ));
            }
            let writes_value = kind == Kind::Set
                || template
                    .iter()
                    .flatten()
                    .any(|s| matches!(s, Seg::Value | Seg::Len));
            acc += m.weight;
            cumulative.push(acc);
            let write =
                matches!(kind, Kind::Set | Kind::Incr) || (kind == Kind::Template && writes_value);
            ops.push(OpPlan {
                name,
                kind,
                template,
                writes_value,
                write,
            });
        }
        if acc <= 0.0 {
            return Err("mix weights sum to zero".into());
        }
        for c in cumulative.iter_mut() {
            *c /= acc;
        }
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
        Ok(Plan {
            protocol: self.protocol,
            server_names: self.servers.clone(),
            servers,
            tls,
            tls_names,
            tls_server_name: self.tls.as_ref().and_then(|t| t.server_name.clone()),
            username: self.username.clone(),
            password: self.password.clone(),
            db: self.db,
            threads: self.threads,
            connections: self.connections,
            pipeline: self.pipeline,
            open,
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
            key_slots: key_slots(self.cluster, k.count, k.prefix.as_bytes(), &k.lengths),
            read_from_replicas: self.read_from_replicas,
            primaries: self.servers.len(),
            replicas: Arc::new(Vec::new()),
            sentinel,
        })
    }
}

/// The largest keyspace whose slots `Plan::key_slots` tabulates (2 MiB).
const KEY_SLOTS_MAX: u64 = 1 << 20;

/// `Plan::key_slots`: each key's slot, for a cluster's keyspace of up to `KEY_SLOTS_MAX` keys.
fn key_slots(cluster: bool, key_count: u64, prefix: &[u8], lengths: &[u16]) -> Arc<[u16]> {
    if !cluster || key_count > KEY_SLOTS_MAX {
        return Arc::from(Vec::new());
    }
    let mut key = Vec::new();
    (0..key_count)
        .map(|i| {
            key_bytes(&mut key, prefix, lengths, Kind::Get, i);
            key_slot(&key)
        })
        .collect()
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

    #[test]
    fn sentinel_section() {
        let json = |extra: &str| {
            format!(
                r#"{{"protocol":"resp2","servers":["127.0.0.1:6379"],"sentinel":{{"sentinels":["127.0.0.1:26379","127.0.0.1:26380"],"service":"mymaster","password":"pw"}}{extra}}}"#
            )
        };
        let p = Config::from_json(&json("")).unwrap().plan().unwrap();
        let s = p.sentinel.unwrap();
        assert_eq!(s.names, ["127.0.0.1:26379", "127.0.0.1:26380"]);
        assert_eq!(
            (s.service.as_str(), s.password.as_deref()),
            ("mymaster", Some("pw"))
        );
        let err = |extra: &str| Config::from_json(&json(extra)).unwrap().plan().unwrap_err();
        assert!(err(r#","cluster":true"#).contains("\"sentinel\" is for one RESP primary"));
        let memcached = json("").replace("resp2", "memcache_text");
        assert!(Config::from_json(&memcached)
            .unwrap()
            .plan()
            .unwrap_err()
            .contains("not memcached"));
        let unix = json("").replace("127.0.0.1:26380", "unix:/x.sock");
        assert!(Config::from_json(&unix)
            .unwrap()
            .plan()
            .unwrap_err()
            .contains("Sentinels are host:port"));
        let no_service = json("").replace("mymaster", "");
        assert!(Config::from_json(&no_service)
            .unwrap()
            .plan()
            .unwrap_err()
            .contains("\"service\""));
        assert!(Config::from_json(&json("").replace("\"password\"", "\"pass\"")).is_err());
    }

    #[test]
    fn templates() {
        let t = parse_template(
            &[
                "HSET".into(),
                "h:{key}".into(),
                "f".into(),
                "{value}".into(),
            ],
            true,
        )
        .unwrap();
        assert_eq!(t[1], vec![Seg::Lit(b"h:".to_vec()), Seg::Key]);
        assert!(parse_template(&["append".into(), "x{value}".into()], false).is_err());
    }

    #[test]
    fn read_from_replicas_is_for_a_cluster() {
        let json = |extra: &str| {
            format!(
                r#"{{"protocol":"resp2","servers":["127.0.0.1:7000"],"read_from_replicas":true{extra}}}"#
            )
        };
        let p = Config::from_json(&json(r#","cluster":true"#))
            .unwrap()
            .plan()
            .unwrap();
        assert!(p.read_from_replicas && p.primaries == 1 && p.replicas.is_empty());
        let err = Config::from_json(&json("")).unwrap().plan().unwrap_err();
        assert!(
            err.contains("\"read_from_replicas\" is for a Redis Cluster"),
            "{err}"
        );
    }
}
