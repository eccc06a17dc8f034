//! A whole run, orchestrated from the calling thread: connect everything up front, start
//! the load threads, wait for their prefill, start warm-up and the timed phase on one
//! clock, stop them early on Ctrl-C or the on-error policy, merge what they measured,
//! write the dropped-write canaries and build the result ([`RunResult`]).

use super::canary::{canaries, canary_count};
use super::conn::connect;
use super::error::RunError;
use super::record::{Recorder, E_DROPPED};
use super::result::{ClusterFigures, Mode, RunResult};
use super::shared::Shared;
use super::stream::Stream;
use super::{sentinel, topology, worker};
use crate::config::{IoBackend, Plan};
use crate::keyspace::Rng;
use crate::proto::Kind;
use crate::watch::ErrorWatch;
use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The orchestrating thread's two reasons to stop the load threads early: `poll` (Ctrl-C;
/// told the ops done so far, the caller's progress) and the on-error policy.
struct Control<'a> {
    shared: &'a Shared,
    poll: &'a mut dyn FnMut(u64) -> bool,
    watch: ErrorWatch,
    interrupted: bool,
    stopped_on_errors: Option<String>,
}

impl Control<'_> {
    /// Looks at both and tells every load thread to stop when one says so; true once
    /// stopping. `during` names the part of the run, for the on-error reason.
    fn check(&mut self, during: &str) -> bool {
        let (ok, failed) = self.shared.totals();
        if !self.interrupted && (self.poll)(ok + failed.iter().sum::<u64>()) {
            self.interrupted = true;
            self.shared.stop.store(true, Ordering::Relaxed);
        }
        if !self.shared.stopping() && self.watch.should_stop(self.shared.now(), ok, failed) {
            let last = self
                .shared
                .last_error
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            self.stopped_on_errors = Some(self.watch.reason(during, last.as_deref()));
            self.shared.stop.store(true, Ordering::Relaxed);
        }
        self.shared.stopping()
    }
}

/// Runs a whole load test. `poll` is called about every 10 ms from the calling thread with
/// the requests answered so far (a prefill's keys, while it runs) and returns true to stop
/// (e.g. on Ctrl-C); the result then says `interrupted`.
/// With `on_error: "stop"` the run also stops once every op of the last `error_grace_s`
/// failed; the result then says why in `stopped_on_errors`.
pub fn run(plan: &Plan, poll: &mut dyn FnMut(u64) -> bool) -> Result<RunResult, RunError> {
    // Redis Cluster: the seeds give way to the primaries of the slot map.
    let resolved;
    let plan = if plan.cluster {
        resolved = topology::resolve(plan)?;
        &resolved
    } else {
        plan
    };
    let shared = Shared::new();
    let timeout = Duration::from_nanos(plan.timeout_ns);
    if plan.io == IoBackend::Uring {
        if let Err(e) = io_uring::IoUring::new(8) {
            return Err(RunError::Spec(format!(
                "io \"uring\" was asked for but io_uring is not available here: {e}"
            )));
        }
    }
    let groups = connect_all(plan, timeout)?;
    let mut control = Control {
        shared: &shared,
        poll,
        watch: ErrorWatch::new(plan.error_grace_ns),
        interrupted: false,
        stopped_on_errors: None,
    };
    let Ran {
        recs,
        measure_start,
        cpu0,
    } = load_threads(plan, &shared, &mut control, groups)?;
    let cpu1 = cpu_seconds();
    let mut total = Recorder::new(plan.ops.len());
    for r in &recs {
        total.absorb(r);
    }
    // The application's wall: from when the first thread began its timed ops (a thread's
    // wake-up after the shared start is not in it) to the last reply.
    let wall_ns = if total.first_due != 0 {
        total.last_done.saturating_sub(total.first_due)
    } else {
        total.last_done.saturating_sub(measure_start)
    };
    let wall = wall_ns as f64 / 1e9;
    // Not after a stop: a dead server would only make every canary wait for its timeout.
    if !control.interrupted && control.stopped_on_errors.is_none() {
        write_canaries(plan, &shared, &recs, &mut total, timeout);
    }
    let (cpu_user, cpu_system) = (cpu1.0 - cpu0.0, cpu1.1 - cpu0.1);
    Ok(RunResult {
        client_cpu_s: cpu_user + cpu_system,
        client_cpu_user_s: cpu_user,
        cluster: plan
            .cluster
            .then(|| cluster_figures(plan, &total, shared.joined.names())),
        connections: plan.connections * plan.connected_at_start(),
        errors_sample: total.samples.clone(),
        interrupted: control.interrupted,
        missed: total.missed,
        mode: if plan.open { Mode::Open } else { Mode::Closed },
        ops: total.op_results(plan),
        pipeline: plan.pipeline,
        prefill_errors: total.prefill_errors,
        rate: plan.open.then_some(plan.rate),
        // Python's clock (CLOCK_MONOTONIC): where the timed phase began, and the threads'
        // write-outage windows (`outage.rs`), for `measure.outage.merge_outages`.
        start_ns: measure_start + shared.mono_epoch,
        stopped_on_errors: control.stopped_on_errors,
        threads: plan.threads,
        wall_s: wall,
        wire_bytes_in: total.wire_in,
        wire_bytes_out: total.wire_out,
        write_outages: total
            .outages
            .windows
            .iter()
            .map(|w| w.result(shared.mono_epoch))
            .collect(),
    })
}

/// Every client's connections, one per server (`None`: a cluster replica not read from),
/// dealt out to the load threads: per thread, its clients' global indexes and connections.
/// Everything connects up front, so that an unreachable server or a bad password fails
/// fast. (A cluster's replicas not read from do not: a load thread connects one when a
/// failover makes it a primary.)
fn connect_all(plan: &Plan, timeout: Duration) -> Result<Vec<ThreadClients>, RunError> {
    let mut groups: Vec<ThreadClients> = (0..plan.threads).map(|_| Vec::new()).collect();
    for g in 0..plan.connections {
        let mut per = Vec::new();
        for server in 0..plan.servers.len() {
            per.push(if server < plan.connected_at_start() {
                Some(connect(plan, server, timeout).map_err(RunError::Unavailable)?)
            } else {
                None
            });
        }
        groups[g % plan.threads].push((g, per));
    }
    Ok(groups)
}

/// One load thread's clients: each one's global index and its connections.
type ThreadClients = Vec<(usize, Vec<Option<Stream>>)>;

/// What the load threads came back with.
struct Ran {
    /// What each measured.
    recs: Vec<Recorder>,
    /// Where the timed phase began, on the run's clock.
    measure_start: u64,
    /// The process's CPU time (user, system) then.
    cpu0: (f64, f64),
}

/// Starts a load thread per group and paces them from this thread (`pace`) until all have
/// ended.
fn load_threads(
    plan: &Plan,
    shared: &Shared,
    control: &mut Control,
    groups: Vec<ThreadClients>,
) -> Result<Ran, RunError> {
    let t = plan.threads;
    std::thread::scope(|scope| {
        let mut handles = Vec::with_capacity(t);
        for (ti, group) in groups.into_iter().enumerate() {
            let share = group.len() as u64;
            let spawned = std::thread::Builder::new()
                .name(format!("cachemark-load-{ti}"))
                .spawn_scoped(scope, move || worker::run(plan, shared, ti, group, share));
            match spawned {
                Ok(handle) => handles.push(handle),
                Err(e) => {
                    // The threads started so far end at once: stopped before a run that starts now.
                    shared.stop.store(true, Ordering::Release);
                    shared
                        .run_start
                        .store(shared.now().max(1), Ordering::Release);
                    for handle in handles {
                        let _ = handle.join();
                    }
                    return Err(RunError::Host(format!(
                        "the host refused load thread {} of {t}: {e} (its thread or memory limit): ask for \
                         fewer threads",
                        ti + 1
                    )));
                }
            }
        }
        let measure_start = pace(plan, shared, control);
        let cpu0 = cpu_seconds();
        while !handles.iter().all(|h| h.is_finished()) {
            control.check("");
            std::thread::sleep(Duration::from_millis(10));
        }
        let recs = handles
            .into_iter()
            .map(|h| h.join().expect("load thread panicked"))
            .collect();
        Ok(Ran {
            recs,
            measure_start,
            cpu0,
        })
    })
}

/// Waits for prefill everywhere, then starts all threads on one clock and waits out the
/// warm-up: where the timed phase begins.
fn pace(plan: &Plan, shared: &Shared, control: &mut Control) -> u64 {
    while shared.ready.load(Ordering::Acquire) < plan.threads {
        control.check(" during prefill");
        std::thread::sleep(Duration::from_millis(5));
    }
    let start = shared.now() + 1_000_000;
    let measure_start = start + plan.warmup_ns;
    shared.run_start.store(start, Ordering::Release);
    // (Between prefill and the run there is a millisecond even without a warm-up.)
    let warming = if plan.warmup_ns > 0 {
        " during warm-up"
    } else {
        " during prefill"
    };
    while shared.now() < measure_start && !control.check(warming) {
        std::thread::sleep(Duration::from_nanos(
            (measure_start.saturating_sub(shared.now())).min(10_000_000),
        ));
    }
    measure_start
}

/// Dropped-write canaries: a sample proportional to the writes, at most 100, counted into
/// the first set op's errors.
fn write_canaries(
    plan: &Plan,
    shared: &Shared,
    recs: &[Recorder],
    total: &mut Recorder,
    timeout: Duration,
) {
    let Some(si) = plan.ops.iter().position(|o| o.kind == Kind::Set) else {
        return;
    };
    let n = canary_count(total.ops[si].count, plan.verify_fraction);
    if n == 0 {
        return;
    }
    let mut rng = Rng::new(plan.seed ^ 0xC0FFEE);
    let slots = recs.iter().map(|r| &r.slots).find(|s| !s.is_empty());
    let canary_plan = servers_now(plan, shared, total, timeout);
    let (dropped, msgs) = canaries(&canary_plan, n, &mut rng, slots.map(|s| s.as_slice()));
    total.ops[si].errors[E_DROPPED] += dropped;
    total.ops[si].count += dropped;
    for m in msgs.into_iter().take(3) {
        total.samples.push(m);
    }
}

/// The plan with the servers as they are now: with Sentinels, the primary they name now (a
/// failover may have moved it); for a cluster, the nodes that joined meanwhile too (a
/// thread's last slot map may name them).
fn servers_now<'a>(
    plan: &'a Plan,
    shared: &Shared,
    total: &mut Recorder,
    timeout: Duration,
) -> Cow<'a, Plan> {
    match &plan.sentinel {
        Some(s) => match sentinel::ask(s, timeout.min(Duration::from_secs(1))) {
            Ok((addr, name)) => {
                let mut p = plan.clone();
                (p.servers, p.server_names) = (vec![addr], vec![name]);
                Cow::Owned(p)
            }
            Err(m) => {
                total.samples.push(m);
                Cow::Borrowed(plan)
            }
        },
        None if plan.cluster => Cow::Owned(shared.joined.extend(plan)),
        None => Cow::Borrowed(plan),
    }
}

/// The result's `cluster`: the map read at the start (primaries; the replicas when read
/// from), the redirects answered, and the nodes that joined during the run, if any.
fn cluster_figures(plan: &Plan, total: &Recorder, joined: Vec<String>) -> ClusterFigures {
    ClusterFigures {
        ask: total.ask,
        joined,
        moved: total.moved,
        primaries: plan.primaries,
        replicas: plan
            .read_from_replicas
            .then(|| plan.servers.len() - plan.primaries),
    }
}

/// CPU seconds (user, system) of the whole process so far.
fn cpu_seconds() -> (f64, f64) {
    // SAFETY: getrusage fills the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 * 1e-6;
    (t(ru.ru_utime), t(ru.ru_stime))
}
