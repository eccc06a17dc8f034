//! cachemark's user-space network emulation proxy (crate `cachemark-proxy`).
//!
//! It sits between a benchmark client and any TCP cache server and makes loopback look
//! like a LAN, another zone or another region: per-direction delay applied to each
//! segment as it arrives (ordering kept), jitter with a named distribution, a bandwidth
//! cap, a connection-setup delay, and faults (reset, black-hole, stall) that can be
//! switched on mid-run. No privileges and no netem: it is an ordinary TCP proxy on its
//! own tokio runtime, with timerfd-based timers for sub-millisecond delays.
//!
//! Modules: [`config`] (the JSON schema and the release-time arithmetic), [`timer`]
//! (microsecond timers), [`capture`] (the tap and the trace recorder), [`proxy`] (listener,
//! faults), `pump` (one direction of a connection), [`shared`] (the counters and state both
//! read), [`spin`] and [`spare`] (when a pump stays awake between segments), [`runtime`] (its
//! tokio runtime: a refused thread is an error) and [`python`] (the `cachemark._engine.Proxy`
//! class).
pub mod capture;
pub mod config;
pub mod proxy;
mod pump;
pub mod runtime;
pub mod shared;
pub mod sock;
pub mod spare;
pub mod spin;
pub mod timer;

pub use config::Config;
pub use proxy::Proxy;
pub use shared::StatsSnapshot;

pub mod python;
