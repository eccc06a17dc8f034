//! The load loop: T threads, each owning C/T logical clients and one hand-rolled
//! level-triggered epoll loop over their sockets (no async runtime, no task per
//! request), plus run orchestration (connect, prefill, warm-up, timed phase, drain,
//! dropped-write canaries) and the merge of per-thread results into the JSON result.
//!
//! Why epoll by hand: on these VMs syscalls dominate a load generator's CPU. Each
//! socket gets one `read` per readiness event (everything available, into a
//! persistent buffer), replies are parsed in place, new requests are encoded into a
//! persistent write buffer and written at once with one `write` — write-readiness
//! interest is only registered when the kernel buffer is full. That is about two
//! syscalls per op at pipeline 1 and far fewer with pipelining.
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

use crate::arrivals::Arrivals;
use crate::config::{Arrival, IoBackend, OpPlan, Plan, Protocol, Seg};
use crate::hist::{self, Hist};
use crate::keyspace::{route, verify_value, write_key, write_u64, write_value, KeyPicker, Rng};
use crate::outbuf::OutBuf;
use crate::proto::{self, memcache, printable, resp, Kind, Outcome, Parse};
use crate::watch::{ErrorWatch, Kinds};
use serde_json::{json, Map, Value};
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Error kinds of docs/contracts.md, in the order of `OpStats::errors`.
pub const ERROR_KINDS: [&str; 6] = [
    "timeout",
    "connection",
    "protocol",
    "server",
    "verify",
    "dropped_write",
];
const E_TIMEOUT: usize = 0;
const E_CONNECTION: usize = 1;
const E_PROTOCOL: usize = 2;
const E_SERVER: usize = 3;
const E_VERIFY: usize = 4;
const E_DROPPED: usize = 5;
const OUTCOMES: [&str; 4] = ["hit", "miss", "ok", "error"];
const O_HIT: usize = 0;
const O_MISS: usize = 1;
const O_OK: usize = 2;
const O_ERROR: usize = 3;
/// `Pending::op` of untimed internal requests (prefill).
const INTERNAL: u16 = u16::MAX;
const NO_KEY: u64 = u64::MAX;
/// Open loop: least time between two reconnects of one socket (the ops due meanwhile fail).
const RETRY_NS: u64 = 100_000_000;
const TICK_NS: u64 = 10_000_000;
const MAX_SAMPLES: usize = 8;

/// Why a run could not happen.
#[derive(Debug)]
pub enum RunError {
    /// The configuration is invalid.
    Spec(String),
    /// A server cannot be reached, refuses our credentials, or speaks another protocol.
    Unavailable(String),
}

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
}

impl OpStats {
    #[inline]
    fn record(&mut self, outcome: usize, corrected: u64, uncorrected: Option<u64>) {
        self.count += 1;
        hist::record(
            self.hists[outcome].get_or_insert_with(|| Box::new(hist::new_hist())),
            corrected,
        );
        if let Some(u) = uncorrected {
            hist::record(
                self.uncorrected[outcome].get_or_insert_with(|| Box::new(hist::new_hist())),
                u,
            );
        }
    }

    fn merge(&mut self, o: &OpStats) {
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

    fn to_json(&self, open: bool, read: bool) -> Value {
        let mut errors = Map::new();
        for (i, k) in ERROR_KINDS.iter().enumerate() {
            if self.errors[i] > 0 {
                errors.insert((*k).into(), self.errors[i].into());
            }
        }
        let enc = |hs: &[Option<Box<Hist>>; 4]| {
            let mut m = Map::new();
            for (i, h) in hs.iter().enumerate() {
                if let Some(h) = h {
                    m.insert(OUTCOMES[i].into(), hist::encode(h).into());
                }
            }
            Value::Object(m)
        };
        let mut v = json!({
            "count": self.count,
            "errors": errors,
            "bytes_out": self.bytes_out,
            "bytes_in": self.bytes_in,
            "histograms": enc(&self.hists),
        });
        if read {
            v["hits"] = self.hits.into();
            v["misses"] = self.misses.into();
        }
        if open {
            v["histograms_uncorrected"] = enc(&self.uncorrected);
        }
        v
    }
}

/// What one thread measured.
#[derive(Default)]
struct Recorder {
    ops: Vec<OpStats>,
    samples: Vec<String>,
    wire_out: u64,
    wire_in: u64,
    prefill_errors: u64,
    last_done: u64,
    /// Open loop: ops that fell due before the phase ended but were never sent.
    missed: u64,
    /// Ops completed (all phases) since the counts were last published to `Shared`.
    tally_ok: u64,
    tally_failed: Kinds,
    /// The latest error message, taken at most once per publication (formatting one per
    /// error would cost the measured path).
    last: Option<String>,
    want_last: bool,
}

impl Recorder {
    fn sample(&mut self, msg: impl FnOnce() -> String) {
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

#[derive(Clone, Copy)]
struct Pending {
    op: u16,
    kind: Kind,
    timed: bool,
    intended: u64,
    sent: u64,
    verify_key: u64,
    bytes_out: u32,
}

struct Sock {
    stream: Option<TcpStream>,
    fd: i32,
    server: usize,
    client: usize,
    wbuf: OutBuf,
    wpos: usize,
    rbuf: Vec<u8>,
    rpos: usize,
    /// `rbuf.len()` must reach this before parsing again (the parser said so).
    need: usize,
    inflight: VecDeque<Pending>,
    unstamped: usize,
    want_out: bool,
    retry_at: u64,
    /// The iovecs of the last gathered write (`writev`, or io_uring's SENDMSG: then with
    /// its header, both untouched until it completes) when large values are spliced in.
    iov: Vec<libc::iovec>,
    msg: Box<libc::msghdr>,
    // io_uring only: the buffer a SEND in flight reads (never touched until it completes),
    // the in-flight flags, and a closed connection whose operations have not completed yet.
    sending: OutBuf,
    spos: usize,
    send_busy: bool,
    recv_busy: bool,
    dirty: bool,
    zombie: Option<TcpStream>,
}

/// Most bytes taken from a socket by one read: a little less than one 64 KiB loopback (or
/// GRO) segment. Reading whole segments at once (100 KB GETs from Redis) often left the last
/// reference to the server's socket pages with the client, so they were freed on the
/// client's CPU and the server copied its next replies into pages cold in its cache (page
/// frees on the client's side per GET: 0.35–0.5 unbounded, 0.16–0.23 at 48–56 KiB). 56 KiB
/// still takes a 100 KB reply in two reads; 48 KiB took three, costing memcached runs ~25 %
/// more client CPU per op (docs/engine.md).
const MAX_READ: usize = 56 * 1024;

impl Sock {
    /// Makes room at the end of `rbuf` for the next read; returns how much it may take.
    fn read_room(&mut self) -> usize {
        if self.rpos > 0
            && (self.rpos == self.rbuf.len() || self.rbuf.capacity() - self.rbuf.len() < MAX_READ)
        {
            self.rbuf.drain(..self.rpos);
            self.need = self.need.saturating_sub(self.rpos);
            self.rpos = 0;
        }
        self.rbuf.reserve(MAX_READ);
        (self.rbuf.capacity() - self.rbuf.len()).min(MAX_READ)
    }
}

struct Client {
    socks: Vec<usize>,
    inflight: usize,
    next_intended: u64,
    arrivals: Arrivals,
    picker: KeyPicker,
    prefill_next: u64,
}

/// State shared between the orchestrating thread and the load threads.
struct Shared {
    epoch: Instant,
    stop: AtomicBool,
    ready: AtomicUsize,
    /// Start of the run phase (warm-up first), ns since `epoch`; 0 until set.
    run_start: AtomicU64,
    /// Ops completed by all threads (every phase), published every tick: the on-error watch.
    ok: AtomicU64,
    failed: [AtomicU64; 6],
    last_error: Mutex<Option<String>>,
}

impl Shared {
    fn new() -> Self {
        Shared {
            epoch: Instant::now(),
            stop: AtomicBool::new(false),
            ready: AtomicUsize::new(0),
            run_start: AtomicU64::new(0),
            ok: AtomicU64::new(0),
            failed: Default::default(),
            last_error: Mutex::new(None),
        }
    }

    #[inline]
    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Adds a thread's counts since its last publication.
    fn publish(&self, rec: &mut Recorder) {
        self.ok
            .fetch_add(std::mem::take(&mut rec.tally_ok), Ordering::Relaxed);
        for (total, n) in self.failed.iter().zip(&mut rec.tally_failed) {
            total.fetch_add(std::mem::take(n), Ordering::Relaxed);
        }
        if let Some(m) = rec.last.take() {
            *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(m);
        }
        rec.want_last = true;
    }

    fn totals(&self) -> (u64, Kinds) {
        let failed = std::array::from_fn(|k| self.failed[k].load(Ordering::Relaxed));
        (self.ok.load(Ordering::Relaxed), failed)
    }
}

/// What `Worker::issue` did.
#[derive(PartialEq, Eq)]
enum Issue {
    /// A request is queued.
    Queued,
    /// The op failed at once (its connection is down), and is counted.
    Failed,
}

#[derive(PartialEq, Eq, Clone, Copy)]
enum Phase {
    Prefill,
    Run,
}

fn key_bytes(out: &mut Vec<u8>, prefix: &[u8], kind: Kind, i: u64) {
    out.clear();
    if kind == Kind::Incr {
        out.extend_from_slice(prefix);
        out.extend_from_slice(b"n:");
        write_u64(out, i);
    } else {
        write_key(out, prefix, i);
    }
}

/// Encodes one request for keys `prefix + i`; returns the payload bytes (keys + values) it carries.
#[allow(clippy::too_many_arguments)]
fn encode(
    plan: &Plan,
    prefix: &[u8],
    op: &OpPlan,
    out: &mut OutBuf,
    keys: &[u64],
    size: usize,
    kb: &mut Vec<u8>,
    tmp: &mut Vec<u8>,
) -> usize {
    let f = &plan.filler;
    let ttl = plan.ttl_s;
    key_bytes(kb, prefix, op.kind, keys[0]);
    let klen = kb.len();
    match plan.protocol {
        Protocol::Resp2 | Protocol::Resp3 => match op.kind {
            Kind::Get | Kind::Gets => {
                out.extend_from_slice(b"*2\r\n$3\r\nGET\r\n");
                resp::bulk(out, kb);
                klen
            }
            Kind::Set => {
                if ttl > 0 {
                    out.extend_from_slice(b"*5\r\n$3\r\nSET\r\n");
                } else {
                    out.extend_from_slice(b"*3\r\n$3\r\nSET\r\n");
                }
                resp::bulk(out, kb);
                bulk_value(out, kb, size, f);
                if ttl > 0 {
                    out.extend_from_slice(b"$2\r\nEX\r\n");
                    resp::bulk_u64(out, ttl);
                }
                klen + size
            }
            Kind::Delete => {
                out.extend_from_slice(b"*2\r\n$3\r\nDEL\r\n");
                resp::bulk(out, kb);
                klen
            }
            Kind::Exists => {
                out.extend_from_slice(b"*2\r\n$6\r\nEXISTS\r\n");
                resp::bulk(out, kb);
                klen
            }
            Kind::Incr => {
                out.extend_from_slice(b"*2\r\n$4\r\nINCR\r\n");
                resp::bulk(out, kb);
                klen
            }
            Kind::Touch => {
                if ttl > 0 {
                    out.extend_from_slice(b"*3\r\n$6\r\nEXPIRE\r\n");
                    resp::bulk(out, kb);
                    resp::bulk_u64(out, ttl);
                } else {
                    out.extend_from_slice(b"*2\r\n$7\r\nPERSIST\r\n");
                    resp::bulk(out, kb);
                }
                klen
            }
            Kind::MGet(_) => {
                resp::array_header(out, keys.len() + 1);
                resp::bulk(out, b"MGET");
                let mut n = 0;
                for &k in keys {
                    key_bytes(kb, prefix, Kind::Get, k);
                    resp::bulk(out, kb);
                    n += kb.len();
                }
                n
            }
            Kind::Template | Kind::Setup => {
                resp::array_header(out, op.template.len());
                let mut n = 0;
                for arg in &op.template {
                    match arg.as_slice() {
                        [Seg::Lit(l)] => resp::bulk(out, l),
                        [Seg::Key] => {
                            resp::bulk(out, kb);
                            n += klen;
                        }
                        [Seg::Value] => {
                            bulk_value(out, kb, size, f);
                            n += size;
                        }
                        segs => {
                            tmp.clear();
                            render(tmp, segs, kb, size, ttl, f);
                            resp::bulk(out, tmp);
                        }
                    }
                }
                n
            }
        },
        Protocol::MemcacheText => {
            match op.kind {
                Kind::Get | Kind::Exists => line(out, b"get ", kb, b""),
                Kind::Gets => line(out, b"gets ", kb, b""),
                Kind::Set => {
                    out.extend_from_slice(b"set ");
                    out.extend_from_slice(kb);
                    out.extend_from_slice(b" 0 ");
                    write_u64(out, ttl);
                    out.push(b' ');
                    write_u64(out, size as u64);
                    out.extend_from_slice(b"\r\n");
                    out.value(kb, size, f);
                    out.extend_from_slice(b"\r\n");
                    return klen + size;
                }
                Kind::Delete => line(out, b"delete ", kb, b""),
                Kind::Incr => line(out, b"incr ", kb, b" 1"),
                Kind::Touch => {
                    out.extend_from_slice(b"touch ");
                    out.extend_from_slice(kb);
                    out.push(b' ');
                    write_u64(out, ttl);
                    out.extend_from_slice(b"\r\n");
                }
                Kind::MGet(_) => {
                    out.extend_from_slice(b"get");
                    let mut n = 0;
                    for &k in keys {
                        out.push(b' ');
                        key_bytes(kb, prefix, Kind::Get, k);
                        out.extend_from_slice(kb);
                        n += kb.len();
                    }
                    out.extend_from_slice(b"\r\n");
                    return n;
                }
                Kind::Template | Kind::Setup => {
                    return memcache_template(out, op, kb, size, ttl, f)
                }
            }
            klen
        }
        Protocol::MemcacheMeta => {
            match op.kind {
                Kind::Get => line(out, b"mg ", kb, b" v"),
                Kind::Gets => line(out, b"mg ", kb, b" v c"),
                Kind::Exists => line(out, b"mg ", kb, b""),
                Kind::Set => {
                    out.extend_from_slice(b"ms ");
                    out.extend_from_slice(kb);
                    out.push(b' ');
                    write_u64(out, size as u64);
                    if ttl > 0 {
                        out.extend_from_slice(b" T");
                        write_u64(out, ttl);
                    }
                    out.extend_from_slice(b"\r\n");
                    out.value(kb, size, f);
                    out.extend_from_slice(b"\r\n");
                    return klen + size;
                }
                Kind::Delete => line(out, b"md ", kb, b""),
                Kind::Incr => line(out, b"ma ", kb, b""),
                Kind::Touch => {
                    out.extend_from_slice(b"mg ");
                    out.extend_from_slice(kb);
                    out.extend_from_slice(b" T");
                    write_u64(out, ttl);
                    out.extend_from_slice(b"\r\n");
                }
                Kind::MGet(_) => {
                    let mut n = 0;
                    for &k in keys {
                        key_bytes(kb, prefix, Kind::Get, k);
                        line(out, b"mg ", kb, b" v q");
                        n += kb.len();
                    }
                    out.extend_from_slice(b"mn\r\n");
                    return n;
                }
                Kind::Template | Kind::Setup => {
                    return memcache_template(out, op, kb, size, ttl, f)
                }
            }
            klen
        }
    }
}

/// A RESP bulk string holding the contract value for `key` of length `n`.
fn bulk_value(out: &mut OutBuf, key: &[u8], n: usize, filler: &[u8]) {
    out.push(b'$');
    write_u64(out, n as u64);
    out.extend_from_slice(b"\r\n");
    out.value(key, n, filler);
    out.extend_from_slice(b"\r\n");
}

#[inline]
fn line(out: &mut Vec<u8>, head: &[u8], key: &[u8], tail: &[u8]) {
    out.extend_from_slice(head);
    out.extend_from_slice(key);
    out.extend_from_slice(tail);
    out.extend_from_slice(b"\r\n");
}

fn render(out: &mut Vec<u8>, segs: &[Seg], key: &[u8], size: usize, ttl: u64, filler: &[u8]) {
    for s in segs {
        match s {
            Seg::Lit(l) => out.extend_from_slice(l),
            Seg::Key => out.extend_from_slice(key),
            Seg::Value => write_value(out, key, size, filler),
            Seg::Ttl => write_u64(out, ttl),
            Seg::Len => write_u64(out, size as u64),
        }
    }
}

fn memcache_template(
    out: &mut OutBuf,
    op: &OpPlan,
    key: &[u8],
    size: usize,
    ttl: u64,
    f: &[u8],
) -> usize {
    let mut first = true;
    let mut data = false;
    for arg in &op.template {
        if arg.as_slice() == [Seg::Value] {
            data = true;
            continue;
        }
        if !first {
            out.push(b' ');
        }
        first = false;
        render(out, arg, key, size, ttl, f);
    }
    out.extend_from_slice(b"\r\n");
    if data {
        out.value(key, size, f);
        out.extend_from_slice(b"\r\n");
        return key.len() + size;
    }
    key.len()
}

#[inline]
fn parse_reply(proto: Protocol, buf: &[u8], kind: Kind, lim: &proto::Limits) -> Parse {
    match proto {
        Protocol::Resp2 | Protocol::Resp3 => resp::parse(buf, kind, lim),
        Protocol::MemcacheText => memcache::parse_text(buf, kind, lim),
        Protocol::MemcacheMeta => memcache::parse_meta(buf, kind, lim),
    }
}

/// One blocking read, retried when a signal interrupts it: Python installs its handlers
/// without SA_RESTART, and a read on a socket with a timeout is never restarted anyway.
/// (`connect_timeout` and `write_all` retry on EINTR themselves.)
fn read_some(s: &mut TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match s.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

/// Opens and sets up one connection (blocking), then makes it non-blocking.
fn connect(plan: &Plan, server: usize, timeout: Duration) -> Result<TcpStream, String> {
    let name = &plan.server_names[server];
    let mut s = TcpStream::connect_timeout(&plan.servers[server], timeout)
        .map_err(|e| format!("cannot connect to {name}: {e}"))?;
    let _ = s.set_nodelay(true);
    s.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    let mut cmds: Vec<(Vec<Vec<u8>>, &str)> = Vec::new();
    let b = |x: &str| x.as_bytes().to_vec();
    match plan.protocol {
        Protocol::Resp2 => {
            if let Some(pw) = &plan.password {
                let mut c = vec![b("AUTH")];
                if let Some(u) = &plan.username {
                    c.push(b(u));
                }
                c.push(b(pw));
                cmds.push((c, "authentication"));
            }
        }
        Protocol::Resp3 => {
            let mut c = vec![b("HELLO"), b("3")];
            if let Some(pw) = &plan.password {
                c.extend([
                    b("AUTH"),
                    b(plan.username.as_deref().unwrap_or("default")),
                    b(pw),
                ]);
            }
            cmds.push((c, "HELLO 3 (RESP3)"));
        }
        _ => {}
    }
    let mut req = Vec::new();
    if plan.protocol.is_resp() {
        if plan.db != 0 {
            cmds.push((
                vec![b("SELECT"), plan.db.to_string().into_bytes()],
                "SELECT",
            ));
        }
        // PING proves the server speaks RESP and that no authentication is missing.
        cmds.push((vec![b("PING")], "PING"));
        for (c, _) in &cmds {
            let parts: Vec<&[u8]> = c.iter().map(|x| x.as_slice()).collect();
            resp::command(&mut req, &parts);
        }
    } else if plan.protocol == Protocol::MemcacheText {
        req.extend_from_slice(b"version\r\n");
        cmds.push((vec![], "version"));
    } else {
        req.extend_from_slice(b"mn\r\n");
        cmds.push((vec![], "the meta protocol (mn)"));
    }
    s.write_all(&req)
        .map_err(|e| format!("{name}: cannot send: {e}"))?;
    let mut buf = Vec::with_capacity(4096);
    let mut pos = 0;
    for (_, what) in &cmds {
        loop {
            match parse_reply(plan.protocol, &buf[pos..], Kind::Setup, &plan.limits) {
                Parse::Done(r) => {
                    if r.outcome == Outcome::ServerError || r.outcome == Outcome::ProtocolError {
                        let msg = r
                            .message
                            .map(|m| printable(&buf[pos + m.start..pos + m.end]))
                            .unwrap_or_default();
                        let hint = if msg.contains("NOAUTH")
                            || msg.contains("WRONGPASS")
                            || msg.contains("AUTH")
                        {
                            "authentication failed"
                        } else {
                            "the server refused"
                        };
                        return Err(format!("{name}: {hint} at {what}: {msg}"));
                    }
                    pos += r.consumed;
                    break;
                }
                Parse::Need(_) => {
                    let mut chunk = [0u8; 4096];
                    let n = read_some(&mut s, &mut chunk).map_err(|e| match e.kind() {
                        // SO_RCVTIMEO expired (EAGAIN): say so rather than "temporarily unavailable".
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                            format!(
                                "{name}: no reply to {what} within {} ms",
                                timeout.as_millis()
                            )
                        }
                        _ => format!("{name}: no reply to {what}: {e}"),
                    })?;
                    if n == 0 {
                        return Err(format!("{name}: connection closed during {what}"));
                    }
                    buf.extend_from_slice(&chunk[..n]);
                }
                Parse::Bad(m) => {
                    return Err(format!(
                        "{name}: does not speak {:?} (reply to {what}: {m})",
                        plan.protocol
                    ));
                }
            }
        }
    }
    s.set_nonblocking(true).map_err(|e| e.to_string())?;
    Ok(s)
}

struct Worker<'a> {
    plan: &'a Plan,
    shared: &'a Shared,
    epfd: i32,
    socks: Vec<Sock>,
    clients: Vec<Client>,
    rng: Rng,
    rec: Recorder,
    kb: Vec<u8>,
    tmp: Vec<u8>,
    keys: Vec<u64>,
    phase: Phase,
    depth: usize,
    measure_start: u64,
    end: u64,
    quota: Option<u64>,
    issued: u64,
    inflight_total: usize,
    uring: Option<Uring>,
    /// Closed loop: a client's op failed at once (connection down); it tries again on the
    /// next pass of the loop, without sleeping.
    retry_soon: bool,
}

/// The io_uring backend's state: the ring and the sockets with data to send.
struct Uring {
    ring: io_uring::IoUring,
    /// `RECVSEND_POLL_FIRST` where the kernel knows it, else 0.
    recv_ioprio: u16,
    dirty: Vec<usize>,
    cqes: Vec<(u64, i32)>,
}

const TAG_RECV: u64 = 1;
const TAG_SEND: u64 = 2;
/// `IORING_RECVSEND_POLL_FIRST` from <linux/io_uring.h> (the io-uring crate keeps its `sys` private).
const RECVSEND_POLL_FIRST: u16 = 1;

impl<'a> Worker<'a> {
    fn epoll(&self, op: i32, si: usize, out: bool) {
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | if out { libc::EPOLLOUT } else { 0 }) as u32,
            u64: si as u64,
        };
        // SAFETY: epfd and the fd are open descriptors this worker owns; ev outlives the call.
        unsafe { libc::epoll_ctl(self.epfd, op, self.socks[si].fd, &mut ev) };
    }

    fn attach(&mut self, si: usize, stream: TcpStream) {
        let s = &mut self.socks[si];
        s.fd = stream.as_raw_fd();
        s.stream = Some(stream);
        s.want_out = false;
        s.need = 0;
        s.sending.clear();
        s.spos = 0;
        if self.uring.is_none() {
            self.epoll(libc::EPOLL_CTL_ADD, si, false);
        }
    }

    /// Fails every request in flight on a socket and closes it (it reconnects on next use).
    fn fail_sock(&mut self, si: usize, kind: usize, msg: String, now: u64) {
        let plan = self.plan;
        let s = &mut self.socks[si];
        let n = s.inflight.len();
        let mut first = true;
        while let Some(p) = s.inflight.pop_front() {
            // The request whose reply broke the stream gets the stream's error; the others
            // were lost with the connection.
            let k = if first || kind == E_TIMEOUT {
                kind
            } else {
                E_CONNECTION
            };
            first = false;
            record_error(&mut self.rec, plan, &p, k, now);
        }
        self.rec.sample(|| msg);
        if s.recv_busy || s.send_busy {
            // io_uring operations still reference this socket's buffers: wake them with a
            // shutdown and close the socket only once they have completed.
            // SAFETY: shutting down a socket we own.
            unsafe { libc::shutdown(s.fd, libc::SHUT_RDWR) };
            s.zombie = s.stream.take();
        }
        s.stream = None; // closing the fd also removes it from the epoll set
        s.fd = -1;
        s.wbuf.clear();
        s.wpos = 0;
        s.rbuf.clear();
        s.rpos = 0;
        s.need = 0;
        s.unstamped = 0;
        s.dirty = false;
        s.retry_at = now;
        let c = s.client;
        self.clients[c].inflight -= n;
        self.inflight_total -= n;
    }

    /// Writes what the socket has queued; stamps send times on newly queued requests.
    fn flush(&mut self, si: usize) {
        let now = self.shared.now();
        let s = &mut self.socks[si];
        if s.fd < 0 {
            return;
        }
        if s.unstamped > 0 {
            let len = s.inflight.len();
            for p in s.inflight.range_mut(len - s.unstamped..) {
                p.sent = now;
                if !self.plan.open {
                    p.intended = now;
                }
            }
            s.unstamped = 0;
        }
        if let Some(u) = self.uring.as_mut() {
            if !s.dirty && !s.wbuf.is_empty() {
                s.dirty = true;
                u.dirty.push(si);
            }
            return;
        }
        if s.wpos >= s.wbuf.len() {
            return;
        }
        let n = if s.wbuf.is_contiguous() {
            let rest = &s.wbuf.inline()[s.wpos..];
            // SAFETY: the slice is valid for its length; fd is an open socket we own.
            unsafe { libc::write(s.fd, rest.as_ptr() as *const libc::c_void, rest.len()) }
        } else {
            s.wbuf.iovecs(s.wpos, &self.plan.filler, &mut s.iov);
            // SAFETY: the iovecs point into wbuf and the filler, both alive and unchanged here.
            unsafe { libc::writev(s.fd, s.iov.as_ptr(), s.iov.len() as i32) }
        };
        if n > 0 {
            s.wpos += n as usize;
            if now >= self.measure_start {
                self.rec.wire_out += n as u64;
            }
        } else if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::WouldBlock
                && e.kind() != std::io::ErrorKind::Interrupted
            {
                let name = &self.plan.server_names[s.server];
                self.fail_sock(si, E_CONNECTION, format!("{name}: write failed: {e}"), now);
                return;
            }
        }
        let s = &mut self.socks[si];
        if s.wpos >= s.wbuf.len() {
            s.wbuf.clear();
            s.wpos = 0;
            if s.want_out {
                s.want_out = false;
                self.epoll(libc::EPOLL_CTL_MOD, si, false);
            }
        } else if !s.want_out {
            s.want_out = true;
            self.epoll(libc::EPOLL_CTL_MOD, si, true);
        }
    }

    fn readable(&mut self, si: usize) {
        let plan = self.plan;
        let s = &mut self.socks[si];
        if s.fd < 0 {
            return;
        }
        let spare = s.read_room();
        let len = s.rbuf.len();
        // SAFETY: reading into the vector's spare capacity; set_len only covers bytes read.
        let n = unsafe {
            libc::read(
                s.fd,
                s.rbuf.as_mut_ptr().add(len) as *mut libc::c_void,
                spare,
            )
        };
        let now = self.shared.now();
        if n == 0 {
            let name = &plan.server_names[s.server];
            let msg = if s.rbuf.len() > s.rpos {
                format!("{name}: server closed the connection mid-reply (truncated reply)")
            } else {
                format!("{name}: server closed the connection")
            };
            self.fail_sock(si, E_CONNECTION, msg, now);
            return;
        }
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::WouldBlock
                && e.kind() != std::io::ErrorKind::Interrupted
            {
                let name = &plan.server_names[s.server];
                self.fail_sock(si, E_CONNECTION, format!("{name}: read failed: {e}"), now);
            }
            return;
        }
        // SAFETY: the kernel initialised n bytes after len.
        unsafe { s.rbuf.set_len(len + n as usize) };
        self.input(si, n as usize, now);
    }

    /// Parses and records what arrived on a socket, then lets its client send more.
    fn input(&mut self, si: usize, n: usize, now: u64) {
        let plan = self.plan;
        if now >= self.measure_start {
            self.rec.wire_in += n as u64;
        }
        let s = &mut self.socks[si];
        let mut done = 0;
        let mut bad: Option<String> = None;
        if s.rbuf.len() >= s.need {
            while let Some(p) = s.inflight.front().copied() {
                if s.unstamped >= s.inflight.len() {
                    break; // a reply cannot precede its request's write
                }
                let avail = &s.rbuf[s.rpos..];
                match parse_reply(plan.protocol, avail, p.kind, &plan.limits) {
                    Parse::Done(r) => {
                        let value = r.value.clone().map(|v| &avail[v]);
                        complete(&mut self.rec, plan, &p, &r, value, avail, now);
                        s.rpos += r.consumed;
                        s.inflight.pop_front();
                        done += 1;
                        s.need = 0;
                    }
                    Parse::Need(k) => {
                        s.need = s.rpos + k;
                        break;
                    }
                    Parse::Bad(m) => {
                        bad = Some(m);
                        break;
                    }
                }
            }
            if bad.is_none() && s.inflight.is_empty() && s.rpos < s.rbuf.len() {
                bad = Some(format!(
                    "unsolicited data from the server: {:?}",
                    printable(&s.rbuf[s.rpos..])
                ));
            }
        }
        let c = s.client;
        let server = s.server;
        self.clients[c].inflight -= done;
        self.inflight_total -= done;
        let was_bad = bad.is_some();
        if let Some(m) = bad {
            let name = &plan.server_names[server];
            self.fail_sock(si, E_PROTOCOL, format!("{name}: protocol error: {m}"), now);
        }
        if done > 0 || was_bad {
            self.top_up(c, now);
        }
    }

    /// Whether a client may send now, given the phase, the schedule and the limits.
    #[inline]
    fn may_issue(&self, c: usize, now: u64) -> bool {
        let cl = &self.clients[c];
        cl.inflight < self.depth
            && match self.phase {
                Phase::Prefill => cl.prefill_next < self.prefill_total() && !self.shared.stopping(),
                // Nothing is sent once the phase has ended, however far behind its schedule
                // the open loop is (the rest is `missed`), nor once it is told to stop.
                Phase::Run => {
                    self.quota.is_none_or(|q| self.issued < q)
                        && now < self.end
                        && !self.shared.stopping()
                        && (!self.plan.open || cl.next_intended <= now)
                }
            }
    }

    fn prefill_total(&self) -> u64 {
        self.plan.key_count * if self.plan.uses_counters { 2 } else { 1 }
    }

    /// Issues requests for client `c` while it may, then writes them.
    fn top_up(&mut self, c: usize, now: u64) {
        let mut any = false;
        let mut failed = 0;
        let open = self.plan.open && self.phase == Phase::Run;
        while self.may_issue(c, now) {
            if self.issue(c, now) == Issue::Queued {
                any = true;
                continue;
            }
            // Its connection is down. Open loop: every op already due fails the same way
            // (a few at a time, so that the clock is read again). Closed loop: the client
            // tries again at once, after the other clients had their turn.
            failed += 1;
            if !open || failed >= 1024 {
                self.retry_soon = true;
                break;
            }
        }
        if any {
            for k in 0..self.clients[c].socks.len() {
                let si = self.clients[c].socks[k];
                if self.socks[si].unstamped > 0 {
                    self.flush(si);
                }
            }
        }
    }

    /// Queues one request for client `c`, or counts it failed when its connection is down.
    fn issue(&mut self, c: usize, now: u64) -> Issue {
        let plan = self.plan;
        let (op_idx, kind, intended, size) = match self.phase {
            Phase::Prefill => {
                let cl = &mut self.clients[c];
                let i = cl.prefill_next;
                self.keys.clear();
                let counter = i >= plan.key_count;
                self.keys.push(if counter { i - plan.key_count } else { i });
                let kind = if counter { Kind::Incr } else { Kind::Set };
                (
                    INTERNAL,
                    kind,
                    now,
                    if counter {
                        1
                    } else {
                        plan.sizes.sample(&mut self.rng)
                    },
                )
            }
            Phase::Run => {
                let x = self.rng.next_f64();
                let op_idx = plan
                    .cumulative
                    .partition_point(|&c| c <= x)
                    .min(plan.ops.len() - 1);
                let op = &plan.ops[op_idx];
                let intended = if plan.open {
                    self.clients[c].next_intended
                } else {
                    now
                };
                self.keys.clear();
                let first = self.clients[c].picker.pick(&plan.dist, &mut self.rng);
                self.keys.push(first);
                if let Kind::MGet(n) = op.kind {
                    let server = self.server_of(Kind::Get, first);
                    for _ in 1..n {
                        // All keys of one multi-get live on one server of the pool: draw
                        // until one does; a key that never does is left out (rare: the
                        // multi-get is then that much shorter, and judged as such).
                        for _ in 0..64 {
                            let k = self.clients[c].picker.pick(&plan.dist, &mut self.rng);
                            if plan.servers.len() == 1 || self.server_of(Kind::Get, k) == server {
                                self.keys.push(k);
                                break;
                            }
                        }
                    }
                }
                let kind = if let Kind::MGet(_) = op.kind {
                    Kind::MGet(self.keys.len() as u32)
                } else {
                    op.kind
                };
                let size = if op.writes_value {
                    plan.sizes.sample(&mut self.rng)
                } else {
                    0
                };
                (op_idx as u16, kind, intended, size)
            }
        };
        let server = self.server_of(kind, self.keys[0]);
        let si = self.clients[c].socks[server];
        let timed = self.phase == Phase::Run && intended >= self.measure_start;
        if self.socks[si].fd < 0 {
            if let Err(m) = self.reconnect(si, now) {
                let p = Pending {
                    op: op_idx,
                    kind,
                    timed,
                    intended,
                    sent: now,
                    verify_key: NO_KEY,
                    bytes_out: 0,
                };
                record_error(&mut self.rec, plan, &p, E_CONNECTION, self.shared.now());
                if let Some(m) = m {
                    self.rec.sample(|| m);
                }
                self.after_issue(c, timed);
                return Issue::Failed;
            }
        }
        let verify_key = if matches!(kind, Kind::Get | Kind::Gets)
            && plan.verify_fraction > 0.0
            && self.rng.next_f64() < plan.verify_fraction
        {
            self.keys[0]
        } else {
            NO_KEY
        };
        let s = &mut self.socks[si];
        let bytes = if op_idx == INTERNAL {
            if kind == Kind::Incr {
                // Counters start at "0" so memcached's incr finds them.
                let mut kb = std::mem::take(&mut self.kb);
                key_bytes(&mut kb, &plan.prefix, Kind::Incr, self.keys[0]);
                encode_counter(plan, &mut s.wbuf, &kb);
                self.kb = kb;
                0
            } else {
                let op = &PREFILL_SET;
                encode(
                    plan,
                    &plan.prefix,
                    op,
                    &mut s.wbuf,
                    &self.keys,
                    size,
                    &mut self.kb,
                    &mut self.tmp,
                )
            }
        } else {
            encode(
                plan,
                &plan.prefix,
                &plan.ops[op_idx as usize],
                &mut s.wbuf,
                &self.keys,
                size,
                &mut self.kb,
                &mut self.tmp,
            )
        };
        let kind = if op_idx == INTERNAL { Kind::Set } else { kind };
        s.inflight.push_back(Pending {
            op: op_idx,
            kind,
            timed,
            intended,
            sent: now,
            verify_key,
            bytes_out: bytes as u32,
        });
        s.unstamped += 1;
        self.clients[c].inflight += 1;
        self.inflight_total += 1;
        self.after_issue(c, timed);
        Issue::Queued
    }

    /// Reconnects a broken socket; `Err(Some(why))` when that failed, `Err(None)` when an
    /// open-loop socket is still backing off from its last failure.
    fn reconnect(&mut self, si: usize, now: u64) -> Result<(), Option<String>> {
        let back_off = self.plan.open && self.phase == Phase::Run;
        if back_off && now < self.socks[si].retry_at {
            return Err(None);
        }
        // A connect may block (up to 1 s against a hung server): let the on-error watch see
        // the failures so far first, so that it can stop the run meanwhile.
        self.shared.publish(&mut self.rec);
        let wait = Duration::from_nanos(self.plan.timeout_ns.min(1_000_000_000));
        match connect(self.plan, self.socks[si].server, wait) {
            Ok(stream) => {
                self.attach(si, stream);
                Ok(())
            }
            Err(m) => {
                self.socks[si].retry_at = self.shared.now() + RETRY_NS;
                Err(Some(m))
            }
        }
    }

    fn after_issue(&mut self, c: usize, timed: bool) {
        match self.phase {
            Phase::Prefill => {
                let cl = &mut self.clients[c];
                cl.prefill_next += self.plan.connections as u64;
            }
            Phase::Run => {
                if timed {
                    self.issued += 1;
                }
                if self.plan.open {
                    let cl = &mut self.clients[c];
                    cl.next_intended += cl.arrivals.gap();
                }
            }
        }
    }

    #[inline]
    fn server_of(&mut self, kind: Kind, key: u64) -> usize {
        if self.plan.servers.len() == 1 {
            return 0;
        }
        key_bytes(&mut self.kb, &self.plan.prefix, kind, key);
        route(&self.kb, self.plan.servers.len())
    }

    fn check_timeouts(&mut self, now: u64) {
        for si in 0..self.socks.len() {
            let s = &self.socks[si];
            if let Some(p) = s.inflight.front() {
                if s.unstamped < s.inflight.len()
                    && now.saturating_sub(p.sent) > self.plan.timeout_ns
                {
                    let name = &self.plan.server_names[s.server];
                    let msg = format!(
                        "{name}: no reply within {} ms",
                        self.plan.timeout_ns / 1_000_000
                    );
                    let c = s.client;
                    self.fail_sock(si, E_TIMEOUT, msg, now);
                    self.top_up(c, self.shared.now()); // a reconnect before may have blocked
                }
            }
        }
    }

    /// Runs the event loop until the phase has nothing left to do.
    fn event_loop(&mut self) {
        let mut events: Vec<libc::epoll_event> = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
        let mut next_tick = 0u64;
        let mut pwait2 = true;
        loop {
            let now = self.shared.now();
            let tick = now >= next_tick;
            if tick {
                next_tick = now + TICK_NS;
                if self.shared.stopping() && self.phase == Phase::Run {
                    self.end = self.end.min(now);
                }
                self.shared.publish(&mut self.rec);
                self.check_timeouts(now);
            }
            if tick || std::mem::take(&mut self.retry_soon) {
                for c in 0..self.clients.len() {
                    // The clock is read again for each client: a reconnect may have blocked.
                    self.top_up(c, self.shared.now());
                }
            } else if self.plan.open && self.phase == Phase::Run {
                for c in 0..self.clients.len() {
                    if self.clients[c].next_intended <= now {
                        self.top_up(c, now);
                    }
                }
            }
            let now = self.shared.now();
            let issuing = (0..self.clients.len()).any(|c| self.could_issue_later(c, now));
            if !issuing && self.inflight_total == 0 {
                break;
            }
            if !issuing
                && now
                    > self
                        .end
                        .saturating_add(self.plan.timeout_ns + 1_000_000_000)
            {
                for si in 0..self.socks.len() {
                    if !self.socks[si].inflight.is_empty() {
                        self.fail_sock(
                            si,
                            E_TIMEOUT,
                            "no reply before the end of the drain".into(),
                            now,
                        );
                    }
                }
                break;
            }
            // Sleep until the next tick, or the next intended send in open loop; not at all
            // when a closed-loop client is to retry a failed op.
            let mut wake = if self.retry_soon { now } else { next_tick };
            if self.plan.open && self.phase == Phase::Run && now < self.end {
                for cl in &self.clients {
                    if cl.inflight < self.depth && cl.next_intended < self.end {
                        wake = wake.min(cl.next_intended);
                    }
                }
            }
            let wait = wake.saturating_sub(self.shared.now());
            if self.uring.is_some() {
                self.uring_round(wait);
                continue;
            }
            let n = self.wait(&mut events, wait, &mut pwait2);
            for ev in &events[..n] {
                let si = ev.u64 as usize;
                let flags = ev.events;
                if flags & libc::EPOLLOUT as u32 != 0 {
                    self.flush(si);
                }
                if flags & (libc::EPOLLIN | libc::EPOLLERR | libc::EPOLLHUP) as u32 != 0 {
                    self.readable(si);
                }
            }
        }
        self.rec.last_done = self.shared.now();
        self.shared.publish(&mut self.rec);
        if self.phase == Phase::Run && self.plan.open {
            self.count_missed();
        }
    }

    /// Open loop: the ops of each client's schedule that fell due in the timed phase but
    /// were never sent, because the load could not keep up or the phase was stopped early.
    /// Reaching the op budget (`ops`) misses nothing.
    fn count_missed(&mut self) {
        if self.quota.is_some_and(|q| self.issued >= q) {
            return;
        }
        // A phase stopped early ends when its loop did, not at its deadline.
        let end = self.end.min(self.rec.last_done);
        for cl in &mut self.clients {
            let from = cl.next_intended.max(self.measure_start);
            self.rec.missed += cl.arrivals.due_in(from, end);
        }
    }

    /// One io_uring round: (re)arm a RECV on every live socket and a SEND on every socket
    /// with queued requests, submit them and wait for completions in one `io_uring_enter`,
    /// then handle every completion.
    fn uring_round(&mut self, wait_ns: u64) {
        let mut u = self.uring.take().expect("uring backend");
        for si in 0..self.socks.len() {
            let s = &mut self.socks[si];
            if s.fd < 0 || s.recv_busy {
                continue;
            }
            let spare = s.read_room() as u32;
            let len = s.rbuf.len();
            // SAFETY: the spare capacity stays allocated and untouched until this RECV
            // completes (rbuf is only compacted or grown while no RECV is in flight).
            let sqe = io_uring::opcode::Recv::new(
                io_uring::types::Fd(s.fd),
                unsafe { s.rbuf.as_mut_ptr().add(len) },
                spare,
            )
            // IORING_RECVSEND_POLL_FIRST (Linux 5.19+; not set on older kernels): the RECV is
            // armed right after its replies were consumed and before its next requests are
            // sent, so an immediate attempt would find nothing and only cost a socket lock.
            // Arm the poll first; the kernel receives when data arrives. Measured: ~5 % less
            // client CPU per op at pipeline 1 (and no difference in the middle of a reply).
            .ioprio(u.recv_ioprio)
            .build()
            .user_data(((si as u64) << 8) | TAG_RECV);
            push(&mut u.ring, &sqe);
            s.recv_busy = true;
        }
        for k in 0..u.dirty.len() {
            let si = u.dirty[k];
            let s = &mut self.socks[si];
            s.dirty = false;
            if s.fd < 0 || s.send_busy {
                continue;
            }
            if s.spos >= s.sending.len() {
                if s.wbuf.is_empty() {
                    continue;
                }
                s.sending.clear();
                std::mem::swap(&mut s.sending, &mut s.wbuf);
                s.spos = 0;
            }
            // SAFETY (both): `sending`, `iov` and `msg` are neither written nor reallocated
            // until this SEND completes; the filler lives as long as the plan.
            let sqe = if s.sending.is_contiguous() {
                let rest = &s.sending.inline()[s.spos..];
                io_uring::opcode::Send::new(
                    io_uring::types::Fd(s.fd),
                    rest.as_ptr(),
                    rest.len().min(u32::MAX as usize) as u32,
                )
                .build()
            } else {
                s.sending.iovecs(s.spos, &self.plan.filler, &mut s.iov);
                s.msg.msg_iov = s.iov.as_mut_ptr();
                s.msg.msg_iovlen = s.iov.len();
                io_uring::opcode::SendMsg::new(io_uring::types::Fd(s.fd), &*s.msg).build()
            }
            .user_data(((si as u64) << 8) | TAG_SEND);
            push(&mut u.ring, &sqe);
            s.send_busy = true;
        }
        u.dirty.clear();
        let ts = io_uring::types::Timespec::new()
            .sec(wait_ns / 1_000_000_000)
            .nsec((wait_ns % 1_000_000_000) as u32);
        // Waiting for more than one completion per enter (min_complete = a share of the armed
        // RECVs, with or without IORING_ENTER min_wait) was measured at pipeline 16 and 1: no
        // CPU saving and lower throughput, so one completion is enough to wake.
        let args = io_uring::types::SubmitArgs::new().timespec(&ts);
        // ETIME: the wait ended; EINTR: a signal came (the loop then simply goes round again,
        // and entries not yet submitted stay in the ring); EBUSY: completions to reap first.
        if let Err(e) = u.ring.submitter().submit_with_args(1, &args) {
            if e.raw_os_error() != Some(libc::ETIME)
                && e.raw_os_error() != Some(libc::EINTR)
                && e.raw_os_error() != Some(libc::EBUSY)
            {
                self.rec.sample(|| format!("io_uring_enter failed: {e}"));
            }
        }
        u.cqes.clear();
        for cqe in u.ring.completion() {
            u.cqes.push((cqe.user_data(), cqe.result()));
        }
        let cqes = std::mem::take(&mut u.cqes);
        self.uring = Some(u);
        let now = self.shared.now();
        for &(data, res) in &cqes {
            let si = (data >> 8) as usize;
            let tag = data & 0xFF;
            let s = &mut self.socks[si];
            if tag == TAG_RECV {
                s.recv_busy = false;
            } else {
                s.send_busy = false;
            }
            if s.zombie.is_some() || s.fd < 0 {
                if !s.recv_busy && !s.send_busy {
                    s.zombie = None;
                    s.sending.clear();
                    s.spos = 0;
                }
                continue;
            }
            let name = &self.plan.server_names[s.server];
            if tag == TAG_RECV {
                if res > 0 {
                    let len = s.rbuf.len();
                    // SAFETY: the kernel wrote `res` bytes into the spare capacity.
                    unsafe { s.rbuf.set_len(len + res as usize) };
                    self.input(si, res as usize, now);
                } else if res == 0 {
                    let msg = if s.rbuf.len() > s.rpos {
                        format!("{name}: server closed the connection mid-reply (truncated reply)")
                    } else {
                        format!("{name}: server closed the connection")
                    };
                    self.fail_sock(si, E_CONNECTION, msg, now);
                } else if res != -libc::EAGAIN && res != -libc::EINTR {
                    let msg = format!(
                        "{name}: read failed: {}",
                        std::io::Error::from_raw_os_error(-res)
                    );
                    self.fail_sock(si, E_CONNECTION, msg, now);
                }
            } else if res < 0 {
                let msg = format!(
                    "{name}: write failed: {}",
                    std::io::Error::from_raw_os_error(-res)
                );
                self.fail_sock(si, E_CONNECTION, msg, now);
            } else {
                s.spos += res as usize;
                if now >= self.measure_start {
                    self.rec.wire_out += res as u64;
                }
                if s.spos < s.sending.len() || !s.wbuf.is_empty() {
                    s.dirty = true;
                    self.uring.as_mut().expect("uring").dirty.push(si);
                }
            }
        }
        self.uring.as_mut().expect("uring").cqes = cqes;
    }

    /// Before the ring and the buffers go away: stop every operation in flight.
    fn uring_teardown(&mut self) {
        if self.uring.is_none() {
            return;
        }
        for s in &mut self.socks {
            if s.fd >= 0 {
                // SAFETY: shutting down a socket we own wakes its pending RECV.
                unsafe { libc::shutdown(s.fd, libc::SHUT_RDWR) };
                s.zombie = s.stream.take();
                s.fd = -1;
            }
        }
        let deadline = self.shared.now() + 2_000_000_000;
        while self.socks.iter().any(|s| s.recv_busy || s.send_busy) && self.shared.now() < deadline
        {
            self.uring_round(10_000_000);
        }
        if self.socks.iter().any(|s| s.recv_busy || s.send_busy) {
            // Leak rather than free buffers the kernel may still write into.
            for s in &mut self.socks {
                if s.recv_busy || s.send_busy {
                    std::mem::forget(std::mem::take(&mut s.rbuf));
                    std::mem::forget(std::mem::take(&mut s.sending));
                }
            }
        }
    }

    /// Whether client `c` has more to send in this phase (at `now` or later).
    fn could_issue_later(&self, c: usize, now: u64) -> bool {
        let cl = &self.clients[c];
        !self.shared.stopping()
            && match self.phase {
                Phase::Prefill => cl.prefill_next < self.prefill_total(),
                Phase::Run => {
                    self.quota.is_none_or(|q| self.issued < q)
                        && now < self.end
                        && (!self.plan.open || cl.next_intended < self.end)
                }
            }
    }

    /// Waits for socket events; an EINTR (a signal, e.g. Ctrl-C for Python) counts as none:
    /// the loop looks at its clock and its sockets, then waits again.
    fn wait(&self, events: &mut [libc::epoll_event], wait_ns: u64, pwait2: &mut bool) -> usize {
        let n = if *pwait2 {
            let ts = libc::timespec {
                tv_sec: (wait_ns / 1_000_000_000) as i64,
                tv_nsec: (wait_ns % 1_000_000_000) as i64,
            };
            // SAFETY: epoll_pwait2(epfd, events, maxevents, timeout, sigmask=NULL, sigsetsize=0).
            let r = unsafe {
                libc::syscall(
                    libc::SYS_epoll_pwait2,
                    self.epfd,
                    events.as_mut_ptr(),
                    events.len() as i32,
                    &ts as *const libc::timespec,
                    std::ptr::null::<libc::c_void>(),
                    0usize,
                )
            };
            if r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
                // Kernels before 5.11: fall back to millisecond timeouts.
                *pwait2 = false;
                0
            } else {
                r as i64
            }
        } else {
            let ms = wait_ns.div_ceil(1_000_000) as i32;
            // SAFETY: events is a valid buffer of its length.
            unsafe {
                libc::epoll_wait(self.epfd, events.as_mut_ptr(), events.len() as i32, ms) as i64
            }
        };
        n.max(0) as usize
    }
}

/// Creates this thread's ring. Preferred setup: SINGLE_ISSUER + DEFER_TASKRUN (Linux 6.1+).
/// Without it, every socket wake-up that completes a pending RECV queues task work on this
/// thread with a signal-style notification — a reschedule IPI that interrupts whatever the
/// loop is doing (about a fifth of the thread's CPU at pipeline 16). Deferred task work is
/// instead run in a batch inside the next `io_uring_enter` that waits for completions, which
/// is exactly where this loop collects them. The ring is only ever used by the thread that
/// creates it (the worker), as SINGLE_ISSUER requires. Older kernels reject the flags: fall
/// back to COOP_TASKRUN (5.19+, no IPI but still run on any kernel exit), then to none.
/// Also says whether the kernel is recent enough (5.19+) for `RECVSEND_POLL_FIRST`.
fn new_ring(entries: u32) -> Option<(io_uring::IoUring, bool)> {
    let mut b = io_uring::IoUring::builder();
    b.setup_single_issuer().setup_defer_taskrun();
    if let Ok(r) = b.build(entries) {
        return Some((r, true));
    }
    let mut b = io_uring::IoUring::builder();
    b.setup_coop_taskrun();
    if let Ok(r) = b.build(entries) {
        return Some((r, true));
    }
    io_uring::IoUring::new(entries).ok().map(|r| (r, false))
}

fn push(ring: &mut io_uring::IoUring, sqe: &io_uring::squeue::Entry) {
    loop {
        // SAFETY: the buffers an entry references are kept alive until its completion.
        if unsafe { ring.submission().push(sqe) }.is_ok() {
            return;
        }
        let _ = ring.submit();
    }
}

static PREFILL_SET: OpPlan = OpPlan {
    name: String::new(),
    kind: Kind::Set,
    template: Vec::new(),
    writes_value: true,
};

fn encode_counter(plan: &Plan, out: &mut Vec<u8>, key: &[u8]) {
    match plan.protocol {
        Protocol::Resp2 | Protocol::Resp3 => {
            out.extend_from_slice(b"*3\r\n$3\r\nSET\r\n");
            resp::bulk(out, key);
            resp::bulk(out, b"0");
        }
        Protocol::MemcacheText => line(out, b"set ", key, b" 0 0 1\r\n0"),
        Protocol::MemcacheMeta => line(out, b"ms ", key, b" 1\r\n0"),
    }
}

fn record_error(rec: &mut Recorder, plan: &Plan, p: &Pending, kind: usize, now: u64) {
    rec.tally_failed[kind] += 1;
    if !p.timed || p.op == INTERNAL {
        if p.op == INTERNAL {
            rec.prefill_errors += 1;
        }
        return;
    }
    let st = &mut rec.ops[p.op as usize];
    st.errors[kind] += 1;
    st.bytes_out += p.bytes_out as u64;
    let sent = if p.sent == 0 { now } else { p.sent };
    let unc = plan.open.then(|| now.saturating_sub(sent));
    st.record(O_ERROR, now.saturating_sub(p.intended), unc);
}

/// Records one completed request.
fn complete(
    rec: &mut Recorder,
    plan: &Plan,
    p: &Pending,
    r: &proto::Reply,
    value: Option<&[u8]>,
    avail: &[u8],
    now: u64,
) {
    if p.op == INTERNAL || !p.timed {
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
        return;
    }
    let mut outcome = match r.outcome {
        Outcome::Hit => O_HIT,
        Outcome::Miss => O_MISS,
        Outcome::Ok => O_OK,
        Outcome::ServerError | Outcome::ProtocolError => O_ERROR,
    };
    let mut err = match r.outcome {
        Outcome::ServerError => E_SERVER,
        _ => E_PROTOCOL,
    };
    if outcome == O_HIT && p.verify_key != NO_KEY {
        if let Some(v) = value {
            let mut key = Vec::with_capacity(plan.prefix.len() + 20);
            write_key(&mut key, &plan.prefix, p.verify_key);
            if !(plan.sizes.allows(v.len()) && verify_value(&key, v, &plan.filler)) {
                outcome = O_ERROR;
                err = E_VERIFY;
                rec.sample(|| {
                    format!(
                        "verify: value of {} for key {} is not what was written",
                        v.len(),
                        String::from_utf8_lossy(&key)
                    )
                });
            }
        }
    }
    if outcome == O_ERROR && err != E_VERIFY {
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
    }
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

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 * 1e-6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

/// Writes, reads back and deletes a few canary keys (`prefix + "verify:" + n`,
/// untimed) and counts the ones the server silently dropped (`dropped_write`).
fn canaries(plan: &Plan, n: usize, rng: &mut Rng) -> (u64, Vec<String>) {
    let mut dropped = 0;
    let mut msgs = Vec::new();
    let timeout = Duration::from_nanos(plan.timeout_ns);
    let mut conns: Vec<Option<TcpStream>> = (0..plan.servers.len()).map(|_| None).collect();
    let mut prefix = plan.prefix.clone();
    prefix.extend_from_slice(b"verify:");
    let (mut kb, mut tmp, mut req) = (Vec::new(), Vec::new(), OutBuf::default());
    let op = |kind| OpPlan {
        name: String::new(),
        kind,
        template: vec![],
        writes_value: kind == Kind::Set,
    };
    let (set_op, get_op, del_op) = (op(Kind::Set), op(Kind::Get), op(Kind::Delete));
    for i in 0..n as u64 {
        key_bytes(&mut kb, &prefix, Kind::Get, i);
        let key = kb.clone();
        let server = route(&key, plan.servers.len());
        if conns[server].is_none() {
            match connect(plan, server, timeout) {
                Ok(s) => {
                    let _ = s.set_nonblocking(false);
                    conns[server] = Some(s);
                }
                Err(m) => {
                    msgs.push(m);
                    return (dropped, msgs);
                }
            }
        }
        let s = conns[server].as_mut().expect("connected above");
        let size = plan.sizes.sample(rng);
        let mut call =
            |req: &mut OutBuf, kind: Kind| -> Result<(Outcome, Option<Vec<u8>>), String> {
                s.write_all(&req.to_bytes(&plan.filler))
                    .map_err(|e| e.to_string())?;
                req.clear();
                let mut buf = Vec::new();
                loop {
                    match parse_reply(plan.protocol, &buf, kind, &plan.limits) {
                        Parse::Done(r) => return Ok((r.outcome, r.value.map(|v| buf[v].to_vec()))),
                        Parse::Bad(m) => return Err(m),
                        Parse::Need(_) => {
                            let mut chunk = vec![0u8; 64 * 1024];
                            let k = read_some(s, &mut chunk).map_err(|e| e.to_string())?;
                            if k == 0 {
                                return Err("connection closed".into());
                            }
                            buf.extend_from_slice(&chunk[..k]);
                        }
                    }
                }
            };
        encode(
            plan,
            &prefix,
            &set_op,
            &mut req,
            &[i],
            size,
            &mut kb,
            &mut tmp,
        );
        let intact = match call(&mut req, Kind::Set) {
            Ok((Outcome::Ok, _)) => {
                encode(plan, &prefix, &get_op, &mut req, &[i], 0, &mut kb, &mut tmp);
                match call(&mut req, Kind::Get) {
                    Ok((Outcome::Hit, Some(v))) => {
                        v.len() == size && verify_value(&key, &v, &plan.filler)
                    }
                    Ok(_) => false,
                    Err(m) => {
                        msgs.push(format!("canary: {m}"));
                        false
                    }
                }
            }
            Ok(_) => false,
            Err(m) => {
                msgs.push(format!("canary: {m}"));
                false
            }
        };
        if !intact {
            dropped += 1;
            msgs.push(format!(
                "dropped_write: canary {} was not read back intact",
                String::from_utf8_lossy(&key)
            ));
        }
        req.clear();
        encode(plan, &prefix, &del_op, &mut req, &[i], 0, &mut kb, &mut tmp);
        let _ = call(&mut req, Kind::Delete);
    }
    (dropped, msgs)
}

/// The orchestrating thread's two reasons to stop the load threads early: `poll` (Ctrl-C)
/// and the on-error policy.
struct Control<'a> {
    shared: &'a Shared,
    poll: &'a mut dyn FnMut() -> bool,
    watch: ErrorWatch,
    interrupted: bool,
    stopped_on_errors: Option<String>,
}

impl Control<'_> {
    /// Looks at both and tells every load thread to stop when one says so; true once
    /// stopping. `during` names the part of the run, for the on-error reason.
    fn check(&mut self, during: &str) -> bool {
        if !self.interrupted && (self.poll)() {
            self.interrupted = true;
            self.shared.stop.store(true, Ordering::Relaxed);
        }
        if !self.shared.stopping() {
            let (ok, failed) = self.shared.totals();
            if self.watch.should_stop(self.shared.now(), ok, failed) {
                let last = self
                    .shared
                    .last_error
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                self.stopped_on_errors = Some(self.watch.reason(during, last.as_deref()));
                self.shared.stop.store(true, Ordering::Relaxed);
            }
        }
        self.shared.stopping()
    }
}

/// Runs a whole load test. `poll` is called about every 10 ms from the calling
/// thread and returns true to stop (e.g. on Ctrl-C); the result then says `interrupted`.
/// With `on_error: "stop"` the run also stops once every op of the last `error_grace_s`
/// failed; the result then says why in `stopped_on_errors`.
pub fn run(plan: &Plan, poll: &mut dyn FnMut() -> bool) -> Result<Value, RunError> {
    let shared = Shared::new();
    let timeout = Duration::from_nanos(plan.timeout_ns);
    if plan.io == IoBackend::Uring {
        if let Err(e) = io_uring::IoUring::new(8) {
            return Err(RunError::Spec(format!(
                "io \"uring\" was asked for but io_uring is not available here: {e}"
            )));
        }
    }
    // Connect everything up front so an unreachable server or bad password fails fast.
    let mut streams: Vec<Vec<TcpStream>> = Vec::new();
    for _ in 0..plan.connections {
        let mut per = Vec::new();
        for server in 0..plan.servers.len() {
            per.push(connect(plan, server, timeout).map_err(RunError::Unavailable)?);
        }
        streams.push(per);
    }
    let t = plan.threads;
    let mut groups: Vec<Vec<(usize, Vec<TcpStream>)>> = (0..t).map(|_| Vec::new()).collect();
    for (g, per) in streams.into_iter().enumerate() {
        groups[g % t].push((g, per));
    }
    let mut control = Control {
        shared: &shared,
        poll,
        watch: ErrorWatch::new(plan.error_grace_ns),
        interrupted: false,
        stopped_on_errors: None,
    };
    let mut cpu0 = 0.0;
    let mut measure_start = 0u64;
    let recs: Vec<Recorder> = std::thread::scope(|scope| {
        let handles: Vec<_> = groups
            .into_iter()
            .enumerate()
            .map(|(ti, group)| {
                let shared = &shared;
                let share = group.len() as u64;
                std::thread::Builder::new()
                    .name(format!("cachemark-load-{ti}"))
                    .spawn_scoped(scope, move || worker(plan, shared, ti, group, share))
                    .expect("spawn load thread")
            })
            .collect();
        // Wait for prefill everywhere, then start all threads on one clock.
        while shared.ready.load(Ordering::Acquire) < t {
            control.check(" during prefill");
            std::thread::sleep(Duration::from_millis(5));
        }
        let start = shared.now() + 1_000_000;
        measure_start = start + plan.warmup_ns;
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
        cpu0 = cpu_seconds();
        while !handles.iter().all(|h| h.is_finished()) {
            control.check("");
            std::thread::sleep(Duration::from_millis(10));
        }
        handles
            .into_iter()
            .map(|h| h.join().expect("load thread panicked"))
            .collect()
    });
    let cpu = cpu_seconds() - cpu0;
    let mut total = Recorder {
        ops: (0..plan.ops.len()).map(|_| OpStats::default()).collect(),
        ..Default::default()
    };
    for r in &recs {
        for (a, b) in total.ops.iter_mut().zip(&r.ops) {
            a.merge(b);
        }
        total.wire_in += r.wire_in;
        total.wire_out += r.wire_out;
        total.prefill_errors += r.prefill_errors;
        total.missed += r.missed;
        total.last_done = total.last_done.max(r.last_done);
        for s in &r.samples {
            if total.samples.len() < 2 * MAX_SAMPLES && !total.samples.contains(s) {
                total.samples.push(s.clone());
            }
        }
    }
    let wall = total.last_done.saturating_sub(measure_start) as f64 / 1e9;
    // Dropped-write canaries: a sample proportional to the writes, at most 100.
    if let Some(si) = plan.ops.iter().position(|o| o.kind == Kind::Set) {
        let sets = total.ops[si].count;
        let n = ((sets as f64 * plan.verify_fraction).ceil() as usize).min(100);
        // Not after a stop: a dead server would only make every canary wait for its timeout.
        if n > 0 && !control.interrupted && control.stopped_on_errors.is_none() {
            let mut rng = Rng::new(plan.seed ^ 0xC0FFEE);
            let (dropped, msgs) = canaries(plan, n, &mut rng);
            total.ops[si].errors[E_DROPPED] += dropped;
            total.ops[si].count += dropped;
            for m in msgs.into_iter().take(3) {
                total.samples.push(m);
            }
        }
    }
    let mut ops = Map::new();
    for (op, st) in plan.ops.iter().zip(&total.ops) {
        let read = matches!(
            op.kind,
            Kind::Get | Kind::Gets | Kind::Exists | Kind::MGet(_)
        );
        ops.insert(op.name.clone(), st.to_json(plan.open, read));
    }
    Ok(json!({
        "wall_s": wall,
        "client_cpu_s": cpu,
        "ops": ops,
        "wire_bytes_out": total.wire_out,
        "wire_bytes_in": total.wire_in,
        "connections": plan.connections * plan.servers.len(),
        "threads": plan.threads,
        "pipeline": plan.pipeline,
        "mode": if plan.open { "open" } else { "closed" },
        "rate": if plan.open { Value::from(plan.rate) } else { Value::Null },
        "interrupted": control.interrupted,
        "stopped_on_errors": control.stopped_on_errors,
        "missed": total.missed,
        "prefill_errors": total.prefill_errors,
        "errors_sample": total.samples,
    }))
}

/// Open loop: each client's arrivals and first intended send. Fixed gaps interleave the
/// clients evenly (client g starts g/rate after the run); Poisson clients each start
/// with an exponential gap.
fn start_schedules(w: &mut Worker, plan: &Plan, ti: usize, start: u64) {
    let spacing = 1e9 / plan.rate; // between any two sends of the whole run
    let mean = spacing * plan.connections as f64;
    for (k, cl) in w.clients.iter_mut().enumerate() {
        let g = k * plan.threads + ti;
        cl.arrivals = match plan.arrival {
            Arrival::Fixed => Arrivals::fixed(mean),
            Arrival::Poisson => Arrivals::poisson(mean, plan.seed, g as u64),
        };
        cl.next_intended = start
            + match plan.arrival {
                Arrival::Fixed => (spacing * g as f64) as u64,
                Arrival::Poisson => cl.arrivals.gap(),
            };
    }
}

fn worker(
    plan: &Plan,
    shared: &Shared,
    ti: usize,
    group: Vec<(usize, Vec<TcpStream>)>,
    share: u64,
) -> Recorder {
    // SAFETY: plain syscall; the fd is closed when the worker ends.
    let epfd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    assert!(epfd >= 0, "epoll_create1 failed");
    let mut w = Worker {
        plan,
        shared,
        epfd,
        socks: Vec::new(),
        clients: Vec::new(),
        rng: Rng::new(plan.seed.wrapping_mul(1_000_003).wrapping_add(ti as u64)),
        rec: Recorder {
            ops: (0..plan.ops.len()).map(|_| OpStats::default()).collect(),
            ..Default::default()
        },
        kb: Vec::with_capacity(256),
        tmp: Vec::new(),
        keys: Vec::new(),
        phase: Phase::Prefill,
        depth: plan.pipeline.max(16),
        measure_start: u64::MAX,
        end: u64::MAX,
        quota: plan
            .ops_limit
            .map(|q| (q * share).div_ceil(plan.connections as u64)),
        issued: 0,
        inflight_total: 0,
        uring: None,
        retry_soon: false,
    };
    if plan.io != IoBackend::Epoll {
        let entries = (2 * plan.servers.len() * (plan.connections / plan.threads + 1) + 16)
            .next_power_of_two()
            .max(64);
        // `run` probed io_uring already; a later failure here (e.g. memory limits) falls
        // back to epoll rather than failing the run.
        if let Some((ring, modern)) = new_ring(entries as u32) {
            w.uring = Some(Uring {
                ring,
                recv_ioprio: if modern { RECVSEND_POLL_FIRST } else { 0 },
                dirty: Vec::new(),
                cqes: Vec::new(),
            });
        }
    }
    let mut pending_attach = Vec::new();
    for (g, per) in group {
        let c = w.clients.len();
        let mut socks = Vec::new();
        for (server, stream) in per.into_iter().enumerate() {
            let si = w.socks.len();
            w.socks.push(Sock {
                stream: None,
                fd: -1,
                server,
                client: c,
                wbuf: OutBuf::with_capacity(16 * 1024),
                wpos: 0,
                rbuf: Vec::with_capacity(64 * 1024),
                rpos: 0,
                need: 0,
                inflight: VecDeque::with_capacity(plan.pipeline.max(16)),
                unstamped: 0,
                want_out: false,
                retry_at: 0,
                sending: OutBuf::with_capacity(16 * 1024),
                spos: 0,
                iov: Vec::new(),
                // SAFETY: an all-zero msghdr is a valid empty one.
                msg: Box::new(unsafe { std::mem::zeroed() }),
                send_busy: false,
                recv_busy: false,
                dirty: false,
                zombie: None,
            });
            pending_attach.push((si, stream));
            socks.push(si);
        }
        w.clients.push(Client {
            socks,
            inflight: 0,
            next_intended: 0,
            arrivals: Arrivals::fixed(1.0),
            picker: KeyPicker::new(
                plan.key_count,
                g as u64 * plan.key_count / plan.connections as u64,
            ),
            prefill_next: g as u64,
        });
    }
    for (si, stream) in pending_attach {
        w.attach(si, stream);
    }
    if plan.prefill {
        w.event_loop();
    }
    shared.ready.fetch_add(1, Ordering::AcqRel);
    let start = loop {
        let s = shared.run_start.load(Ordering::Acquire);
        if s != 0 {
            break s;
        }
        std::thread::sleep(Duration::from_micros(200));
    };
    w.phase = Phase::Run;
    w.depth = plan.pipeline;
    w.measure_start = start + plan.warmup_ns;
    w.end = w.measure_start + plan.duration_ns;
    if shared.stop.load(Ordering::Relaxed) {
        w.end = start;
    }
    if plan.open {
        start_schedules(&mut w, plan, ti, start);
    }
    w.event_loop();
    w.uring_teardown();
    // SAFETY: closing our own epoll descriptor.
    unsafe { libc::close(epfd) };
    w.rec
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::net::TcpListener;

    extern "C" fn ignore(_: libc::c_int) {}

    /// A SIGUSR1 handler installed without SA_RESTART, as Python installs its own.
    fn interruptible_sigusr1() {
        // SAFETY: a handler that does nothing; the struct is fully initialised.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = ignore as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut());
        }
    }

    #[test]
    fn connect_retries_reads_a_signal_interrupts() {
        interruptible_sigusr1();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        // A server that takes 400 ms to answer the handshake's PING.
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 256];
            let _ = s.read(&mut buf);
            std::thread::sleep(Duration::from_millis(400));
            s.write_all(b"+PONG\r\n").unwrap();
            s
        });
        let json = format!(r#"{{"protocol":"resp2","servers":["127.0.0.1:{port}"]}}"#);
        let plan = Config::from_json(&json).unwrap().plan().unwrap();
        // SAFETY: pthread_self has no preconditions.
        let me = unsafe { libc::pthread_self() };
        let pester = std::thread::spawn(move || {
            for _ in 0..5 {
                std::thread::sleep(Duration::from_millis(50));
                // SAFETY: this thread is joined below, before the target thread returns.
                unsafe { libc::pthread_kill(me, libc::SIGUSR1) };
            }
        });
        let result = connect(&plan, 0, Duration::from_secs(5));
        pester.join().unwrap();
        let _conn = server.join().unwrap();
        assert!(result.is_ok(), "{:?}", result.err());
    }
}
