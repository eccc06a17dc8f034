//! The epoll backend (`io: "epoll"`, or when io_uring is unavailable): level-triggered,
//! one `read` per readiness event (everything available, at most `MAX_READ`), one `write`
//! per batch straight away; write interest is registered only while the kernel's buffer is
//! full. About two syscalls per op at pipeline 1. Waits use `epoll_pwait2` (nanosecond
//! timeouts) where the kernel has it.
//!
//! It moves bytes between sockets and their buffers and reports what happened as a
//! [`Completion`]; what that means for the requests is the worker's business.
//!
//! A TLS socket takes the same path with rustls in between: requests are sealed into
//! records and written until the kernel's buffer is full; a read pulls what the socket
//! has and opens every complete record, leaving no plaintext behind in rustls (a level-
//! triggered epoll would not report it again).

use super::conn::{Completion, Sock, MAX_READ};
use super::stream::Stream;
use super::tlsbuf::{bad_record, completion, feed, take_plaintext, End};
use std::io::ErrorKind;

/// An epoll set over one thread's sockets (tagged with their index) and its event buffer.
pub(super) struct Epoll {
    fd: i32,
    events: Vec<libc::epoll_event>,
    /// `epoll_pwait2` is there (Linux 5.11+); else millisecond timeouts.
    pwait2: bool,
}

impl Epoll {
    pub(super) fn new() -> Self {
        // SAFETY: plain syscall; the fd is closed on drop.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        assert!(fd >= 0, "epoll_create1 failed");
        Epoll {
            fd,
            events: vec![libc::epoll_event { events: 0, u64: 0 }; 256],
            pwait2: true,
        }
    }

    /// Watches socket `si` (newly connected) for input.
    pub(super) fn add(&self, si: usize, s: &Sock) {
        self.ctl(libc::EPOLL_CTL_ADD, si, s.fd, false);
    }

    fn ctl(&self, op: i32, si: usize, fd: i32, out: bool) {
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | if out { libc::EPOLLOUT } else { 0 }) as u32,
            u64: si as u64,
        };
        // SAFETY: both descriptors are open and ours; ev outlives the call.
        unsafe { libc::epoll_ctl(self.fd, op, fd, &mut ev) };
    }

    /// Writes what socket `si` has queued (one `write`, or `writev` when large values are
    /// spliced in from `filler`); asks for write readiness only while the kernel's buffer
    /// is full. `None`: nothing was written, and nothing went wrong.
    pub(super) fn write(&self, si: usize, s: &mut Sock, filler: &[u8]) -> Option<Completion> {
        if matches!(s.stream, Some(Stream::Tls(_))) {
            return self.write_tls(si, s, filler);
        }
        if s.wpos >= s.wbuf.len() {
            return None;
        }
        let n = if s.wbuf.is_contiguous() {
            let rest = &s.wbuf.inline()[s.wpos..];
            // SAFETY: the slice is valid for its length; fd is an open socket we own.
            unsafe { libc::write(s.fd, rest.as_ptr() as *const libc::c_void, rest.len()) }
        } else {
            s.wbuf.iovecs(s.wpos, filler, &mut s.iov);
            // SAFETY: the iovecs point into wbuf and the filler, both alive and unchanged here.
            unsafe { libc::writev(s.fd, s.iov.as_ptr(), s.iov.len() as i32) }
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::WouldBlock
                && e.kind() != std::io::ErrorKind::Interrupted
            {
                return Some(Completion::WriteFailed(e));
            }
        } else {
            s.wpos += n as usize;
        }
        if s.wpos >= s.wbuf.len() {
            s.wbuf.clear();
            s.wpos = 0;
            if s.want_out {
                s.want_out = false;
                self.ctl(libc::EPOLL_CTL_MOD, si, s.fd, false);
            }
        } else if !s.want_out {
            s.want_out = true;
            self.ctl(libc::EPOLL_CTL_MOD, si, s.fd, true);
        }
        (n > 0).then_some(Completion::Wrote(n as usize))
    }

    /// Reads what socket `s` has (at most `MAX_READ`) into its read buffer.
    /// `None`: nothing there yet (or a signal interrupted the read).
    pub(super) fn read(&self, s: &mut Sock) -> Option<Completion> {
        if s.fd < 0 {
            return None;
        }
        if matches!(s.stream, Some(Stream::Tls(_))) {
            return read_tls(s);
        }
        let spare = s.read_room();
        let len = s.rbuf.len();
        let mut discarded = 0;
        if s.skip > 0 {
            // A large unverified value: discarded unread (MSG_TRUNC on TCP), at most a read's
            // worth at a time as for reads (MAX_READ); once it is gone, what follows is read.
            let want = s.read_len(spare);
            // SAFETY: with MSG_TRUNC a TCP socket copies nothing out; no buffer is given, so
            // a socket that would write gets EFAULT, never memory of ours.
            let n = unsafe { libc::recv(s.fd, std::ptr::null_mut(), want, libc::MSG_TRUNC) };
            if n <= 0 {
                return read_failed(n);
            }
            discarded = n as usize;
            s.skip -= discarded.min(s.skip);
            if s.skip > 0 || discarded < want {
                return Some(Completion::Read(discarded));
            }
        }
        // SAFETY: reading into the vector's spare capacity; set_len only covers bytes read.
        let n = unsafe {
            libc::read(
                s.fd,
                s.rbuf.as_mut_ptr().add(len) as *mut libc::c_void,
                s.read_len(spare),
            )
        };
        if n <= 0 {
            // A close or an error right after a discard is seen on the next readiness event.
            return if discarded > 0 {
                Some(Completion::Read(discarded))
            } else {
                read_failed(n)
            };
        }
        // SAFETY: the kernel initialised n bytes after len.
        unsafe { s.rbuf.set_len(len + n as usize) };
        Some(Completion::Read(discarded + n as usize))
    }

    /// [`write`](Self::write) on a TLS socket: the queued bytes go into rustls as records,
    /// and the records to the socket; write interest stays while either is left over.
    fn write_tls(&self, si: usize, s: &mut Sock, filler: &[u8]) -> Option<Completion> {
        let Some(Stream::Tls(t)) = s.stream.as_mut() else {
            return None;
        };
        let mut took = 0;
        let mut blocked = false;
        loop {
            // Records first: rustls holds a bounded amount of unsent data.
            while t.conn.wants_write() {
                match t.conn.write_tls(&mut t.sock) {
                    Ok(_) => {}
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        blocked = true;
                        break;
                    }
                    Err(e) => return Some(Completion::WriteFailed(e)),
                }
            }
            if blocked || s.wpos >= s.wbuf.len() {
                break;
            }
            let accepted = match feed(&mut t.conn, &s.wbuf, s.wpos, filler) {
                Ok(n) => n,
                Err(e) => return Some(Completion::WriteFailed(e)),
            };
            s.wpos += accepted;
            took += accepted;
            if accepted == 0 && !t.conn.wants_write() {
                break;
            }
        }
        if s.wpos >= s.wbuf.len() {
            s.wbuf.clear();
            s.wpos = 0;
        }
        let out = s.wpos < s.wbuf.len() || t.conn.wants_write();
        if out != s.want_out {
            s.want_out = out;
            self.ctl(libc::EPOLL_CTL_MOD, si, s.fd, out);
        }
        (took > 0).then_some(Completion::Wrote(took))
    }

    /// The `k`-th socket found ready by the last [`wait`](Self::wait): its index, whether
    /// it is writable, whether it is readable (or broken).
    pub(super) fn ready(&self, k: usize) -> (usize, bool, bool) {
        let ev = &self.events[k];
        let flags = ev.events;
        (
            ev.u64 as usize,
            flags & libc::EPOLLOUT as u32 != 0,
            flags & (libc::EPOLLIN | libc::EPOLLERR | libc::EPOLLHUP) as u32 != 0,
        )
    }

    /// Waits up to `wait_ns` for readiness; returns how many sockets are ready. An EINTR (a
    /// signal, e.g. Ctrl-C for Python) counts as none: the loop looks at its clock and its
    /// sockets, then waits again.
    pub(super) fn wait(&mut self, wait_ns: u64) -> usize {
        let n = if self.pwait2 {
            let ts = libc::timespec {
                tv_sec: (wait_ns / 1_000_000_000) as i64,
                tv_nsec: (wait_ns % 1_000_000_000) as i64,
            };
            // SAFETY: epoll_pwait2(epfd, events, maxevents, timeout, sigmask=NULL, sigsetsize=0).
            let r = unsafe {
                libc::syscall(
                    libc::SYS_epoll_pwait2,
                    self.fd,
                    self.events.as_mut_ptr(),
                    self.events.len() as i32,
                    &ts as *const libc::timespec,
                    std::ptr::null::<libc::c_void>(),
                    0usize,
                )
            };
            if r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
                // Kernels before 5.11: fall back to millisecond timeouts.
                self.pwait2 = false;
                0
            } else {
                r as i64
            }
        } else {
            let ms = wait_ns.div_ceil(1_000_000) as i32;
            // SAFETY: events is a valid buffer of its length.
            unsafe {
                libc::epoll_wait(
                    self.fd,
                    self.events.as_mut_ptr(),
                    self.events.len() as i32,
                    ms,
                ) as i64
            }
        };
        n.max(0) as usize
    }
}

/// What a `read`/`recv` that returned `n` ≤ 0 means: the server closed (0), nothing there
/// yet or a signal (`None`), or a failure.
fn read_failed(n: isize) -> Option<Completion> {
    if n == 0 {
        return Some(Completion::Closed);
    }
    let e = std::io::Error::last_os_error();
    if e.kind() != ErrorKind::WouldBlock && e.kind() != ErrorKind::Interrupted {
        return Some(Completion::ReadFailed(e));
    }
    None
}

/// The socket as rustls reads it, noting a read that did not fill the room it was given:
/// the kernel had no more, so a further read would only say EAGAIN (data that comes after
/// makes the socket readable again; the registration is level-triggered).
struct ShortReadSeen<'a> {
    sock: &'a mut std::net::TcpStream,
    short: bool,
}

impl std::io::Read for ShortReadSeen<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.sock.read(buf)?;
        self.short = n < buf.len();
        Ok(n)
    }
}

/// [`Epoll::read`] on a TLS socket: reads records (up to about `MAX_READ` of plaintext)
/// and opens them into the read buffer. `None`: no whole record arrived.
fn read_tls(s: &mut Sock) -> Option<Completion> {
    s.read_room(); // drops the bytes already parsed
    let start = s.rbuf.len();
    let Some(Stream::Tls(t)) = s.stream.as_mut() else {
        return None;
    };
    // rbuf[start..] is the plaintext this read opened.
    let mut drained = false;
    let end = loop {
        let end = take_plaintext(&mut t.conn, &mut s.rbuf);
        if end.is_some() || s.rbuf.len() - start >= MAX_READ || drained {
            break end;
        }
        let mut socket = ShortReadSeen {
            sock: &mut t.sock,
            short: false,
        };
        let got = t.conn.read_tls(&mut socket);
        drained = socket.short;
        match got {
            Ok(0) => break Some(End::Closed),
            Ok(_) => {
                if let Err(e) = t.conn.process_new_packets() {
                    let _ = t.conn.write_tls(&mut t.sock); // the alert, if it fits
                    break Some(bad_record(e));
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => break None,
            Err(e) => break Some(End::Failed(e)),
        }
    };
    if !matches!(end, Some(End::Failed(_))) && t.conn.wants_write() {
        let _ = t.conn.write_tls(&mut t.sock); // e.g. a key update's answer; the next write sends the rest
    }
    // A close after the last reply is seen on the next readiness event (the socket stays readable).
    completion(end, s.rbuf.len() - start)
}

impl Drop for Epoll {
    fn drop(&mut self) {
        // SAFETY: closing our own epoll descriptor.
        unsafe { libc::close(self.fd) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::conn::test_support::connected;
    use std::io::{Read, Write};

    #[test]
    fn writes_reads_and_reports_a_close() {
        let mut ep = Epoll::new();
        let (mut s, mut peer) = connected();
        ep.add(0, &s);
        assert!(ep.write(0, &mut s, b"").is_none(), "nothing queued");
        s.wbuf.extend_from_slice(b"*1\r\n$4\r\nPING\r\n");
        assert!(matches!(
            ep.write(0, &mut s, b""),
            Some(Completion::Wrote(14))
        ));
        assert!(s.wbuf.is_empty() && s.wpos == 0 && !s.want_out);
        let mut got = [0u8; 14];
        peer.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"*1\r\n$4\r\nPING\r\n");

        assert!(ep.read(&mut s).is_none(), "nothing there yet");
        peer.write_all(b"+PONG\r\n").unwrap();
        assert_eq!(ep.wait(1_000_000_000), 1);
        assert_eq!(ep.ready(0), (0, false, true));
        assert!(matches!(ep.read(&mut s), Some(Completion::Read(7))));
        assert_eq!(s.rbuf, b"+PONG\r\n");

        drop(peer);
        assert_eq!(ep.wait(1_000_000_000), 1);
        assert!(matches!(ep.read(&mut s), Some(Completion::Closed)));
    }

    #[test]
    fn discards_a_value_unread_then_reads_what_follows() {
        let mut ep = Epoll::new();
        let (mut s, mut peer) = connected();
        ep.add(0, &s);
        assert!(s.may_discard());
        s.skip = 100_000;
        let mut sent = vec![b'v'; 100_000];
        sent.extend_from_slice(b"\r\n+OK\r\n");
        peer.write_all(&sent).unwrap();
        let mut took = 0;
        while took < sent.len() {
            assert_eq!(ep.wait(1_000_000_000), 1);
            let Some(Completion::Read(n)) = ep.read(&mut s) else {
                continue;
            };
            assert!(n <= 2 * MAX_READ);
            took += n;
        }
        assert_eq!((took, s.skip), (sent.len(), 0));
        assert_eq!(
            s.rbuf, b"\r\n+OK\r\n",
            "only what follows the value is copied"
        );
    }

    #[test]
    fn a_wait_with_nothing_ready_times_out() {
        let mut ep = Epoll::new();
        let (s, _peer) = connected();
        ep.add(0, &s);
        assert_eq!(ep.wait(1_000_000), 0);
    }
}
