//! The recorder: each tapped connection's request stream parsed into records, its reply
//! stream matched to the requests in order to learn a read's value size (0 on a miss), and
//! the resolved records handed out in time order.
use std::collections::{HashMap, VecDeque};

use super::format::Rec;
use super::parse::{find_line, Bad, Expect, Request, MAX_MESSAGE};
use super::stream::Stream;
use super::tap::{Event, Tap, Tapped};
use super::{memcached, resp};
use crate::timer::{now_ns, realtime_ns};

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

/// A request whose reply has not been parsed yet.
struct Pending {
    expect: Expect,
    /// Reads waiting for their value size (writes are ready at once).
    recs: Vec<Rec>,
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
            let t_us = self.t_us(conn.req.first_time());
            let parsed = match self.protocol {
                Protocol::Resp => resp::command(conn.req.data(), t_us, id),
                Protocol::Memcached => memcached::command(conn.req.data(), t_us, id),
            };
            match parsed {
                Ok(Some(request)) => self.push(conn, request),
                Ok(None) => return,
                Err(Bad) => {
                    self.lose(conn);
                    return;
                }
            }
        }
    }

    /// A parsed request: its bytes consumed, its writes ready, its reads waiting for the reply.
    fn push(&mut self, conn: &mut Conn, request: Request) {
        let Request {
            used,
            reads,
            writes,
            expect,
            counted,
            unmatches,
        } = request;
        conn.req.consume(used);
        if !counted {
            return;
        }
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
        if unmatches {
            self.unmatch(conn);
        }
    }

    fn parse_replies(&mut self, conn: &mut Conn) {
        while let Some(head) = conn.pending.front_mut() {
            let got = match &head.expect {
                Expect::Resp { sized } => resp::resp_reply(conn.rep.data(), *sized, &mut head.recs),
                Expect::McValues => memcached::mc_values(conn.rep.data(), &mut head.recs),
                Expect::McLine => Ok(find_line(conn.rep.data(), 0).map(|(_, n)| Some(n))),
                Expect::McStats => memcached::mc_stats(conn.rep.data()),
                Expect::Meta { quiet, cmd } => {
                    memcached::meta_reply(conn.rep.data(), *quiet, *cmd, &mut head.recs)
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
            while let Ok(Some(end)) = resp::resp_skip(conn.rep.data(), 0) {
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

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::capture::format::OP_GET;

    /// Each exchange's request at 1 µs steps, its reply half a µs later, on connection 1.
    pub fn run(protocol: Protocol, exchanges: &[(&[u8], &[u8])]) -> Vec<Rec> {
        let mut r = Recorder::new(protocol);
        for (i, (req, rep)) in exchanges.iter().enumerate() {
            r.feed(1, true, 1_000 * (i as u64 + 1), req);
            r.feed(1, false, 1_000 * (i as u64 + 1) + 500, rep);
        }
        r.take_ready(true)
    }

    /// (op, key, value size, ttl) per record.
    pub fn summary(recs: &[Rec]) -> Vec<(u8, String, u32, u32)> {
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
