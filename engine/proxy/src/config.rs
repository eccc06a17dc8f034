//! The proxy's configuration: what one JSON document may say, how it is validated, and
//! how a direction turns a segment's arrival time into its release time.
//!
//! The JSON schema (every field optional; unknown fields are an error so a typo never
//! silently means "no delay"):
//!
//! ```json
//! {
//!   "delay_up_us": 100,            // one-way delay client -> upstream, microseconds
//!   "delay_down_us": 100,          // one-way delay upstream -> client
//!   "jitter": {"dist": "normal", "us": 20, "shape": 3.0},
//!   "bandwidth_bps": 100000000,    // bits per second, each direction (0 = unlimited)
//!   "bandwidth_up_bps": 0,         // per-direction overrides of bandwidth_bps
//!   "bandwidth_down_bps": 0,
//!   "link_bps": 0,                 // bits per second, each direction, shared by every connection:
//!                                  // a host's NIC (0 = unlimited)
//!   "connect_delay_us": 0,         // before the proxy opens its upstream connection
//!   "fault": {"kind": "reset", "after_ms": 0, "stall_ms": 0, "probability": 1.0},
//!   "compensate": true,            // arm timers early by the measured wake-up lateness
//!   "busy_poll_us": 0              // opt-in: poll this long after a read instead of sleeping
//!                                  // (zero-delay connections only; see docs/network.md)
//! }
//! ```
//!
//! Jitter is drawn independently for every segment in each direction:
//! `uniform` adds U(-us, +us); `normal` adds N(0, us) (us is the standard deviation);
//! `pareto` adds a one-sided heavy tail, Lomax(shape, scale) with mean `us`
//! (scale = us * (shape - 1); shape defaults to 3). A segment is never released before
//! its arrival nor before the segment that arrived ahead of it, so TCP's order holds.
use rand::Rng;
use rand_distr::{Distribution, Normal};
use serde::Deserialize;

/// How jitter is distributed.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JitterDist {
    Uniform,
    Normal,
    Pareto,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Jitter {
    pub dist: JitterDist,
    pub us: f64,
    #[serde(default = "default_shape")]
    pub shape: f64,
}

fn default_shape() -> f64 {
    3.0
}

impl Jitter {
    /// One draw, in nanoseconds (may be negative for the symmetric distributions).
    pub fn sample<R: Rng>(&self, rng: &mut R) -> i64 {
        if self.us <= 0.0 {
            return 0;
        }
        let us = match self.dist {
            JitterDist::Uniform => rng.gen_range(-self.us..=self.us),
            JitterDist::Normal => Normal::new(0.0, self.us)
                .map(|n| n.sample(rng))
                .unwrap_or(0.0),
            JitterDist::Pareto => {
                // Lomax by inversion: scale * (U^(-1/shape) - 1); mean = scale / (shape - 1).
                let scale = self.us * (self.shape - 1.0);
                let u: f64 = 1.0 - rng.gen::<f64>(); // (0, 1], never 0
                scale * (u.powf(-1.0 / self.shape) - 1.0)
            }
        };
        (us * 1000.0) as i64
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FaultKind {
    /// Close both sides with a TCP RST (SO_LINGER 0).
    Reset,
    /// Keep the connection open but silently drop everything that arrives, both ways.
    Blackhole,
    /// Hold everything for `stall_ms`, then deliver it and carry on.
    Stall,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    pub kind: FaultKind,
    /// When the fault fires, counted from the later of the connection's accept and the
    /// moment this fault was configured.
    #[serde(default)]
    pub after_ms: u64,
    /// Stall length (only for `stall`).
    #[serde(default)]
    pub stall_ms: u64,
    /// Chance, decided once per connection, that the fault fires on it.
    #[serde(default = "default_probability")]
    pub probability: f64,
}

fn default_probability() -> f64 {
    1.0
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    delay_up_us: f64,
    #[serde(default)]
    delay_down_us: f64,
    #[serde(default)]
    jitter: Option<Jitter>,
    #[serde(default)]
    bandwidth_bps: u64,
    #[serde(default)]
    bandwidth_up_bps: Option<u64>,
    #[serde(default)]
    bandwidth_down_bps: Option<u64>,
    #[serde(default)]
    link_bps: u64,
    #[serde(default)]
    connect_delay_us: f64,
    #[serde(default)]
    fault: Option<Fault>,
    #[serde(default)]
    compensate: Option<bool>,
    #[serde(default)]
    busy_poll_us: f64,
}

/// What one direction of a connection does to the bytes passing through it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DirConfig {
    pub delay_ns: u64,
    pub jitter: Option<Jitter>,
    /// Each connection's own cap (a flow's, as clouds limit single connections).
    pub bandwidth_bps: u64,
    /// The cap every connection shares (a host's NIC): its bytes queue for one link.
    pub link_bps: u64,
}

impl DirConfig {
    /// True when bytes can be forwarded the moment they arrive, without a timer.
    pub fn is_passthrough(&self) -> bool {
        self.delay_ns == 0
            && self.bandwidth_bps == 0
            && self.link_bps == 0
            && self.jitter.as_ref().is_none_or(|j| j.us <= 0.0)
    }

    /// Nanoseconds the connection's own cap needs to serialise `bytes`.
    pub fn tx_ns(&self, bytes: usize) -> u64 {
        serialise_ns(bytes, self.bandwidth_bps)
    }

    /// Nanoseconds the shared link needs to serialise `bytes`.
    pub fn link_tx_ns(&self, bytes: usize) -> u64 {
        serialise_ns(bytes, self.link_bps)
    }

    /// Largest piece a big read is cut into under a cap: about 1 ms of the tighter cap's
    /// time, so a capped stream trickles out evenly instead of in 64 KB lumps.
    pub fn piece_bytes(&self) -> usize {
        match [self.bandwidth_bps, self.link_bps]
            .into_iter()
            .filter(|&b| b > 0)
            .min()
        {
            None => usize::MAX,
            Some(bps) => ((bps / 8 / 1000) as usize).clamp(1448, 64 * 1024),
        }
    }
}

fn serialise_ns(bytes: usize, bps: u64) -> u64 {
    if bps == 0 {
        0
    } else {
        ((bytes as u128 * 8 * 1_000_000_000) / bps as u128) as u64
    }
}

/// The whole, validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub up: DirConfig,
    pub down: DirConfig,
    pub connect_delay_ns: u64,
    pub fault: Option<Fault>,
    pub compensate: bool,
    /// Opt-in busy polling (0 = off, the default): after a connection's last read its task
    /// keeps polling its sockets without sleeping for this long, so the next segment is
    /// forwarded without an idle-core wake-up. Applies only while both directions are
    /// pass-through (nothing to delay): with a delay configured, spinning measured worse
    /// (docs/network.md). Costs one proxy core busy while traffic flows.
    pub busy_poll_ns: u64,
}

/// The longest busy-poll window accepted: beyond this it is just a busy core.
pub const MAX_BUSY_POLL_US: f64 = 100_000.0;

impl Default for Config {
    fn default() -> Self {
        Config {
            up: DirConfig::default(),
            down: DirConfig::default(),
            connect_delay_ns: 0,
            fault: None,
            compensate: true,
            busy_poll_ns: 0,
        }
    }
}

fn us_to_ns(field: &str, us: f64) -> Result<u64, String> {
    if !us.is_finite() || us < 0.0 {
        return Err(format!("{field} must be a finite number >= 0, got {us}"));
    }
    if us > 600e6 {
        return Err(format!(
            "{field} must be at most 600 s (600000000 us), got {us}"
        ));
    }
    Ok((us * 1000.0).round() as u64)
}

impl Config {
    /// Parse and validate a JSON document; the error is one line naming the bad field.
    pub fn from_json(text: &str) -> Result<Config, String> {
        let text = if text.trim().is_empty() { "{}" } else { text };
        let raw: RawConfig =
            serde_json::from_str(text).map_err(|e| format!("proxy config: {e}"))?;
        if let Some(j) = &raw.jitter {
            if !j.us.is_finite() || j.us < 0.0 {
                return Err(format!(
                    "proxy config: jitter.us must be >= 0, got {}",
                    j.us
                ));
            }
            if j.dist == JitterDist::Pareto && (!j.shape.is_finite() || j.shape <= 1.0) {
                return Err(format!(
                    "proxy config: jitter.shape must be > 1 for pareto, got {}",
                    j.shape
                ));
            }
        }
        if let Some(f) = &raw.fault {
            if !(0.0..=1.0).contains(&f.probability) {
                return Err(format!(
                    "proxy config: fault.probability must be in [0, 1], got {}",
                    f.probability
                ));
            }
            if f.kind == FaultKind::Stall && f.stall_ms == 0 {
                return Err("proxy config: a stall fault needs stall_ms > 0".into());
            }
        }
        if raw.busy_poll_us > MAX_BUSY_POLL_US {
            return Err(format!(
                "proxy config: busy_poll_us must be at most {MAX_BUSY_POLL_US} (100 ms), got {}",
                raw.busy_poll_us
            ));
        }
        let busy_poll_ns =
            us_to_ns("busy_poll_us", raw.busy_poll_us).map_err(|e| format!("proxy config: {e}"))?;
        let dir = |delay_us: f64, field: &str, bw: Option<u64>| -> Result<DirConfig, String> {
            Ok(DirConfig {
                delay_ns: us_to_ns(field, delay_us).map_err(|e| format!("proxy config: {e}"))?,
                jitter: raw.jitter.clone().filter(|j| j.us > 0.0),
                bandwidth_bps: bw.unwrap_or(raw.bandwidth_bps),
                link_bps: raw.link_bps,
            })
        };
        Ok(Config {
            up: dir(raw.delay_up_us, "delay_up_us", raw.bandwidth_up_bps)?,
            down: dir(raw.delay_down_us, "delay_down_us", raw.bandwidth_down_bps)?,
            connect_delay_ns: us_to_ns("connect_delay_us", raw.connect_delay_us)
                .map_err(|e| format!("proxy config: {e}"))?,
            fault: raw.fault,
            compensate: raw.compensate.unwrap_or(true),
            busy_poll_ns,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn empty_means_passthrough() {
        let c = Config::from_json("").unwrap();
        assert!(c.up.is_passthrough() && c.down.is_passthrough());
        assert!(c.fault.is_none());
        assert_eq!(c.busy_poll_ns, 0, "busy polling is opt-in");
    }

    #[test]
    fn busy_poll_parses_and_is_bounded() {
        let c = Config::from_json(r#"{"busy_poll_us": 50, "delay_up_us": 100}"#).unwrap();
        assert_eq!(c.busy_poll_ns, 50_000);
        assert!(Config::from_json(r#"{"busy_poll_us": -1}"#)
            .unwrap_err()
            .contains("busy_poll_us"));
        assert!(Config::from_json(r#"{"busy_poll_us": 1e9}"#)
            .unwrap_err()
            .contains("busy_poll_us"));
    }

    #[test]
    fn parses_everything() {
        let c = Config::from_json(
            r#"{"delay_up_us": 100, "delay_down_us": 250.5, "jitter": {"dist": "pareto", "us": 10},
                "bandwidth_bps": 8000000, "bandwidth_down_bps": 1000, "connect_delay_us": 500,
                "fault": {"kind": "stall", "after_ms": 5, "stall_ms": 100}}"#,
        )
        .unwrap();
        assert_eq!(c.up.delay_ns, 100_000);
        assert_eq!(c.down.delay_ns, 250_500);
        assert_eq!(c.up.bandwidth_bps, 8_000_000);
        assert_eq!(c.down.bandwidth_bps, 1000);
        assert_eq!(c.connect_delay_ns, 500_000);
        assert_eq!(c.fault.as_ref().unwrap().kind, FaultKind::Stall);
        assert!(!c.up.is_passthrough());
    }

    #[test]
    fn rejects_typos_and_bad_values() {
        assert!(Config::from_json(r#"{"delay_us": 1}"#)
            .unwrap_err()
            .contains("unknown field"));
        assert!(Config::from_json(r#"{"delay_up_us": -1}"#).is_err());
        assert!(Config::from_json(r#"{"jitter": {"dist": "gamma", "us": 1}}"#).is_err());
        assert!(Config::from_json(r#"{"fault": {"kind": "stall"}}"#).is_err());
        assert!(Config::from_json(r#"{"fault": {"kind": "reset", "probability": 2}}"#).is_err());
    }

    #[test]
    fn one_megabyte_at_eight_megabit_takes_a_second() {
        let d = DirConfig {
            bandwidth_bps: 8_000_000,
            ..Default::default()
        };
        assert_eq!(d.tx_ns(1_000_000), 1_000_000_000);
    }

    #[test]
    fn jitter_distributions_have_the_documented_spread() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let n = 20000;
        for (dist, want_mean, nonneg) in [
            (JitterDist::Uniform, 0.0, false),
            (JitterDist::Normal, 0.0, false),
            (JitterDist::Pareto, 100.0, true),
        ] {
            let j = Jitter {
                dist,
                us: 100.0,
                shape: 3.0,
            };
            let draws: Vec<f64> = (0..n).map(|_| j.sample(&mut rng) as f64 / 1000.0).collect();
            let mean = draws.iter().sum::<f64>() / n as f64;
            assert!((mean - want_mean).abs() < 8.0, "{dist:?} mean {mean}");
            if nonneg {
                assert!(draws.iter().all(|&d| d >= 0.0));
            }
            if dist == JitterDist::Uniform {
                assert!(draws.iter().all(|&d| d.abs() <= 100.0));
            }
        }
    }
}
