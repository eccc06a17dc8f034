//! Capture: the proxy's optional tap and the recorder that turns tapped bytes into trace records.
//!
//! The pumps must never wait for the recorder, so the tap is a byte-capped buffer behind an
//! uncontended mutex: a pump appends a copy of each segment it read (one `memcpy`; no
//! allocation, wake-up or system call) and, if the list is full, drops it and stops tapping that connection (its parse
//! would be out of step), counting what it dropped. Parsing happens when the owner drains
//! ([`Capture::drain`], every ~100 ms from Python, with the GIL released): each connection's
//! request stream is parsed (RESP2/3 arrays and inline commands; memcached text and meta),
//! its reply stream is matched to the requests in order to learn a read's value size
//! (0 on a miss), and resolved records are handed out in time order. Values are never kept:
//! only their sizes.
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use crate::timer::now_ns;

/// Tapped bytes held between drains, by default, before segments are dropped.
pub const DEFAULT_TAP_BYTES: usize = 64 * 1024 * 1024;
/// A request or reply larger than this is not buffered: the connection stops being parsed.
const MAX_MESSAGE: usize = 512 * 1024 * 1024;

/// cachemark's op codes (`workload/traces/record.py` OPS).
pub const OP_GET: u8 = 0;
pub const OP_SET: u8 = 1;
pub const OP_DELETE: u8 = 2;
pub const OP_EXISTS: u8 = 3;
pub const OP_INCR: u8 = 6;

/// The op names of the trace format, by op code.
pub const OP_NAMES: [&str; 7] = [
    "get", "set", "delete", "exists", "get_many", "set_many", "incr",
];

pub use cachemark_trace::key_hash;

/// One `t_us,op,key_hash,key_size,value_size,ttl_s,client[,key]` line, as `TraceWriter` writes it.
fn trace_line(out: &mut Vec<u8>, r: &Rec, raw_key: bool) {
    use std::io::Write;
    let _ = write!(
        out,
        "{},{},{},{},{},{},{}",
        r.t_us,
        OP_NAMES[r.op as usize],
        key_hash(&r.key),
        r.key.len(),
        r.value_size,
        r.ttl_s,
        r.client
    );
    if raw_key {
        out.push(b',');
        for &b in &r.key {
            if b.is_ascii_alphanumeric() || b"/:;=@!$&'()*+-._~".contains(&b) {
                out.push(b);
            } else {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
    out.push(b'\n');
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Protocol {
    Resp,
    Memcached,
}

impl Protocol {
    pub fn parse(name: &str) -> Result<Protocol, String> {
        match name {
            "resp" | "redis" => Ok(Protocol::Resp),
            "memcached" | "memcache" => Ok(Protocol::Memcached),
            other => Err(format!(
                "unknown capture protocol {other:?}: use resp or memcached"
            )),
        }
    }
}

enum Event {
    /// `len` bytes at `start` of [`Tapped::bytes`].
    Data {
        conn: u32,
        up: bool,
        t_ns: u64,
        start: usize,
        len: usize,
    },
    Closed(u32),
}

/// Segments in arrival order, their bytes back to back in one buffer: a pump's copy is one
/// `memcpy` into capacity kept from drain to drain (two buffers swap), with no allocation.
#[derive(Default)]
struct Tapped {
    events: Vec<Event>,
    bytes: Vec<u8>,
}

/// One connection's handle on the tap, owned by its two pumps.
pub struct ConnTap {
    pub id: u32,
    broken: AtomicBool,
}

/// The pumps' side: cheap appends, never blocking on parsing.
pub struct Tap {
    tapped: Mutex<Tapped>,
    /// Bytes held between drains before segments are dropped.
    limit: usize,
    next_conn: AtomicU32,
    pub dropped_segments: AtomicU64,
    pub dropped_bytes: AtomicU64,
}

impl Tap {
    pub fn new(limit: usize) -> Tap {
        Tap {
            tapped: Mutex::new(Tapped::default()),
            limit,
            next_conn: AtomicU32::new(0),
            dropped_segments: AtomicU64::new(0),
            dropped_bytes: AtomicU64::new(0),
        }
    }

    pub fn open(&self) -> ConnTap {
        ConnTap {
            id: self.next_conn.fetch_add(1, Relaxed) + 1,
            broken: AtomicBool::new(false),
        }
    }

    /// A copy of one segment as it arrived (`t_ns`: CLOCK_MONOTONIC).
    pub fn segment(&self, conn: &ConnTap, up: bool, t_ns: u64, data: &[u8]) {
        if !conn.broken.load(Relaxed) {
            if let Ok(mut t) = self.tapped.lock() {
                let start = t.bytes.len();
                if start + data.len() <= self.limit {
                    t.bytes.extend_from_slice(data);
                    t.events.push(Event::Data {
                        conn: conn.id,
                        up,
                        t_ns,
                        start,
                        len: data.len(),
                    });
                    return;
                }
            }
            conn.broken.store(true, Relaxed);
        }
        self.dropped_segments.fetch_add(1, Relaxed);
        self.dropped_bytes.fetch_add(data.len() as u64, Relaxed);
    }

    pub fn closed(&self, conn: &ConnTap) {
        if let Ok(mut t) = self.tapped.lock() {
            t.events.push(Event::Closed(conn.id));
        }
    }

    /// Swap what was tapped into `into` (emptied first: its capacity goes back to the pumps).
    fn take(&self, into: &mut Tapped) {
        into.events.clear();
        into.bytes.clear();
        if let Ok(mut t) = self.tapped.lock() {
            std::mem::swap(&mut *t, into);
        }
    }
}

/// One request as the trace records it.
#[derive(Clone, Debug, PartialEq)]
pub struct Rec {
    pub t_us: i64,
    pub op: u8,
    pub key: Vec<u8>,
    pub value_size: u32,
    pub ttl_s: u32,
    pub client: u32,
}

/// What the reply to a request looks like, and which of its records it sizes.
#[derive(Debug)]
enum Expect {
    /// One RESP reply; if `sized`, its bulk length (or each array element's) sizes the records.
    Resp { sized: bool },
    /// memcached `VALUE` lines until `END`, sizing the records by key.
    McValues,
    /// One line (storage, delete, incr, touch, version, errors...).
    McLine,
    /// Lines until `END` (stats).
    McStats,
    /// A meta reply; `quiet`: the codes `q` suppresses may never come.
    Meta { quiet: bool, cmd: [u8; 2] },
}

struct Pending {
    expect: Expect,
    /// Reads waiting for their value size (writes are ready at once).
    recs: Vec<Rec>,
}

/// One direction's unparsed bytes, with the arrival time of each segment in it.
#[derive(Default)]
struct Stream {
    buf: Vec<u8>,
    /// Where the unparsed bytes start: consumed bytes are dropped in bulk, not per request,
    /// so a segment of many pipelined requests is not shifted once per request.
    start: usize,
    /// (end offset in `buf`, arrival ns) per segment still (partly) unparsed.
    times: VecDeque<(usize, u64)>,
}

impl Stream {
    fn push(&mut self, t_ns: u64, data: &[u8]) {
        self.buf.extend_from_slice(data);
        self.times.push_back((self.buf.len(), t_ns));
    }

    /// The unparsed bytes.
    fn data(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    /// Arrival of the first unparsed byte.
    fn first_time(&self) -> u64 {
        self.times.front().map_or(0, |(_, t)| *t)
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        while self
            .times
            .front()
            .is_some_and(|(end, _)| *end <= self.start)
        {
            self.times.pop_front();
        }
        if self.start == self.buf.len() {
            self.buf.clear();
            self.times.clear();
            self.start = 0;
        } else if self.start > 64 * 1024 && self.start * 2 > self.buf.len() {
            self.buf.drain(..self.start);
            for seg in self.times.iter_mut() {
                seg.0 -= self.start;
            }
            self.start = 0;
        }
    }
}

#[derive(Default)]
struct Conn {
    req: Stream,
    rep: Stream,
    pending: VecDeque<Pending>,
    /// The request stream could not be parsed (binary protocol, garbage): ignore the rest.
    lost: bool,
    /// Replies no longer match requests one for one (SUBSCRIBE, MONITOR, a parse error).
    unmatched: bool,
}

/// Counts a capture summary reports.
#[derive(Default, Clone, Debug)]
pub struct CaptureCounts {
    pub requests: u64,
    pub records: u64,
    /// Requests that are not cache ops (PING, HELLO, INFO, touch, stats...): not recorded.
    pub other: u64,
    /// Connections whose stream stopped being parsed (unknown protocol, oversized message).
    pub unparsed_connections: u64,
    pub connections: u64,
}

/// The parsing side; owns every connection's state.
pub struct Recorder {
    protocol: Protocol,
    /// CLOCK_REALTIME − CLOCK_MONOTONIC at the start, to turn arrival stamps into epoch µs.
    epoch_offset_ns: i128,
    conns: HashMap<u32, Conn>,
    ready: Vec<Rec>,
    /// The tap's other buffer, kept for its capacity.
    spare: Tapped,
    pub counts: CaptureCounts,
}

fn realtime_ns() -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128
}

fn now_unix_s() -> i64 {
    (realtime_ns() / 1_000_000_000) as i64
}

/// Parse failure that makes a stream unusable (as opposed to "need more bytes").
struct Bad;

type Parsed<T> = Result<Option<T>, Bad>;

fn find_line(buf: &[u8], pos: usize) -> Option<(usize, usize)> {
    // (end of the line's content, start of the next line); accepts a bare "\n"
    let nl = buf[pos..].iter().position(|&b| b == b'\n')? + pos;
    let end = if nl > pos && buf[nl - 1] == b'\r' {
        nl - 1
    } else {
        nl
    };
    Some((end, nl + 1))
}

fn int(text: &[u8]) -> Option<i64> {
    std::str::from_utf8(text).ok()?.trim().parse().ok()
}

fn upper(text: &[u8]) -> Vec<u8> {
    text.to_ascii_uppercase()
}

// --- RESP -------------------------------------------------------------------------------

/// One request: an array of bulk strings, or an inline command. Returns the argument
/// spans and the bytes consumed.
fn resp_request(buf: &[u8]) -> Parsed<(Vec<(usize, usize)>, usize)> {
    if buf.is_empty() {
        return Ok(None);
    }
    if buf[0] != b'*' {
        let Some((end, next)) = find_line(buf, 0) else {
            return if buf.len() > 64 * 1024 {
                Err(Bad)
            } else {
                Ok(None)
            };
        };
        let mut args = Vec::new();
        let mut i = 0;
        while i < end {
            while i < end && buf[i].is_ascii_whitespace() {
                i += 1;
            }
            let start = i;
            while i < end && !buf[i].is_ascii_whitespace() {
                i += 1;
            }
            if i > start {
                args.push((start, i));
            }
        }
        return Ok(Some((args, next)));
    }
    let Some((end, mut pos)) = find_line(buf, 0) else {
        return Ok(None);
    };
    let n = int(&buf[1..end]).ok_or(Bad)?;
    let mut args = Vec::with_capacity(n.max(0) as usize);
    for _ in 0..n.max(0) {
        let Some((end, next)) = find_line(buf, pos) else {
            return Ok(None);
        };
        if buf[pos] != b'$' {
            return Err(Bad);
        }
        let len = int(&buf[pos + 1..end]).ok_or(Bad)?;
        if !(0..MAX_MESSAGE as i64).contains(&len) {
            return Err(Bad);
        }
        let len = len as usize;
        if buf.len() < next + len + 2 {
            return Ok(None);
        }
        args.push((next, next + len));
        pos = next + len + 2;
    }
    Ok(Some((args, pos)))
}

/// The end of one complete RESP2/RESP3 value starting at `pos`.
fn resp_skip(buf: &[u8], pos: usize) -> Parsed<usize> {
    let Some((end, next)) = find_line(buf, pos) else {
        return Ok(None);
    };
    if end == pos {
        return Err(Bad);
    }
    let count = || int(&buf[pos + 1..end]).ok_or(Bad);
    match buf[pos] {
        b'+' | b'-' | b':' | b'_' | b'#' | b',' | b'(' => Ok(Some(next)),
        b'$' | b'!' | b'=' => {
            let len = count()?;
            if len < 0 {
                return Ok(Some(next));
            }
            let stop = next + len as usize + 2;
            Ok((buf.len() >= stop).then_some(stop))
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let n = count()?;
            let items = if matches!(buf[pos], b'%' | b'|') {
                n * 2
            } else {
                n
            };
            let mut at = next;
            for _ in 0..items.max(0) {
                match resp_skip(buf, at)? {
                    Some(e) => at = e,
                    None => return Ok(None),
                }
            }
            Ok(Some(at))
        }
        _ => Err(Bad),
    }
}

/// The value size a reply element carries: a bulk string's length, 0 for nil or anything else.
fn resp_size(buf: &[u8], pos: usize) -> u32 {
    match buf.get(pos) {
        Some(b'$') | Some(b'=') | Some(b'!') => find_line(buf, pos)
            .and_then(|(end, _)| int(&buf[pos + 1..end]))
            .map_or(0, |n| n.max(0) as u32),
        _ => 0,
    }
}

// --- memcached --------------------------------------------------------------------------

fn tokens(line: &[u8]) -> Vec<&[u8]> {
    line.split(|b| *b == b' ' || *b == b'\t')
        .filter(|t| !t.is_empty())
        .collect()
}

/// memcached's exptime: seconds, or a unix time when above 30 days.
fn mc_ttl(text: &[u8]) -> u32 {
    let Some(v) = int(text) else { return 0 };
    if v <= 0 {
        0
    } else if v > 2_592_000 {
        (v - now_unix_s()).clamp(0, u32::MAX as i64) as u32
    } else {
        v as u32
    }
}

/// A meta flag's token (`T30` for flag `T`), if present.
fn meta_flag<'a>(flags: &[&'a [u8]], flag: u8) -> Option<&'a [u8]> {
    flags.iter().find(|f| f[0] == flag).map(|f| &f[1..])
}

impl Recorder {
    pub fn new(protocol: Protocol) -> Recorder {
        Recorder {
            protocol,
            epoch_offset_ns: realtime_ns() - now_ns() as i128,
            conns: HashMap::new(),
            ready: Vec::new(),
            spare: Tapped::default(),
            counts: CaptureCounts::default(),
        }
    }

    fn t_us(&self, t_ns: u64) -> i64 {
        ((t_ns as i128 + self.epoch_offset_ns) / 1000) as i64
    }

    /// Take what the tap holds and parse it.
    pub fn feed_from(&mut self, tap: &Tap) {
        let mut tapped = std::mem::take(&mut self.spare);
        tap.take(&mut tapped);
        for ev in &tapped.events {
            match *ev {
                Event::Data {
                    conn,
                    up,
                    t_ns,
                    start,
                    len,
                } => self.feed(conn, up, t_ns, &tapped.bytes[start..start + len]),
                Event::Closed(conn) => self.close(conn),
            }
        }
        self.spare = tapped;
    }

    pub fn feed(&mut self, id: u32, up: bool, t_ns: u64, data: &[u8]) {
        let mut conn = match self.conns.remove(&id) {
            Some(c) => c,
            None => {
                self.counts.connections += 1;
                Conn::default()
            }
        };
        if !conn.lost {
            if up {
                conn.req.push(t_ns, data);
                self.parse_requests(id, &mut conn);
            } else if !conn.unmatched {
                conn.rep.push(t_ns, data);
            }
            if !conn.unmatched {
                self.parse_replies(&mut conn);
            }
            if conn.req.data().len() > MAX_MESSAGE || conn.rep.data().len() > MAX_MESSAGE {
                self.lose(&mut conn);
            }
        }
        self.conns.insert(id, conn);
    }

    fn lose(&mut self, conn: &mut Conn) {
        if !conn.lost {
            self.counts.unparsed_connections += 1;
        }
        conn.lost = true;
        self.unmatch(conn);
        conn.req = Stream::default();
    }

    /// Replies can no longer be matched: release the waiting reads unsized.
    fn unmatch(&mut self, conn: &mut Conn) {
        conn.unmatched = true;
        conn.rep = Stream::default();
        for p in conn.pending.drain(..) {
            self.ready.extend(p.recs);
        }
    }

    pub fn close(&mut self, id: u32) {
        if let Some(mut conn) = self.conns.remove(&id) {
            self.unmatch(&mut conn);
        }
    }

    fn parse_requests(&mut self, id: u32, conn: &mut Conn) {
        loop {
            let parsed = match self.protocol {
                Protocol::Resp => self.resp_command(id, conn),
                Protocol::Memcached => self.mc_command(id, conn),
            };
            match parsed {
                Ok(Some(())) => {}
                Ok(None) => return,
                Err(Bad) => {
                    self.lose(conn);
                    return;
                }
            }
        }
    }

    fn push(&mut self, conn: &mut Conn, expect: Option<Expect>, reads: Vec<Rec>, writes: Vec<Rec>) {
        self.counts.requests += 1;
        let n = (reads.len() + writes.len()) as u64;
        if n == 0 {
            self.counts.other += 1;
        }
        self.counts.records += n;
        self.ready.extend(writes);
        match expect {
            Some(expect) if !conn.unmatched => conn.pending.push_back(Pending {
                expect,
                recs: reads,
            }),
            _ => self.ready.extend(reads),
        }
    }

    fn resp_command(&mut self, id: u32, conn: &mut Conn) -> Parsed<()> {
        let Some((args, used)) = resp_request(conn.req.data())? else {
            return Ok(None);
        };
        let t_us = self.t_us(conn.req.first_time());
        let buf = conn.req.data();
        let arg = |i: usize| args.get(i).map(|&(s, e)| &buf[s..e]);
        let rec = |op: u8, key: &[u8], value_size: usize, ttl_s: u32| Rec {
            t_us,
            op,
            key: key.to_vec(),
            value_size: value_size.min(u32::MAX as usize) as u32,
            ttl_s,
            client: id,
        };
        let name = arg(0).map(upper).unwrap_or_default();
        let (mut reads, mut writes) = (Vec::new(), Vec::new());
        let mut sized = false;
        let mut streams = false;
        match name.as_slice() {
            b"GET" | b"GETEX" | b"GETDEL" if args.len() >= 2 => {
                reads.push(rec(OP_GET, arg(1).unwrap_or_default(), 0, 0));
                sized = true;
            }
            b"MGET" => {
                for i in 1..args.len() {
                    reads.push(rec(OP_GET, arg(i).unwrap_or_default(), 0, 0));
                }
                sized = true;
            }
            b"SET" if args.len() >= 3 => {
                let mut ttl = 0u32;
                let mut i = 3;
                while i < args.len() {
                    let opt = upper(arg(i).unwrap_or_default());
                    let val = arg(i + 1).and_then(int).unwrap_or(0);
                    match opt.as_slice() {
                        b"EX" => ttl = val.clamp(0, u32::MAX as i64) as u32,
                        b"PX" => ttl = ((val.max(0) + 999) / 1000) as u32,
                        b"EXAT" => ttl = (val - now_unix_s()).clamp(0, u32::MAX as i64) as u32,
                        b"PXAT" => {
                            ttl =
                                ((val + 999) / 1000 - now_unix_s()).clamp(0, u32::MAX as i64) as u32
                        }
                        _ => {
                            i += 1;
                            continue;
                        }
                    }
                    i += 2;
                }
                let v = args[2].1 - args[2].0;
                writes.push(rec(OP_SET, arg(1).unwrap_or_default(), v, ttl));
            }
            b"SETNX" if args.len() >= 3 => writes.push(rec(
                OP_SET,
                arg(1).unwrap_or_default(),
                args[2].1 - args[2].0,
                0,
            )),
            b"SETEX" | b"PSETEX" if args.len() >= 4 => {
                let t = arg(2).and_then(int).unwrap_or(0).max(0);
                let ttl = if name == b"PSETEX" {
                    (t + 999) / 1000
                } else {
                    t
                };
                let v = args[3].1 - args[3].0;
                writes.push(rec(OP_SET, arg(1).unwrap_or_default(), v, ttl as u32));
            }
            b"MSET" | b"MSETNX" => {
                for i in (1..args.len().saturating_sub(1)).step_by(2) {
                    let v = args[i + 1].1 - args[i + 1].0;
                    writes.push(rec(OP_SET, arg(i).unwrap_or_default(), v, 0));
                }
            }
            b"DEL" | b"UNLINK" => {
                for i in 1..args.len() {
                    writes.push(rec(OP_DELETE, arg(i).unwrap_or_default(), 0, 0));
                }
            }
            b"EXISTS" => {
                for i in 1..args.len() {
                    writes.push(rec(OP_EXISTS, arg(i).unwrap_or_default(), 0, 0));
                }
            }
            b"INCR" | b"INCRBY" | b"DECR" | b"DECRBY" | b"INCRBYFLOAT" if args.len() >= 2 => {
                writes.push(rec(OP_INCR, arg(1).unwrap_or_default(), 0, 0))
            }
            // Replies stop being one per request: stop matching this connection.
            b"SUBSCRIBE" | b"PSUBSCRIBE" | b"SSUBSCRIBE" | b"MONITOR" => streams = true,
            _ => {}
        }
        conn.req.consume(used);
        let blank = args.is_empty(); // an empty inline line gets no reply
        self.push(
            conn,
            (!blank).then_some(Expect::Resp { sized }),
            reads,
            writes,
        );
        if streams {
            self.unmatch(conn);
        }
        Ok(Some(()))
    }

    fn mc_command(&mut self, id: u32, conn: &mut Conn) -> Parsed<()> {
        let buf = conn.req.data();
        if buf.first() == Some(&0x80) {
            return Err(Bad); // the binary protocol is not parsed
        }
        let Some((end, next)) = find_line(buf, 0) else {
            return if buf.len() > 64 * 1024 {
                Err(Bad)
            } else {
                Ok(None)
            };
        };
        let t_us = self.t_us(conn.req.first_time());
        let line = &buf[..end];
        let tok = tokens(line);
        let rec = |op: u8, key: &[u8], value_size: i64, ttl_s: u32| Rec {
            t_us,
            op,
            key: key.to_vec(),
            value_size: value_size.clamp(0, u32::MAX as i64) as u32,
            ttl_s,
            client: id,
        };
        let cmd = tok.first().copied().unwrap_or_default();
        let noreply = tok.last() == Some(&&b"noreply"[..]);
        let (mut reads, mut writes) = (Vec::new(), Vec::new());
        let mut used = next;
        let blank = cmd.is_empty();
        let mut expect = Some(Expect::McLine);
        match cmd {
            b"get" | b"gets" => {
                for k in &tok[1..] {
                    reads.push(rec(OP_GET, k, 0, 0));
                }
                expect = Some(Expect::McValues);
            }
            b"gat" | b"gats" => {
                for k in tok.iter().skip(2) {
                    reads.push(rec(OP_GET, k, 0, 0));
                }
                expect = Some(Expect::McValues);
            }
            b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => {
                let bytes = tok.get(4).and_then(|t| int(t)).ok_or(Bad)?;
                if !(0..MAX_MESSAGE as i64).contains(&bytes) {
                    return Err(Bad);
                }
                used = next + bytes as usize + 2;
                if buf.len() < used {
                    return Ok(None);
                }
                let ttl = tok.get(3).map_or(0, |t| mc_ttl(t));
                writes.push(rec(OP_SET, tok[1], bytes, ttl));
            }
            b"delete" if tok.len() >= 2 => writes.push(rec(OP_DELETE, tok[1], 0, 0)),
            b"incr" | b"decr" if tok.len() >= 2 => writes.push(rec(OP_INCR, tok[1], 0, 0)),
            b"mg" if tok.len() >= 2 => {
                let flags = &tok[2..];
                let op = if meta_flag(flags, b'v').is_some() {
                    OP_GET
                } else {
                    OP_EXISTS
                };
                reads.push(rec(op, tok[1], 0, 0));
                expect = Some(meta(flags, *b"mg"));
            }
            b"ms" if tok.len() >= 3 => {
                let bytes = int(tok[2]).ok_or(Bad)?;
                if !(0..MAX_MESSAGE as i64).contains(&bytes) {
                    return Err(Bad);
                }
                used = next + bytes as usize + 2;
                if buf.len() < used {
                    return Ok(None);
                }
                let flags = &tok[3..];
                let ttl = meta_flag(flags, b'T').map_or(0, mc_ttl);
                writes.push(rec(OP_SET, tok[1], bytes, ttl));
                expect = Some(meta(flags, *b"ms"));
            }
            b"md" if tok.len() >= 2 => {
                writes.push(rec(OP_DELETE, tok[1], 0, 0));
                expect = Some(meta(&tok[2..], *b"md"));
            }
            b"ma" if tok.len() >= 2 => {
                writes.push(rec(OP_INCR, tok[1], 0, 0));
                expect = Some(meta(&tok[2..], *b"ma"));
            }
            b"mn" => expect = Some(meta(&[], *b"mn")),
            b"stats" => expect = Some(Expect::McStats),
            b"quit" | b"" => expect = None,
            _ => {}
        }
        if noreply {
            expect = None;
        }
        conn.req.consume(used);
        if blank {
            return Ok(Some(())); // a blank line: nothing sent, nothing answered
        }
        self.push(conn, expect, reads, writes);
        Ok(Some(()))
    }

    fn parse_replies(&mut self, conn: &mut Conn) {
        while let Some(head) = conn.pending.front_mut() {
            let got = match &head.expect {
                Expect::Resp { sized } => resp_reply(conn.rep.data(), *sized, &mut head.recs),
                Expect::McValues => mc_values(conn.rep.data(), &mut head.recs),
                Expect::McLine => Ok(find_line(conn.rep.data(), 0).map(|(_, n)| Some(n))),
                Expect::McStats => mc_stats(conn.rep.data()),
                Expect::Meta { quiet, cmd } => {
                    meta_reply(conn.rep.data(), *quiet, *cmd, &mut head.recs)
                }
            };
            match got {
                // Some(n): the head's reply took n bytes; None: the reply belongs to a later
                // request (a quiet meta request said nothing), so the head is done unsized.
                Ok(Some(Some(n))) => conn.rep.consume(n),
                Ok(Some(None)) => {}
                Ok(None) => return,
                Err(Bad) => {
                    self.unmatch(conn);
                    return;
                }
            }
            let done = conn.pending.pop_front().expect("head exists");
            self.ready.extend(done.recs);
        }
        // Replies nobody asked for (a RESP3 push outside any request): drop the bytes.
        if self.protocol == Protocol::Resp {
            while let Ok(Some(end)) = resp_skip(conn.rep.data(), 0) {
                conn.rep.consume(end);
            }
        }
    }

    /// The records resolved so far that no unresolved request precedes, in time order;
    /// with `all`, every request (waiting reads count as misses): the end of a capture.
    pub fn take_ready(&mut self, all: bool) -> Vec<Rec> {
        if all {
            let ids: Vec<u32> = self.conns.keys().copied().collect();
            for id in ids {
                self.close(id);
            }
        }
        let watermark = self
            .conns
            .values()
            .filter_map(|c| c.pending.iter().find(|p| !p.recs.is_empty()))
            .map(|p| p.recs[0].t_us)
            .min()
            .unwrap_or(i64::MAX);
        self.ready.sort_by_key(|r| r.t_us);
        let cut = self.ready.partition_point(|r| r.t_us < watermark);
        let rest = self.ready.split_off(cut);
        std::mem::replace(&mut self.ready, rest)
    }
}

fn meta(flags: &[&[u8]], cmd: [u8; 2]) -> Expect {
    Expect::Meta {
        quiet: flags.iter().any(|f| *f == b"q"),
        cmd,
    }
}

type Reply = Parsed<Option<usize>>;

fn resp_reply(buf: &[u8], sized: bool, recs: &mut [Rec]) -> Reply {
    let mut pos = 0;
    loop {
        // Attributes (RESP3 `|`) come before the reply they describe; pushes (`>`) are
        // out of band: neither is the reply itself.
        let Some(end) = resp_skip(buf, pos)? else {
            return Ok(None);
        };
        match buf[pos] {
            b'|' | b'>' => pos = end,
            b'*' if sized => {
                let (_, mut at) = find_line(buf, pos).expect("complete");
                for r in recs.iter_mut() {
                    if at >= end {
                        break;
                    }
                    r.value_size = resp_size(buf, at);
                    at = resp_skip(buf, at)?.expect("complete");
                }
                return Ok(Some(Some(end)));
            }
            _ => {
                if sized {
                    if let Some(r) = recs.first_mut() {
                        r.value_size = resp_size(buf, pos);
                    }
                }
                return Ok(Some(Some(end)));
            }
        }
    }
}

fn mc_values(buf: &[u8], recs: &mut [Rec]) -> Reply {
    let mut pos = 0;
    loop {
        let Some((end, next)) = find_line(buf, pos) else {
            return Ok(None);
        };
        let line = &buf[pos..end];
        if line.starts_with(b"VALUE ") {
            let tok = tokens(line);
            let bytes = tok.get(3).and_then(|t| int(t)).ok_or(Bad)?;
            if bytes < 0 {
                return Err(Bad);
            }
            let stop = next + bytes as usize + 2;
            if buf.len() < stop {
                return Ok(None);
            }
            // the first unsized record for this key: the same key may be asked twice
            if let Some(r) = recs
                .iter_mut()
                .find(|r| r.key == tok[1] && r.value_size == 0)
            {
                r.value_size = bytes as u32;
            }
            pos = stop;
        } else {
            // END, or an error line instead of the values
            return Ok(Some(Some(next)));
        }
    }
}

fn mc_stats(buf: &[u8]) -> Reply {
    let mut pos = 0;
    loop {
        let Some((end, next)) = find_line(buf, pos) else {
            return Ok(None);
        };
        let line = &buf[pos..end];
        if !line.starts_with(b"STAT ") && !line.starts_with(b"ITEM ") {
            return Ok(Some(Some(next)));
        }
        pos = next;
    }
}

fn meta_reply(buf: &[u8], quiet: bool, cmd: [u8; 2], recs: &mut [Rec]) -> Reply {
    let Some((end, next)) = find_line(buf, 0) else {
        return Ok(None);
    };
    let code = &buf[..end.min(2)];
    if quiet {
        // `q` hides the usual answer: a miss for mg, success for ms/md/ma. Seeing it (or
        // the `mn` that ends a quiet batch) means this request's answer was the silence.
        let hidden: &[&[u8]] = match &cmd {
            b"mg" => &[b"EN"],
            b"md" => &[b"HD", b"NF"],
            _ => &[b"HD"],
        };
        if hidden.contains(&code) || code == b"MN" {
            return Ok(Some(None));
        }
    }
    if code == b"VA" {
        let tok = tokens(&buf[..end]);
        let bytes = tok.get(1).and_then(|t| int(t)).ok_or(Bad)?;
        if bytes < 0 {
            return Err(Bad);
        }
        let stop = next + bytes as usize + 2;
        if buf.len() < stop {
            return Ok(None);
        }
        if let Some(r) = recs.first_mut() {
            r.value_size = bytes as u32;
        }
        return Ok(Some(Some(stop)));
    }
    Ok(Some(Some(next)))
}

/// The tap plus its recorder: what a capturing proxy holds.
pub struct Capture {
    pub tap: std::sync::Arc<Tap>,
    recorder: Mutex<Recorder>,
}

/// One drain: trace lines ready to append to a `#cachemark-trace/1` file.
pub struct Drained {
    pub lines: Vec<u8>,
    pub count: usize,
    /// Records per op code.
    pub per_op: [u64; OP_NAMES.len()],
}

impl Capture {
    /// `tap_bytes`: what the tap may hold between drains ([`DEFAULT_TAP_BYTES`]).
    pub fn new(protocol: Protocol, tap_bytes: usize) -> Capture {
        Capture {
            tap: std::sync::Arc::new(Tap::new(tap_bytes)),
            recorder: Mutex::new(Recorder::new(protocol)),
        }
    }

    /// Parse what was tapped and format the records ready so far (all of them if `last`)
    /// as trace lines: keys hashed, and also kept (percent-encoded) if `raw_keys`.
    pub fn drain(&self, last: bool, raw_keys: bool) -> Drained {
        let mut rec = self.recorder.lock().unwrap_or_else(|e| e.into_inner());
        rec.feed_from(&self.tap);
        let ready = rec.take_ready(last);
        let mut out = Drained {
            lines: Vec::with_capacity(ready.len() * 64),
            count: ready.len(),
            per_op: [0; OP_NAMES.len()],
        };
        for r in &ready {
            out.per_op[r.op as usize] += 1;
            trace_line(&mut out.lines, r, raw_keys);
        }
        out
    }

    pub fn counts(&self) -> CaptureCounts {
        self.recorder
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .counts
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(protocol: Protocol, exchanges: &[(&[u8], &[u8])]) -> Vec<Rec> {
        let mut r = Recorder::new(protocol);
        for (i, (req, rep)) in exchanges.iter().enumerate() {
            r.feed(1, true, 1_000 * (i as u64 + 1), req);
            r.feed(1, false, 1_000 * (i as u64 + 1) + 500, rep);
        }
        r.take_ready(true)
    }

    fn summary(recs: &[Rec]) -> Vec<(u8, String, u32, u32)> {
        recs.iter()
            .map(|r| {
                (
                    r.op,
                    String::from_utf8_lossy(&r.key).into_owned(),
                    r.value_size,
                    r.ttl_s,
                )
            })
            .collect()
    }

    #[test]
    fn resp_ops_sizes_and_ttls() {
        let recs = run(
            Protocol::Resp,
            &[
                (
                    b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n",
                    b"%1\r\n+server\r\n+redis\r\n",
                ),
                (
                    b"*5\r\n$3\r\nSET\r\n$1\r\na\r\n$5\r\nhello\r\n$2\r\nEX\r\n$2\r\n30\r\n",
                    b"+OK\r\n",
                ),
                (b"*2\r\n$3\r\nGET\r\n$1\r\na\r\n", b"$5\r\nhello\r\n"),
                (b"*2\r\n$3\r\nGET\r\n$1\r\nb\r\n", b"_\r\n"),
                (
                    b"*3\r\n$4\r\nMGET\r\n$1\r\na\r\n$1\r\nb\r\n",
                    b"*2\r\n$5\r\nhello\r\n$-1\r\n",
                ),
                (b"DEL a\r\n", b":1\r\n"),
            ],
        );
        assert_eq!(
            summary(&recs),
            vec![
                (OP_SET, "a".into(), 5, 30),
                (OP_GET, "a".into(), 5, 0),
                (OP_GET, "b".into(), 0, 0),
                (OP_GET, "a".into(), 5, 0),
                (OP_GET, "b".into(), 0, 0),
                (OP_DELETE, "a".into(), 0, 0),
            ]
        );
    }

    #[test]
    fn pipelined_resp_in_odd_pieces() {
        let reqs: &[u8] = b"*2\r\n$3\r\nGET\r\n$1\r\na\r\n*2\r\n$3\r\nGET\r\n$1\r\nb\r\n";
        let reps: &[u8] = b"$3\r\nxyz\r\n$-1\r\n";
        let mut r = Recorder::new(Protocol::Resp);
        for (i, piece) in reqs.chunks(5).enumerate() {
            r.feed(7, true, i as u64 * 1000, piece);
        }
        for piece in reps.chunks(3) {
            r.feed(7, false, 99_000, piece);
        }
        let recs = r.take_ready(false);
        assert_eq!(
            summary(&recs),
            vec![(OP_GET, "a".into(), 3, 0), (OP_GET, "b".into(), 0, 0)]
        );
        assert!(recs.iter().all(|r| r.client == 7));
    }

    #[test]
    fn memcached_text_and_meta() {
        let recs = run(
            Protocol::Memcached,
            &[
                (b"set k 0 60 3\r\nabc\r\n", b"STORED\r\n"),
                (b"set n 0 0 2 noreply\r\nxy\r\n", b""),
                (
                    b"get k zz n\r\n",
                    b"VALUE k 0 3\r\nabc\r\nVALUE n 0 2\r\nxy\r\nEND\r\n",
                ),
                (b"ms m 4 T10\r\nwxyz\r\n", b"HD\r\n"),
                (b"mg m v\r\n", b"VA 4\r\nwxyz\r\n"),
                (
                    b"mg m v q\r\nmg zz v q\r\nmn\r\n",
                    b"VA 4\r\nwxyz\r\nMN\r\n",
                ),
                (b"md m\r\n", b"HD\r\n"),
                (b"incr c 1\r\n", b"NOT_FOUND\r\n"),
            ],
        );
        assert_eq!(
            summary(&recs),
            vec![
                (OP_SET, "k".into(), 3, 60),
                (OP_SET, "n".into(), 2, 0),
                (OP_GET, "k".into(), 3, 0),
                (OP_GET, "zz".into(), 0, 0),
                (OP_GET, "n".into(), 2, 0),
                (OP_SET, "m".into(), 4, 10),
                (OP_GET, "m".into(), 4, 0),
                (OP_GET, "m".into(), 4, 0),
                (OP_GET, "zz".into(), 0, 0),
                (OP_DELETE, "m".into(), 0, 0),
                (OP_INCR, "c".into(), 0, 0),
            ]
        );
    }

    #[test]
    fn key_hash_and_lines_match_the_python_writer() {
        let r = Rec {
            t_us: 5,
            op: OP_SET,
            key: b"a,b%\xff".to_vec(),
            value_size: 3,
            ttl_s: 9,
            client: 2,
        };
        let mut out = Vec::new();
        trace_line(&mut out, &r, true);
        let line = String::from_utf8(out).unwrap();
        assert!(line.starts_with("5,set,"), "{line}");
        assert!(line.ends_with(",5,3,9,2,a%2Cb%25%FF\n"), "{line}");
    }

    #[test]
    fn a_full_tap_drops_and_stops_tapping_that_connection() {
        let tap = Tap::new(10);
        let (a, b) = (tap.open(), tap.open());
        tap.segment(&a, true, 1, b"GET k\r\n");
        tap.segment(&a, true, 2, b"GET longer\r\n"); // over the limit: dropped
        tap.segment(&a, true, 3, b"x"); // would fit, but this connection is out of step now
        tap.segment(&b, true, 4, b"GET z\r\n"); // too: 7 + 7 > 10
        assert_eq!(tap.dropped_segments.load(Relaxed), 3);
        let mut got = Tapped::default();
        tap.take(&mut got);
        assert_eq!(
            (got.events.len(), got.bytes.as_slice()),
            (1, &b"GET k\r\n"[..])
        );
        tap.segment(&b, true, 5, b"x");
        tap.take(&mut got);
        assert!(
            got.events.is_empty(),
            "b dropped a segment: no longer tapped"
        );
    }

    #[test]
    fn a_waiting_read_holds_back_later_records() {
        let mut r = Recorder::new(Protocol::Resp);
        r.feed(1, true, 1_000, b"GET a\r\n");
        r.feed(2, true, 2_000, b"SET b xy\r\n");
        r.feed(2, false, 2_500, b"+OK\r\n");
        assert!(r.take_ready(false).is_empty());
        r.feed(1, false, 3_000, b"$1\r\nz\r\n");
        let recs = r.take_ready(false);
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[0].op, OP_GET);
        assert_eq!(recs[0].value_size, 1);
    }
}
