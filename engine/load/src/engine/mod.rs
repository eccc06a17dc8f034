//! The load engine: T threads, each owning C/T logical clients and one hand-written loop
//! over their sockets (no async runtime, no task per request) on io_uring — by default —
//! or epoll; plus run orchestration (connect, prefill, warm-up, timed phase, drain,
//! dropped-write canaries) and the merge of per-thread results into the run's result.
//!
//! Why by hand: on these VMs syscalls dominate a load generator's CPU. io_uring submits
//! every socket's RECV and SEND and waits for completions in one `io_uring_enter` per
//! round; the epoll fallback does one `read` per readiness event and one `write` per
//! batch. Replies are parsed in place in a persistent read buffer, requests are encoded
//! into a persistent write buffer (docs/engine.md, "How it is built").
//!
//! A logical client holds one socket per server (as a memcached pool client does)
//! and keeps at most `pipeline` requests in flight. Closed loop: it refills as soon
//! as replies arrive. Open loop: each client follows a schedule of intended send times
//! (fixed gaps, clients interleaved, or Poisson; `arrivals.rs`); a request due while the
//! client is at its in-flight cap waits, and its latency is counted from the intended
//! time (corrected) as well as from the actual send (uncorrected). The schedule is cut
//! at the phase's end: what fell due and was never sent is counted as `missed`.
//!
//! An op that cannot be sent because its connection is down is an error (connection),
//! counted once per op the load attempted: closed loop, each attempt reconnects at once
//! (a failed connect is a completed op, and the client goes on as after any reply);
//! open loop, every op that falls due while the connection is down is an error, and
//! reconnects are tried at most every 100 ms. With `on_error: "stop"` the orchestrating
//! thread stops every load thread once nothing but errors has come in for
//! `error_grace_s` (`watch.rs`).
//!
//! * [`run`](run()) (`run.rs`) — orchestration: connect, threads, phases, the result
//! * [`result`] — what a run returns: [`RunResult`] and its parts, serialised as the JSON
//!   Python reads
//! * `worker/` — one load thread: its clients and the phase loop (`mod.rs`), what they send
//!   when and where (`issue.rs`), replies read and recorded (`read.rs`), sockets and the
//!   backend (`io.rs`)
//! * `router/` — where a Redis Cluster's requests go (slots, redirects, replicas, joined
//!   nodes) and which primary the Sentinels name now: asked by the worker, never asking it
//! * `uring.rs`, `epoll.rs` — the two I/O backends, as methods of the worker
//! * `conn.rs` — per-socket state and the blocking connect + handshake
//! * `stream.rs` — a connection's stream: TCP or a Unix domain socket
//! * `record.rs` — counters, histograms, error samples, the merge of threads' results
//! * `canary.rs` — dropped-write canaries after the timed phase
//! * `topology.rs` — Redis Cluster: the slot map asked of a seed before anything connects
//! * `sentinel.rs` — Redis Sentinel: the primary asked of the Sentinels when a thread reconnects
//! * `outage.rs` — write outages: how long writes failed (a failover), per thread
//!
//! Encoding, handshakes and parsing live in [`crate::proto`].

mod canary;
mod conn;
mod epoll;
mod error;
mod outage;
mod record;
pub mod result;
mod router;
mod run;
mod sentinel;
mod shared;
mod stream;
mod tlsbuf;
mod topology;
mod uring;
mod worker;

pub use error::RunError;
pub use record::{OpStats, ERROR_KINDS};
pub use result::RunResult;
pub use run::run;
