//! cachemark's native load engine (`cachemark-load`).
//!
//! * [`arrivals`] — open-loop schedules: fixed or Poisson gaps, and the ops a cut schedule missed
//! * [`cluster`] — Redis Cluster: hash slots (CRC16, hash tags), `MOVED`/`ASK`, `CLUSTER SLOTS`
//! * [`keyspace`] — keys, values (docs/contracts.md), PRNG, key distributions, server routing
//! * [`proto`] — per protocol (RESP2/3, memcached text/meta): request encoders, the
//!   connection handshake and bounded reply parsers
//! * [`config`] — the JSON run configuration and its validation
//! * [`hist`] — HDR histograms with the contract's parameters and V2-deflate/base64 codec
//! * [`outbuf`] — outgoing requests with large values sent from the filler in place
//! * [`engine`] — the load threads (closed and open loop) over io_uring, or epoll as the
//!   fallback, and run orchestration: connections, recording, canaries, the result
//! * [`tls`] — TLS client configuration (rustls): CA, client certificate, SNI, no-verify
//! * [`watch`] — the on-error policy: stop a phase once only errors come in
//! * [`python`] — the PyO3 surface: `run_load` and `Histogram`

pub mod arrivals;
pub mod cluster;
pub mod config;
pub mod engine;
pub mod hist;
pub mod keyspace;
pub mod outbuf;
pub mod proto;
pub mod python;
pub mod replay;
pub mod tls;
pub mod watch;
