//! A load thread's reading: what arrived on a socket is parsed in place, each reply is
//! recorded against the request at the front of the socket, then its client may send more.
//! A plain-GET run reads its hits the short way (`take_hits`); a large value not to verify
//! is discarded from the socket unread (`begin_discard`, `end_discard`).

use super::super::conn::{Pending, Sock, P_ASKING, P_VERIFY, SKIP_MIN};
use super::super::record::{
    complete, complete_hit, outage_scope, Recorder, E_CONNECTION, E_PROTOCOL, INTERNAL,
};
use super::super::router::Router;
use super::Worker;
use crate::config::Plan;
use crate::proto::{self, printable, resp, Kind, Outcome, Parse, Reply, ValueHead};

/// What became of the reply at the front of a socket.
enum Step {
    /// Read and recorded; `demoted`: it said `READONLY` from the primary the Sentinels named.
    Done { demoted: bool },
    /// Not all here yet.
    Wait,
    /// Not a reply: a protocol error, which closes the socket.
    Bad(String),
}

impl Worker<'_> {
    /// Parses and records what arrived on a socket, then lets its client send more.
    #[inline]
    pub(super) fn input(&mut self, si: usize, n: usize, now: u64) {
        let plan = self.plan;
        if now >= self.measure_start {
            self.rec.wire_in += n as u64;
        }
        let s = &mut self.socks[si];
        let mut done = 0;
        let mut bad: Option<String> = None;
        let mut readonly = false;
        if s.rbuf.len() >= s.need {
            if self.plain_gets.is_some() && s.skipping.is_none() {
                done = take_hits(s, &mut self.rec, plan.limits.max_bulk, now);
            }
            while let Some(p) = s.inflight.front().copied() {
                if s.unstamped >= s.inflight.len() {
                    break; // a reply cannot precede its request's write
                }
                match read_front(s, &mut self.rec, &mut self.router, plan, &p, now) {
                    Step::Done { demoted } => {
                        readonly |= demoted;
                        s.inflight.pop_front();
                        done += 1;
                        s.need = 0;
                    }
                    Step::Wait => break,
                    Step::Bad(m) => {
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
        let was_bad = bad.is_some() || readonly;
        if let Some(m) = bad {
            let msg = format!("{}: protocol error: {m}", self.server_name(server));
            self.fail_sock(si, E_PROTOCOL, msg, now);
        } else if readonly {
            let msg = format!(
                "{}: READONLY (a replica now): connection closed, the Sentinels are asked again",
                self.server_name(server)
            );
            self.fail_sock(si, E_CONNECTION, msg, now);
        }
        if self.router.has_redirects() {
            self.follow_redirects(c, now);
        }
        if done > 0 || was_bad {
            self.top_up(c, now);
        }
    }
}

/// Reads the reply at the front of socket `s`, to request `p`, and records it (a cluster's
/// reply that is no op's own goes to the router).
#[inline(always)]
fn read_front(
    s: &mut Sock,
    rec: &mut Recorder,
    router: &mut Router,
    plan: &Plan,
    p: &Pending,
    now: u64,
) -> Step {
    if let Some(head) = s.skipping {
        return end_discard(s, rec, plan, p, head, now);
    }
    let avail = &s.rbuf[s.rpos..];
    let kind = if p.flags & P_ASKING != 0 {
        Kind::Setup
    } else {
        p.kind
    };
    match proto::parse(plan.protocol, avail, kind, &plan.limits) {
        Parse::Done(r) => {
            let mut demoted = false;
            if !router.took(p, &r, avail) {
                if r.value.is_some() {
                    s.head_first = false; // a value read whole: read as usual again
                }
                demoted = record_reply(rec, router, plan, s.server, p, &r, avail, now);
            }
            s.rpos += r.consumed;
            Step::Done { demoted }
        }
        Parse::Need(k) => {
            s.need = s.rpos + k;
            s.head_first = false; // a value to read whole, or a head cut short
            if p.flags & P_VERIFY == 0 && k >= avail.len() + SKIP_MIN && s.may_discard() {
                begin_discard(s, plan, kind);
            }
            Step::Wait
        }
        Parse::Bad(m) => Step::Bad(m),
    }
}

/// Records reply `r` to op `p` from server `server`: true when it says the primary the
/// Sentinels named was demoted. A write that succeeds ends a write outage.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn record_reply(
    rec: &mut Recorder,
    router: &Router,
    plan: &Plan,
    server: usize,
    p: &Pending,
    r: &Reply,
    avail: &[u8],
    now: u64,
) -> bool {
    let value = r.value.clone().map(|v| &avail[v]);
    complete(rec, plan, p, r, value, avail, now);
    let failed = matches!(r.outcome, Outcome::ServerError | Outcome::ProtocolError);
    if failed && router.demoted(r, avail) {
        return true;
    }
    if rec.outages.open() && !failed && p.timed && p.op != INTERNAL && plan.ops[p.op as usize].write
    {
        rec.outages
            .succeeded(now, router.name(plan, server), outage_scope(plan, p));
    }
    false
}

/// An unverified GET's large value (`Parse::Need` far beyond what is here): only its length
/// counts, so the rest of it is discarded from the socket unread.
#[inline]
fn begin_discard(s: &mut Sock, plan: &Plan, kind: Kind) {
    let avail = &s.rbuf[s.rpos..];
    if let Some(head) = proto::value_head(plan.protocol, avail, kind, &plan.limits) {
        let have = avail.len() - head.at;
        if head.len >= have + SKIP_MIN {
            s.rpos += head.at;
            s.rbuf.truncate(s.rpos);
            s.skip = head.len - have;
            s.skipping = Some(head);
            s.head_first = true;
            s.need = s.rpos + head.tail.len();
        }
    }
}

/// The front reply's value is being discarded: once it is gone, what must follow it
/// completes the reply (a hit of that length, as parsed whole).
#[inline]
fn end_discard(
    s: &mut Sock,
    rec: &mut Recorder,
    plan: &Plan,
    p: &Pending,
    head: ValueHead,
    now: u64,
) -> Step {
    let avail = &s.rbuf[s.rpos..];
    if s.skip > 0 || avail.len() < head.tail.len() {
        s.need = s.rpos + head.tail.len();
        return Step::Wait;
    }
    if !avail.starts_with(head.tail) {
        return Step::Bad(format!(
            "a value of {} bytes not followed by {:?}: {:?}",
            head.len,
            printable(head.tail),
            printable(avail)
        ));
    }
    let r = Reply {
        consumed: head.tail.len(),
        outcome: Outcome::Hit,
        value: None,
        payload: head.len,
        message: None,
    };
    complete(rec, plan, p, &r, None, avail, now);
    s.skipping = None;
    s.rpos += r.consumed;
    Step::Done { demoted: false }
}

/// The short way of a plain-GET run's replies (`plain_gets`): the whole hits to GETs not to
/// verify at the front of socket `s`, recorded as the general loop of `input` records them;
/// returns how many. It stops at anything else (a miss, an error, a read to verify, a
/// prefill's reply, a reply not all here), which that loop reads next.
#[inline]
fn take_hits(s: &mut Sock, rec: &mut Recorder, max_bulk: usize, now: u64) -> usize {
    let mut done = 0;
    while s.inflight.len() > s.unstamped {
        let p = s.inflight.front().expect("more in flight than unwritten");
        if p.kind != Kind::Get || p.flags & P_VERIFY != 0 {
            break;
        }
        let Some((at, len)) = resp::whole_hit_hinted(&s.rbuf[s.rpos..], &mut s.hit, max_bulk)
        else {
            break;
        };
        complete_hit(rec, p, len, now);
        s.rpos += at + len + 2;
        s.inflight.pop_front();
        done += 1;
    }
    if done > 0 {
        s.need = 0;
        s.head_first = false; // values read whole: read as usual
    }
    done
}

#[cfg(test)]
mod tests {
    use super::super::super::record::E_SERVER;
    use super::*;
    use crate::config::Config;
    use crate::keyspace::Rng;

    /// One reply read the general way (`input`'s loop): `false` when it is not all here.
    fn general_step(s: &mut Sock, rec: &mut Recorder, plan: &Plan, now: u64) -> bool {
        let Some(p) = s.inflight.front().copied() else {
            return false;
        };
        let avail = &s.rbuf[s.rpos..];
        let Parse::Done(r) = proto::parse(plan.protocol, avail, p.kind, &plan.limits) else {
            return false;
        };
        let value = r.value.clone().map(|v| &avail[v]);
        complete(rec, plan, &p, &r, value, avail, now);
        s.rpos += r.consumed;
        s.inflight.pop_front();
        true
    }

    /// Random replies to a plain-GET run's reads (hits of any size, misses, errors, reads to
    /// verify, warm-up reads), arriving in random pieces, read the short way wherever it
    /// goes and the general way after each of its stops: recorded as the general way alone
    /// records them.
    #[test]
    fn the_short_way_of_replies_records_what_the_general_loop_records() {
        let plan = Config::from_json(
            r#"{"protocol":"resp2","servers":["127.0.0.1:1"],"mix":[{"op":"get","weight":1}]}"#,
        )
        .unwrap()
        .plan()
        .unwrap();
        let mut rng = Rng::new(11);
        let (mut stream, mut requests) = (Vec::new(), Vec::new());
        for i in 0..20_000u64 {
            requests.push(Pending {
                op: 0,
                kind: Kind::Get,
                timed: rng.below(8) != 0,
                intended: 1_000 + i,
                sent: 1_000 + i,
                bytes_out: 8,
                key: i,
                size: 0,
                flags: if rng.below(10) == 0 { P_VERIFY } else { 0 },
                hops: 0,
            });
            match rng.below(10) {
                0 => stream.extend_from_slice(b"$-1\r\n"),
                1 => stream.extend_from_slice(b"-ERR no such thing\r\n"),
                _ => {
                    let n = rng.below(300) as usize;
                    stream.extend_from_slice(format!("${n}\r\n").as_bytes());
                    stream.resize(stream.len() + n, b'v');
                    stream.extend_from_slice(b"\r\n");
                }
            }
        }
        let now = 9_000_000;
        let mut whole = Sock::new(0, 0, 16);
        whole.inflight.extend(requests.iter().copied());
        whole.rbuf = stream.clone();
        let mut reference = Recorder::new(1);
        while general_step(&mut whole, &mut reference, &plan, now) {}
        assert!(whole.inflight.is_empty() && whole.rpos == stream.len());

        let mut s = Sock::new(0, 0, 16);
        s.inflight.extend(requests.iter().copied());
        let mut rec = Recorder::new(1);
        let (mut at, mut short) = (0, 0);
        while at < stream.len() {
            let piece = (1 + rng.below(2_000) as usize).min(stream.len() - at);
            s.rbuf.extend_from_slice(&stream[at..at + piece]);
            at += piece;
            loop {
                short += take_hits(&mut s, &mut rec, plan.limits.max_bulk, now);
                if !general_step(&mut s, &mut rec, &plan, now) {
                    break;
                }
            }
        }
        assert!(s.inflight.is_empty() && s.rpos == stream.len());
        assert!(short > 10_000, "the short way took {short} of 20,000");
        reference.settle();
        rec.settle();
        assert_eq!(
            rec.ops[0].result(false, true),
            reference.ops[0].result(false, true)
        );
        assert_eq!(
            (rec.tally_ok, rec.tally_failed, rec.samples),
            (
                reference.tally_ok,
                reference.tally_failed,
                reference.samples
            )
        );
        assert!(reference.ops[0].errors[E_PROTOCOL] + reference.ops[0].errors[E_SERVER] > 0);
    }
}
