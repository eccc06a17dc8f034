//! A load thread's sockets and its I/O backend: a connection attached to the ring or the
//! epoll set, requests handed over to be sent, what a backend did on a socket, a broken
//! socket failed and closed, a reconnect (where to, the router says), and the teardown that
//! waits out io_uring's operations in flight.

use super::super::conn::{Completion, P_ASKING, P_RESENT};
use super::super::record::{record_error, E_CONNECTION, E_TIMEOUT};
use super::super::stream::Stream;
use super::{Phase, Worker, RETRY_NS};
use std::os::fd::AsRawFd;
use std::time::Duration;

impl Worker<'_> {
    /// Puts a connected stream in socket `si` and registers it with the backend.
    pub(super) fn attach(&mut self, si: usize, stream: Stream) {
        let s = &mut self.socks[si];
        s.fd = stream.as_raw_fd();
        s.stream = Some(stream);
        s.want_out = false;
        s.need = 0;
        s.sending.clear();
        s.spos = 0;
        match self.uring.as_mut() {
            Some(u) => {
                s.fixed = u.register(si, s.fd);
                u.arm(si);
            }
            None => self.epoll.add(si, s),
        }
    }

    /// Socket `si` is being closed: the ring's table lets go of it (else it stays open).
    pub(super) fn unregister(&mut self, si: usize) {
        let s = &mut self.socks[si];
        if s.fixed {
            s.fixed = false;
            if let Some(u) = self.uring.as_mut() {
                u.register(si, -1);
            }
        }
    }

    /// Fails every request in flight on a socket and closes it (it reconnects on next use).
    pub(super) fn fail_sock(&mut self, si: usize, kind: usize, msg: String, now: u64) {
        let plan = self.plan;
        let s = &mut self.socks[si];
        let n = s.inflight.len();
        let mut first = true;
        while let Some(p) = s.inflight.pop_front() {
            if p.flags & P_ASKING != 0 {
                continue; // not an op: the request behind it gets the error
            }
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
        self.unregister(si);
        let s = &mut self.socks[si];
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
        s.held.clear();
        s.held_ops = 0;
        s.rbuf.clear();
        s.rpos = 0;
        s.need = 0;
        s.skip = 0;
        s.skipping = None;
        s.head_first = false;
        s.unstamped = 0;
        s.dirty = false;
        s.retry_at = now;
        let c = s.client;
        self.clients[c].inflight -= n;
        self.inflight_total -= n;
    }

    /// Stamps send times on newly queued requests and hands them to the I/O backend:
    /// io_uring sends them in its next round, epoll writes them at once.
    #[inline]
    pub(super) fn flush(&mut self, si: usize) {
        let now = self.shared.now();
        let s = &mut self.socks[si];
        if s.fd < 0 {
            return;
        }
        if s.unstamped > s.held_ops {
            // Held requests (the last `held_ops`) are not in `wbuf`: they stay unstamped.
            let len = s.inflight.len();
            for p in s.inflight.range_mut(len - s.unstamped..len - s.held_ops) {
                if p.flags & P_RESENT != 0 {
                    continue; // a redirect's latency counts from the first send
                }
                p.sent = now;
                if !self.plan.open {
                    p.intended = now;
                }
            }
            s.unstamped = s.held_ops;
        }
        if let Some(u) = self.uring.as_mut() {
            u.queue(si, s);
            return;
        }
        if let Some(done) = self.epoll.write(si, s, &self.plan.filler) {
            self.on_io(si, done, now);
        }
    }

    /// Acts on what the I/O backend did on socket `si`.
    pub(super) fn on_io(&mut self, si: usize, done: Completion, now: u64) {
        let why = match done {
            Completion::Read(n) => return self.input(si, n, now),
            Completion::Wrote(n) => {
                if now >= self.measure_start {
                    self.rec.wire_out += n as u64;
                }
                return;
            }
            Completion::Closed => {
                let s = &self.socks[si];
                if s.rbuf.len() > s.rpos {
                    "server closed the connection mid-reply (truncated reply)".to_string()
                } else {
                    "server closed the connection".to_string()
                }
            }
            Completion::ReadFailed(e) => format!("read failed: {e}"),
            Completion::WriteFailed(e) => format!("write failed: {e}"),
        };
        let msg = format!("{}: {why}", self.server_name(self.socks[si].server));
        self.fail_sock(si, E_CONNECTION, msg, now);
    }

    /// One io_uring round (`Uring::round`), then every completion it brought.
    #[inline]
    pub(super) fn uring_round(&mut self, wait_ns: u64) {
        let u = self.uring.as_mut().expect("uring backend");
        if let Err(e) = u.round(&mut self.socks, &self.plan.filler, wait_ns) {
            self.rec.sample(|| format!("io_uring_enter failed: {e}"));
        }
        let u = self.uring.as_mut().expect("uring backend");
        let cqes = std::mem::take(&mut u.cqes);
        let now = self.shared.now();
        for &cqe in &cqes {
            let u = self.uring.as_mut().expect("uring backend");
            if let Some((si, done)) = u.complete(cqe, &mut self.socks) {
                self.on_io(si, done, now);
            }
        }
        self.uring.as_mut().expect("uring backend").cqes = cqes;
    }

    /// One epoll wait (at most `wait_ns`), then every ready socket: writes, then reads.
    #[inline]
    pub(super) fn epoll_round(&mut self, wait_ns: u64) {
        let n = self.epoll.wait(wait_ns);
        for k in 0..n {
            let (si, writable, readable) = self.epoll.ready(k);
            if writable {
                self.flush(si);
            }
            if readable {
                if let Some(done) = self.epoll.read(&mut self.socks[si]) {
                    self.on_io(si, done, self.shared.now());
                }
            }
        }
    }

    /// Before the ring and the buffers go away: stop every operation in flight.
    pub(super) fn uring_teardown(&mut self) {
        if self.uring.is_none() {
            return;
        }
        for si in 0..self.socks.len() {
            self.unregister(si);
            let s = &mut self.socks[si];
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
            if let Some(u) = self.uring.as_mut() {
                u.leak_pool();
            }
            for s in &mut self.socks {
                if s.recv_busy || s.send_busy {
                    std::mem::forget(std::mem::take(&mut s.rbuf));
                    std::mem::forget(std::mem::take(&mut s.tls_in));
                    std::mem::forget(std::mem::take(&mut s.sending));
                }
            }
        }
    }

    /// Reconnects a broken socket, where the router says its server is now; `Err(Some(why))`
    /// when that failed, `Err(None)` when an open-loop socket is still backing off from its
    /// last failure.
    pub(super) fn reconnect(&mut self, si: usize, now: u64) -> Result<(), Option<String>> {
        let back_off = self.plan.open && self.phase == Phase::Run;
        if back_off && now < self.socks[si].retry_at {
            return Err(None);
        }
        // A connect may block (up to 1 s against a hung server): let the on-error watch see
        // the failures so far first, so that it can stop the run meanwhile.
        self.shared.publish(&mut self.rec);
        let plan = self.plan;
        let wait = Duration::from_nanos(plan.timeout_ns.min(1_000_000_000));
        let server = self.socks[si].server;
        match self
            .router
            .connect(plan, self.shared, &mut self.rec, server, wait)
        {
            Ok(stream) => {
                self.attach(si, stream);
                Ok(())
            }
            Err(m) => {
                self.socks[si].retry_at = self.shared.now() + RETRY_NS;
                self.router
                    .unreachable(plan, self.shared, &mut self.rec, server);
                Err(Some(m))
            }
        }
    }
}
