//! What an engine run returns (docs/engine.md, "What it returns"): one [`RunResult`] per
//! call, serialised as the JSON `run_load` hands to Python.
//!
//! Every struct's fields are declared in alphabetical order, and the maps are `BTreeMap`s:
//! the JSON's keys come out sorted, as Python has always read them. A key present only in
//! some runs is an `Option` skipped when `None`; a key always present with a `null` value
//! is an `Option` that is not skipped.

use serde::Serialize;
use std::collections::BTreeMap;

/// One engine call: its timed phase's figures, per op and in total.
#[derive(Debug, PartialEq, Serialize)]
pub struct RunResult {
    /// The process's CPU seconds during the timed phase (user + system).
    pub client_cpu_s: f64,
    /// Their user part: the split says where a client's CPU goes, its own code or the
    /// kernel's I/O.
    pub client_cpu_user_s: f64,
    /// Redis Cluster runs only; `null` for every other.
    pub cluster: Option<ClusterFigures>,
    /// Connections made at the start (per client, one per server connected up front).
    pub connections: usize,
    /// Distinct error messages, at most 16 (and up to 3 from the canaries).
    pub errors_sample: Vec<String>,
    /// Stopped by Ctrl-C (or any signal whose Python handler raised).
    pub interrupted: bool,
    /// Open loop: ops that fell due before the phase ended but were never sent.
    pub missed: u64,
    pub mode: Mode,
    /// Each op under its name.
    pub ops: BTreeMap<String, OpResult>,
    pub pipeline: usize,
    /// Prefill writes the server refused or that failed.
    pub prefill_errors: u64,
    /// Open loop: the ops per second asked for; `null` in closed loop.
    pub rate: Option<f64>,
    /// Where the timed phase began, on CLOCK_MONOTONIC (Python's `perf_counter_ns`).
    pub start_ns: u64,
    /// Why the on-error policy stopped the run, if it did.
    pub stopped_on_errors: Option<String>,
    pub threads: usize,
    /// From the start of the timed phase to the last reply.
    pub wall_s: f64,
    pub wire_bytes_in: u64,
    pub wire_bytes_out: u64,
    /// Each load thread's write-outage windows, for `measure.outage.merge_outages`.
    pub write_outages: Vec<WriteOutage>,
}

/// Closed loop (each client sends as replies come back) or open loop (a schedule).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Closed,
    Open,
}

/// One op's counters and latency histograms over the timed phase.
#[derive(Debug, PartialEq, Serialize)]
pub struct OpResult {
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Every op completed or failed, the dropped-write canaries' drops included.
    pub count: u64,
    pub errors: ErrorCounts,
    /// Latency from the intended send time (closed loop: the actual one).
    pub histograms: Histograms,
    /// Open loop only: latency from the actual send time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub histograms_uncorrected: Option<Histograms>,
    /// Reads only (get, gets, exists, mget).
    #[serde(flatten)]
    pub reads: Option<ReadCounts>,
}

/// A read op's outcomes besides errors.
#[derive(Debug, PartialEq, Serialize)]
pub struct ReadCounts {
    pub hits: u64,
    pub misses: u64,
}

/// Errors by kind (docs/contracts.md); a kind that did not occur is left out.
#[derive(Debug, Default, PartialEq, Serialize)]
pub struct ErrorCounts {
    #[serde(skip_serializing_if = "is_zero")]
    pub connection: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub dropped_write: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub protocol: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub server: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub timeout: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub verify: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// An op's latency histograms by outcome (HDR, V2-deflate, base64: `crate::hist`); an
/// outcome never seen is left out.
#[derive(Debug, Default, PartialEq, Serialize)]
pub struct Histograms {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hit: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub miss: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ok: Option<String>,
}

/// A Redis Cluster run's map and redirects.
#[derive(Debug, PartialEq, Serialize)]
pub struct ClusterFigures {
    /// `ASK` redirects answered.
    pub ask: u64,
    /// Nodes that joined during the run (reached by a redirect); left out when none did.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub joined: Vec<String>,
    /// `MOVED` redirects answered.
    pub moved: u64,
    /// Primaries in the slot map read at the start.
    pub primaries: usize,
    /// Replicas read from, when asked to read from them; left out otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<usize>,
}

/// One window of failed writes (`outage.rs`), its times on CLOCK_MONOTONIC.
#[derive(Debug, PartialEq, Serialize)]
pub struct WriteOutage {
    /// Ops that failed inside the window, reads included.
    pub errors: u64,
    pub failed_writes: u64,
    /// When the first failed write was sent.
    pub first_ns: u64,
    /// When the last failed write failed.
    pub last_ns: u64,
    /// When a write succeeded again; `null`: not before the call ended.
    pub recovered_ns: Option<u64>,
    /// Where that write went (a Sentinel target's new primary); `null` with `recovered_ns`.
    pub server: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn op(reads: bool, open: bool) -> OpResult {
        let hist = |s: &str| Histograms {
            hit: Some(s.into()),
            error: Some("e".into()),
            ..Default::default()
        };
        OpResult {
            bytes_in: 1,
            bytes_out: 2,
            count: 3,
            errors: ErrorCounts {
                dropped_write: 4,
                timeout: 5,
                ..Default::default()
            },
            histograms: hist("h"),
            histograms_uncorrected: open.then(|| hist("u")),
            reads: reads.then_some(ReadCounts { hits: 6, misses: 7 }),
        }
    }

    fn run(cluster: Option<ClusterFigures>, open: bool) -> RunResult {
        RunResult {
            client_cpu_s: 0.5,
            client_cpu_user_s: 0.25,
            cluster,
            connections: 8,
            errors_sample: vec!["get: server error: x".into()],
            interrupted: false,
            missed: 9,
            mode: if open { Mode::Open } else { Mode::Closed },
            ops: BTreeMap::from([
                ("set".into(), op(false, open)),
                ("get".into(), op(true, open)),
            ]),
            pipeline: 1,
            prefill_errors: 0,
            rate: open.then_some(1000.0),
            start_ns: 10,
            stopped_on_errors: None,
            threads: 2,
            wall_s: 1.5,
            wire_bytes_in: 11,
            wire_bytes_out: 12,
            write_outages: vec![WriteOutage {
                errors: 3,
                failed_writes: 2,
                first_ns: 100,
                last_ns: 200,
                recovered_ns: None,
                server: None,
            }],
        }
    }

    /// The JSON text of a closed-loop run, as the engine has always written it: keys sorted
    /// at every level, hits and misses for reads only, absent error kinds and outcomes left out.
    #[test]
    fn a_closed_loop_run_serialises_to_the_json_python_reads() {
        let text = serde_json::to_string(&run(None, false)).unwrap();
        let set = r#"{"bytes_in":1,"bytes_out":2,"count":3,"errors":{"dropped_write":4,"timeout":5},"histograms":{"error":"e","hit":"h"}"#;
        let get = format!(r#"{set},"hits":6,"misses":7}}"#);
        let expected = format!(
            r#"{{"client_cpu_s":0.5,"client_cpu_user_s":0.25,"cluster":null,"connections":8,"errors_sample":["get: server error: x"],"interrupted":false,"missed":9,"mode":"closed","ops":{{"get":{get},"set":{set}}}}},"pipeline":1,"prefill_errors":0,"rate":null,"start_ns":10,"stopped_on_errors":null,"threads":2,"wall_s":1.5,"wire_bytes_in":11,"wire_bytes_out":12,"write_outages":[{{"errors":3,"failed_writes":2,"first_ns":100,"last_ns":200,"recovered_ns":null,"server":null}}]}}"#
        );
        assert_eq!(text, expected);
    }

    #[test]
    fn an_open_loop_cluster_run_has_its_extra_keys() {
        let cluster = ClusterFigures {
            ask: 1,
            joined: vec!["127.0.0.1:7004".into()],
            moved: 2,
            primaries: 3,
            replicas: Some(3),
        };
        let v = serde_json::to_value(run(Some(cluster), true)).unwrap();
        assert_eq!(
            v["cluster"],
            json!({"ask": 1, "joined": ["127.0.0.1:7004"], "moved": 2, "primaries": 3, "replicas": 3})
        );
        assert_eq!((&v["mode"], &v["rate"]), (&json!("open"), &json!(1000.0)));
        assert_eq!(
            v["ops"]["get"]["histograms_uncorrected"],
            json!({"error": "e", "hit": "u"})
        );
        let plain = ClusterFigures {
            ask: 0,
            joined: vec![],
            moved: 0,
            primaries: 3,
            replicas: None,
        };
        assert_eq!(
            serde_json::to_value(plain).unwrap(),
            json!({"ask": 0, "moved": 0, "primaries": 3})
        );
    }

    #[test]
    fn a_measure_that_is_not_a_number_is_null_as_before() {
        let mut r = run(None, false);
        r.wall_s = f64::NAN;
        assert_eq!(serde_json::to_value(r).unwrap()["wall_s"], json!(null));
    }
}
