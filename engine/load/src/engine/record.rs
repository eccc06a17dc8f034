//! What the load threads measure: per-op counters and HDR histograms ([`OpStats`]), a
//! thread's [`Recorder`] (with its error samples and the tallies the on-error watch reads),
//! the bookkeeping of a completed or failed request, and the merge of the threads'
//! recorders into the run's result.

use super::conn::{Pending, P_VERIFY};
use super::outage::Outages;
use super::result::{ErrorCounts, Histograms, OpResult, ReadCounts};
use crate::cluster::key_slot;
use crate::config::Plan;
use crate::hist::{self, Hist};
use crate::keyspace::{verify_value, write_key};
use crate::proto::common::key_bytes;
use crate::proto::{self, printable, Kind, Outcome};
use crate::watch::Kinds;
use std::collections::BTreeMap;

/// Error kinds of docs/contracts.md, in the order of `OpStats::errors`.
pub const ERROR_KINDS: [&str; 6] = [
    "timeout",
    "connection",
    "protocol",
    "server",
    "verify",
    "dropped_write",
];
pub(super) const E_TIMEOUT: usize = 0;
pub(super) const E_CONNECTION: usize = 1;
pub(super) const E_PROTOCOL: usize = 2;
pub(super) const E_SERVER: usize = 3;
pub(super) const E_VERIFY: usize = 4;
pub(super) const E_DROPPED: usize = 5;
pub(super) const O_HIT: usize = 0;
pub(super) const O_MISS: usize = 1;
pub(super) const O_OK: usize = 2;
pub(super) const O_ERROR: usize = 3;
/// `Pending::op` of untimed internal requests (prefill).
pub(super) const INTERNAL: u16 = u16::MAX;
pub(super) const MAX_SAMPLES: usize = 8;

/// One op's counters and histograms (per thread, merged at the end).
#[derive(Default)]
pub struct OpStats {
    pub count: u64,
    pub hits: u64,
    pub misses: u64,
    pub errors: [u64; 6],
    pub bytes_out: u64,
    pub bytes_in: u64,
    hists: [Option<Box<Hist>>; 4],
    uncorrected: [Option<Box<Hist>>; 4],
    /// Latencies recorded but not yet in the histograms: a run of equal ones. Replies read
    /// together to requests written together share both times (at pipeline 16, sixteen in
    /// a row), so a run goes in as one `record_n`. `settle` puts it in.
    run: Option<Run>,
}

/// `n` latencies of one outcome, all equal.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Run {
    outcome: usize,
    corrected: u64,
    uncorrected: Option<u64>,
    n: u64,
}

impl OpStats {
    #[inline]
    pub(super) fn record(&mut self, outcome: usize, corrected: u64, uncorrected: Option<u64>) {
        self.count += 1;
        let next = Run {
            outcome,
            corrected,
            uncorrected,
            n: 1,
        };
        match &mut self.run {
            Some(r) if Run { n: 1, ..*r } == next => r.n += 1,
            _ => {
                self.settle();
                self.run = Some(next);
            }
        }
    }

    /// Puts the pending run of latencies into the histograms: before they are read.
    pub(super) fn settle(&mut self) {
        let Some(r) = self.run.take() else { return };
        hist::record_n(
            self.hists[r.outcome].get_or_insert_with(|| Box::new(hist::new_hist())),
            r.corrected,
            r.n,
        );
        if let Some(u) = r.uncorrected {
            hist::record_n(
                self.uncorrected[r.outcome].get_or_insert_with(|| Box::new(hist::new_hist())),
                u,
                r.n,
            );
        }
    }

    pub(super) fn merge(&mut self, o: &OpStats) {
        assert!(o.run.is_none(), "merged before `settle`");
        self.settle();
        self.count += o.count;
        self.hits += o.hits;
        self.misses += o.misses;
        for i in 0..6 {
            self.errors[i] += o.errors[i];
        }
        self.bytes_out += o.bytes_out;
        self.bytes_in += o.bytes_in;
        for (mine, theirs) in self
            .hists
            .iter_mut()
            .zip(&o.hists)
            .chain(self.uncorrected.iter_mut().zip(&o.uncorrected))
        {
            if let Some(t) = theirs {
                let m = mine.get_or_insert_with(|| Box::new(hist::new_hist()));
                m.add(t.as_ref()).expect("same bounds");
            }
        }
    }

    /// The op's part of the result: hits and misses for a read, the uncorrected histograms in
    /// open loop.
    pub(super) fn result(&self, open: bool, read: bool) -> OpResult {
        assert!(self.run.is_none(), "read before `settle`");
        let [timeout, connection, protocol, server, verify, dropped_write] = self.errors;
        OpResult {
            bytes_in: self.bytes_in,
            bytes_out: self.bytes_out,
            count: self.count,
            errors: ErrorCounts {
                connection,
                dropped_write,
                protocol,
                server,
                timeout,
                verify,
            },
            histograms: histograms(&self.hists),
            histograms_uncorrected: open.then(|| histograms(&self.uncorrected)),
            reads: read.then_some(ReadCounts {
                hits: self.hits,
                misses: self.misses,
            }),
        }
    }
}

/// Histograms by outcome (indexed `O_HIT`…), encoded for the result.
fn histograms(hs: &[Option<Box<Hist>>; 4]) -> Histograms {
    let encoded = |outcome: usize| hs[outcome].as_deref().map(hist::encode);
    Histograms {
        error: encoded(O_ERROR),
        hit: encoded(O_HIT),
        miss: encoded(O_MISS),
        ok: encoded(O_OK),
    }
}

/// What one thread measured.
#[derive(Default)]
pub(super) struct Recorder {
    pub(super) ops: Vec<OpStats>,
    pub(super) samples: Vec<String>,
    pub(super) wire_out: u64,
    pub(super) wire_in: u64,
    pub(super) prefill_errors: u64,
    pub(super) last_done: u64,
    /// When this thread's timed ops began, on the run's clock: its first send in closed loop
    /// (its wake-up after the shared start is not the application's time), the phase's start
    /// in open loop (its ops are due from there). 0: not set. With `last_done`, the phase's
    /// span as the application saw it; set once per thread, nothing per op.
    pub(super) first_due: u64,
    /// Open loop: ops that fell due before the phase ended but were never sent.
    pub(super) missed: u64,
    /// Ops completed (all phases) since the counts were last published to `Shared`.
    pub(super) tally_ok: u64,
    pub(super) tally_failed: Kinds,
    /// The latest error message, taken at most once per publication (formatting one per
    /// error would cost the measured path).
    pub(super) last: Option<String>,
    pub(super) want_last: bool,
    /// Redis Cluster: redirections answered (`MOVED`, `ASK`), and the thread's slot map
    /// at its end (the canaries route by it).
    pub(super) moved: u64,
    pub(super) ask: u64,
    pub(super) slots: Vec<u16>,
    /// How long writes failed (timed ops only); `absorb` gathers every thread's windows.
    pub(super) outages: Outages,
}

impl Recorder {
    pub(super) fn sample(&mut self, msg: impl FnOnce() -> String) {
        let keep = self.samples.len() < MAX_SAMPLES;
        if keep || self.want_last {
            let m = msg();
            if keep && !self.samples.contains(&m) {
                self.samples.push(m.clone());
            }
            self.last = Some(m);
            self.want_last = false;
        }
    }
}

/// Whose keys a write-outage window of op `p` is about (`outage.rs`): in a Redis Cluster the
/// primary of the map read at the start that owned the key's slot, so that a node's failover
/// is one window however the other nodes' writes go on; 0 for every other run. Computed on
/// failures, and on successes only while a window is open.
pub(super) fn outage_scope(plan: &Plan, p: &Pending) -> u16 {
    let Some(slots) = plan.slots.as_ref().filter(|_| plan.cluster) else {
        return 0;
    };
    let mut key = Vec::with_capacity(plan.prefix.len() + 24);
    key_bytes(&mut key, &plan.prefix, &plan.key_lengths, p.kind, p.key);
    slots[key_slot(&key) as usize]
}

pub(super) fn record_error(rec: &mut Recorder, plan: &Plan, p: &Pending, kind: usize, now: u64) {
    rec.tally_failed[kind] += 1;
    if !p.timed || p.op == INTERNAL {
        if p.op == INTERNAL {
            rec.prefill_errors += 1;
        }
        return;
    }
    let sent = if p.sent == 0 { now } else { p.sent };
    let write = plan.ops[p.op as usize].write;
    rec.outages.failed(
        sent,
        now,
        write,
        if write { outage_scope(plan, p) } else { 0 },
    );
    let st = &mut rec.ops[p.op as usize];
    st.errors[kind] += 1;
    st.bytes_out += p.bytes_out as u64;
    let unc = plan.open.then(|| now.saturating_sub(sent));
    st.record(O_ERROR, now.saturating_sub(p.intended), unc);
}

/// Records one completed request. Its common case — a timed request answered as expected,
/// not to verify — is a few counters and a latency; what is rarer (untimed requests,
/// verification, errors) is out of line.
#[inline]
pub(super) fn complete(
    rec: &mut Recorder,
    plan: &Plan,
    p: &Pending,
    r: &proto::Reply,
    value: Option<&[u8]>,
    avail: &[u8],
    now: u64,
) {
    if p.op == INTERNAL || !p.timed {
        return untimed(rec, p, r, avail);
    }
    let (outcome, err) = match r.outcome {
        Outcome::Hit if p.flags & P_VERIFY != 0 => verify(rec, plan, p, value),
        Outcome::Hit => (O_HIT, 0),
        Outcome::Miss => (O_MISS, 0),
        Outcome::Ok => (O_OK, 0),
        Outcome::ServerError | Outcome::ProtocolError => failed(rec, plan, p, r, avail, now),
    };
    if outcome == O_ERROR {
        rec.tally_failed[err] += 1;
    } else {
        rec.tally_ok += 1;
    }
    let st = &mut rec.ops[p.op as usize];
    match outcome {
        O_HIT => st.hits += 1,
        O_MISS => st.misses += 1,
        O_ERROR => st.errors[err] += 1,
        _ => {}
    }
    st.bytes_out += p.bytes_out as u64;
    st.bytes_in += r.payload as u64;
    let unc = plan.open.then(|| now.saturating_sub(p.sent));
    st.record(outcome, now.saturating_sub(p.intended), unc);
}

/// A read's hit, read whole, not to verify: what `complete` records for it, on the short way
/// of a plain-GET run's replies (`take_hits` in `worker/read.rs`; closed loop: no uncorrected time).
#[inline]
pub(super) fn complete_hit(rec: &mut Recorder, p: &Pending, payload: usize, now: u64) {
    debug_assert!(p.flags & P_VERIFY == 0);
    rec.tally_ok += 1;
    if p.op == INTERNAL || !p.timed {
        return; // a warm-up's read: it only feeds the on-error watch
    }
    let st = &mut rec.ops[p.op as usize];
    st.hits += 1;
    st.bytes_out += p.bytes_out as u64;
    st.bytes_in += payload as u64;
    st.record(O_HIT, now.saturating_sub(p.intended), None);
}

/// A prefill or warm-up request's reply: it only feeds the on-error watch.
#[cold]
fn untimed(rec: &mut Recorder, p: &Pending, r: &proto::Reply, avail: &[u8]) {
    match r.outcome {
        Outcome::ServerError => rec.tally_failed[E_SERVER] += 1,
        Outcome::ProtocolError => rec.tally_failed[E_PROTOCOL] += 1,
        _ => rec.tally_ok += 1,
    }
    if matches!(r.outcome, Outcome::ServerError | Outcome::ProtocolError) {
        if p.op == INTERNAL {
            rec.prefill_errors += 1;
        }
        let m = r
            .message
            .clone()
            .map(|m| printable(&avail[m]))
            .unwrap_or_default();
        rec.sample(|| format!("prefill/warm-up: server error: {m}"));
    }
}

/// A hit to verify: `(O_HIT, _)` when its value is the contract's, else a `verify` error.
#[inline(never)]
fn verify(rec: &mut Recorder, plan: &Plan, p: &Pending, value: Option<&[u8]>) -> (usize, usize) {
    let Some(v) = value else {
        return (O_HIT, 0); // its value was discarded unread: only its length was judged
    };
    let mut key = Vec::with_capacity(plan.prefix.len() + 20);
    write_key(&mut key, &plan.prefix, &plan.key_lengths, p.key);
    if plan.sizes.allows(v.len()) && verify_value(&key, v, &plan.filler) {
        return (O_HIT, 0);
    }
    rec.sample(|| {
        format!(
            "verify: value of {} for key {} is not what was written",
            v.len(),
            String::from_utf8_lossy(&key)
        )
    });
    (O_ERROR, E_VERIFY)
}

/// A server's error or a reply the protocol does not allow: sampled, and a write refused
/// (`-READONLY`, `-OOM`) is a failed write, as for the Python workers.
#[cold]
fn failed(
    rec: &mut Recorder,
    plan: &Plan,
    p: &Pending,
    r: &proto::Reply,
    avail: &[u8],
    now: u64,
) -> (usize, usize) {
    let err = if r.outcome == Outcome::ServerError {
        E_SERVER
    } else {
        E_PROTOCOL
    };
    let m = r
        .message
        .clone()
        .map(|m| printable(&avail[m]))
        .unwrap_or_else(|| "unexpected reply type".into());
    let what = if err == E_SERVER {
        "server error"
    } else {
        "protocol error"
    };
    rec.sample(|| format!("{}: {what}: {m}", plan.ops[p.op as usize].name));
    let write = plan.ops[p.op as usize].write;
    let scope = if write { outage_scope(plan, p) } else { 0 };
    rec.outages.failed(p.sent, now, write, scope);
    (O_ERROR, err)
}

impl Recorder {
    /// An empty recorder for a plan with `ops` ops.
    pub(super) fn new(ops: usize) -> Self {
        Recorder {
            ops: (0..ops).map(|_| OpStats::default()).collect(),
            ..Default::default()
        }
    }

    /// Puts every op's pending latencies into its histograms (`OpStats::settle`).
    pub(super) fn settle(&mut self) {
        self.ops.iter_mut().for_each(OpStats::settle);
    }

    /// Adds another thread's measurements (error samples: at most 2 × `MAX_SAMPLES`, no
    /// duplicates).
    pub(super) fn absorb(&mut self, r: &Recorder) {
        for (a, b) in self.ops.iter_mut().zip(&r.ops) {
            a.merge(b);
        }
        self.wire_in += r.wire_in;
        self.wire_out += r.wire_out;
        self.prefill_errors += r.prefill_errors;
        self.missed += r.missed;
        self.moved += r.moved;
        self.ask += r.ask;
        self.last_done = self.last_done.max(r.last_done);
        if r.first_due != 0 && (self.first_due == 0 || r.first_due < self.first_due) {
            self.first_due = r.first_due;
        }
        self.outages
            .windows
            .extend(r.outages.windows.iter().cloned());
        for s in &r.samples {
            if self.samples.len() < 2 * MAX_SAMPLES && !self.samples.contains(s) {
                self.samples.push(s.clone());
            }
        }
    }

    /// The result's `ops`: each op's counters and histograms under its name.
    pub(super) fn op_results(&self, plan: &Plan) -> BTreeMap<String, OpResult> {
        // reads, and deletes (a hit: the key was there), as the Python clients count them
        let hit_or_miss = |kind| {
            matches!(
                kind,
                Kind::Get | Kind::Gets | Kind::Exists | Kind::MGet(_) | Kind::Delete
            )
        };
        plan.ops
            .iter()
            .zip(&self.ops)
            .map(|(op, st)| (op.name.clone(), st.result(plan.open, hit_or_miss(op.kind))))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn plan(mix: &str, mode: &str) -> Plan {
        let json = format!(r#"{{"protocol":"resp2","servers":["127.0.0.1:1"],"mix":{mix}{mode}}}"#);
        Config::from_json(&json).unwrap().plan().unwrap()
    }

    fn pending(op: u16, timed: bool) -> Pending {
        Pending {
            op,
            kind: Kind::Get,
            timed,
            intended: 1_000,
            sent: 1_500,
            bytes_out: 10,
            key: 0,
            size: 0,
            flags: 0,
            hops: 0,
        }
    }

    fn reply(outcome: Outcome, payload: usize) -> proto::Reply {
        proto::Reply {
            consumed: 0,
            outcome,
            value: None,
            payload,
            message: None,
        }
    }

    /// How many latencies an encoded histogram of the result holds.
    fn count(encoded: &Option<String>) -> u64 {
        hist::decode(encoded.as_deref().unwrap()).unwrap().len()
    }

    #[test]
    fn completions_count_outcomes_bytes_and_latency() {
        let plan = plan(r#"[{"op":"get","weight":1}]"#, "");
        let mut rec = Recorder::new(1);
        let p = pending(0, true);
        complete(
            &mut rec,
            &plan,
            &p,
            &reply(Outcome::Hit, 100),
            None,
            b"",
            3_000,
        );
        complete(
            &mut rec,
            &plan,
            &p,
            &reply(Outcome::Miss, 0),
            None,
            b"",
            3_000,
        );
        complete(
            &mut rec,
            &plan,
            &p,
            &reply(Outcome::ServerError, 0),
            None,
            b"",
            3_000,
        );
        rec.settle();
        let st = &rec.ops[0];
        assert_eq!((st.count, st.hits, st.misses), (3, 1, 1));
        assert_eq!(st.errors[E_SERVER], 1);
        assert_eq!((st.bytes_out, st.bytes_in), (30, 100));
        assert_eq!((rec.tally_ok, rec.tally_failed[E_SERVER]), (2, 1));
        assert_eq!(
            rec.samples,
            vec!["get: server error: unexpected reply type"]
        );
        // Closed loop: latency from the intended time; no uncorrected histograms.
        let hit = st.hists[O_HIT].as_ref().unwrap();
        assert_eq!(hit.len(), 1);
        assert!(hit.equivalent(hit.max(), 2_000));
        assert!(st.uncorrected.iter().all(Option::is_none));
    }

    #[test]
    fn untimed_and_prefill_requests_only_feed_the_watch() {
        let plan = plan(r#"[{"op":"get","weight":1}]"#, "");
        let mut rec = Recorder::new(1);
        complete(
            &mut rec,
            &plan,
            &pending(0, false),
            &reply(Outcome::Hit, 9),
            None,
            b"",
            5,
        );
        let mut prefill = pending(INTERNAL, true);
        prefill.kind = Kind::Set;
        complete(
            &mut rec,
            &plan,
            &prefill,
            &reply(Outcome::ServerError, 0),
            None,
            b"",
            5,
        );
        record_error(&mut rec, &plan, &prefill, E_CONNECTION, 5);
        assert_eq!(rec.ops[0].count, 0);
        assert_eq!(rec.prefill_errors, 2);
        assert_eq!(rec.tally_ok, 1);
        assert_eq!(
            rec.tally_failed[E_SERVER] + rec.tally_failed[E_CONNECTION],
            2
        );
    }

    #[test]
    fn open_loop_errors_record_both_latencies() {
        let plan = plan(
            r#"[{"op":"get","weight":1}]"#,
            r#","mode":"open","rate":1000"#,
        );
        let mut rec = Recorder::new(1);
        record_error(&mut rec, &plan, &pending(0, true), E_TIMEOUT, 9_000);
        rec.settle();
        let st = &rec.ops[0];
        assert_eq!((st.count, st.errors[E_TIMEOUT], st.bytes_out), (1, 1, 10));
        let corrected = st.hists[O_ERROR].as_ref().unwrap();
        let uncorrected = st.uncorrected[O_ERROR].as_ref().unwrap();
        assert!(corrected.equivalent(corrected.max(), 8_000));
        assert!(uncorrected.equivalent(uncorrected.max(), 7_500));
    }

    #[test]
    fn runs_of_equal_latencies_are_counted_whole() {
        let mut st = OpStats::default();
        let recorded = [(O_HIT, 500, None); 16]
            .into_iter()
            .chain([
                (O_MISS, 500, None),
                (O_HIT, 500, None),
                (O_HIT, 900, Some(800)),
            ])
            .chain([(O_HIT, 900, Some(700)); 3]);
        for (outcome, corrected, uncorrected) in recorded {
            st.record(outcome, corrected, uncorrected);
        }
        st.settle();
        st.settle(); // nothing pending: nothing added
        let hit = st.hists[O_HIT].as_ref().unwrap();
        assert_eq!(
            (st.count, hit.len(), hit.count_at(500), hit.count_at(900)),
            (22, 21, 17, 4)
        );
        assert_eq!(st.hists[O_MISS].as_ref().unwrap().len(), 1);
        let unc = st.uncorrected[O_HIT].as_ref().unwrap();
        assert_eq!((unc.len(), unc.count_at(800), unc.count_at(700)), (4, 1, 3));
    }

    #[test]
    fn error_counts_are_named_as_error_kinds_says() {
        for (i, kind) in ERROR_KINDS.iter().enumerate() {
            let mut st = OpStats::default();
            st.errors[i] = 1;
            let errors = serde_json::to_value(st.result(false, false).errors).unwrap();
            assert_eq!(errors, serde_json::json!({ *kind: 1 }));
        }
    }

    #[test]
    fn threads_merge_into_one_result() {
        let plan = plan(
            r#"[{"op":"get","weight":1},{"op":"set","weight":1}]"#,
            r#","mode":"open","rate":1000"#,
        );
        let mut a = Recorder::new(2);
        let mut b = Recorder::new(2);
        let p = pending(0, true);
        complete(&mut a, &plan, &p, &reply(Outcome::Hit, 4), None, b"", 2_000);
        complete(&mut b, &plan, &p, &reply(Outcome::Hit, 4), None, b"", 4_000);
        complete(
            &mut b,
            &plan,
            &p,
            &reply(Outcome::Miss, 0),
            None,
            b"",
            4_000,
        );
        record_error(&mut b, &plan, &pending(1, true), E_CONNECTION, 4_000);
        (a.wire_out, b.wire_out, a.wire_in, b.wire_in) = (1, 2, 3, 4);
        (a.missed, b.missed, a.last_done, b.last_done) = (5, 6, 70, 80);
        a.samples = vec!["x".into(), "y".into()];
        b.samples = (0..MAX_SAMPLES * 3).map(|i| format!("m{i}")).collect();
        b.samples[0] = "y".into();
        a.settle();
        b.settle();
        let mut total = Recorder::new(2);
        total.absorb(&a);
        total.absorb(&b);
        assert_eq!((total.wire_out, total.wire_in), (3, 7));
        assert_eq!((total.missed, total.last_done), (11, 80));
        assert_eq!(total.samples.len(), 2 * MAX_SAMPLES);
        assert_eq!(&total.samples[..3], ["x", "y", "m1"]);

        let ops = total.op_results(&plan);
        let get = &ops["get"];
        assert_eq!((get.count, get.bytes_in), (3, 8));
        assert_eq!(get.reads, Some(ReadCounts { hits: 2, misses: 1 }));
        assert_eq!(get.errors, ErrorCounts::default());
        assert_eq!(count(&get.histograms.hit), 2);
        assert_eq!(count(&get.histograms.miss), 1);
        let uncorrected = get.histograms_uncorrected.as_ref().unwrap();
        assert_eq!(count(&uncorrected.hit), 2);
        let set = &ops["set"];
        assert_eq!(set.count, 1);
        let connection = ErrorCounts {
            connection: 1,
            ..Default::default()
        };
        assert_eq!(set.errors, connection);
        assert!(set.reads.is_none(), "hits and misses are for reads only");
        assert_eq!(count(&set.histograms.error), 1);
    }
}
