//! One logical client's connections: per-socket state (buffers, the requests in flight,
//! the I/O backends' flags) and the blocking connect + set-up handshake.

use super::stream::Stream;
use crate::arrivals::Arrivals;
use crate::config::{Plan, ServerAddr};
use crate::keyspace::KeyPicker;
use crate::outbuf::OutBuf;
use crate::proto::{self, printable, Kind, Outcome, Parse, ValueHead};
use crate::replay::Script;
use rustls::pki_types::ServerName;
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;

/// A request queued or sent on a socket, waiting for its reply.
#[derive(Clone, Copy)]
pub(super) struct Pending {
    /// Index of the op in the plan's mix, or `INTERNAL` (prefill).
    pub(super) op: u16,
    pub(super) kind: Kind,
    /// Whether it counts in the results (due in the timed phase).
    pub(super) timed: bool,
    /// When it was due (open loop) or sent (closed loop), ns on the run's clock.
    pub(super) intended: u64,
    /// When it was written.
    pub(super) sent: u64,
    /// Payload bytes (keys + values) it carries.
    pub(super) bytes_out: u32,
    /// Its (first) key: a hit's value is checked against it (`P_VERIFY`), and a redirected
    /// request is sent again with it and its value size. `P_*` flags.
    pub(super) key: u64,
    pub(super) size: u32,
    pub(super) flags: u8,
    /// How many times it was redirected (at most `MAX_HOPS` before it counts as an error).
    pub(super) hops: u8,
}

/// Redirects one request may follow, as redis-py allows about as many: nodes that disagree
/// for longer (a slot ping-ponged between two maps) must cost an error, not a loop.
pub(super) const MAX_HOPS: u8 = 5;

/// A request sent again after a redirect: its times are the first send's.
pub(super) const P_RESENT: u8 = 1;
/// `ASKING` before a request sent to a slot's importing node: its reply is not an op's.
pub(super) const P_ASKING: u8 = 2;
/// A prefill counter (`SET n:i 0`), not a value.
pub(super) const P_COUNTER: u8 = 4;
/// A hit must hold the contract value of `key` (the `verify_fraction` drawn it).
pub(super) const P_VERIFY: u8 = 8;

/// One connection of a client to one server: its buffers, the requests in flight on it,
/// and what each I/O backend keeps per socket.
pub(super) struct Sock {
    pub(super) stream: Option<Stream>,
    pub(super) fd: i32,
    pub(super) server: usize,
    pub(super) client: usize,
    pub(super) wbuf: OutBuf,
    pub(super) wpos: usize,
    pub(super) rbuf: Vec<u8>,
    pub(super) rpos: usize,
    /// `rbuf.len()` must reach this before parsing again (the parser said so).
    pub(super) need: usize,
    pub(super) inflight: VecDeque<Pending>,
    /// Bytes of the front reply's value still to be discarded from the socket unread (an
    /// unverified GET of a large value: only its length counts), and that reply's head once
    /// its value is being discarded: what must follow the value, and its length. The parsed
    /// head and the value's bytes already read are dropped from `rbuf` when this starts.
    pub(super) skip: usize,
    pub(super) skipping: Option<ValueHead>,
    /// The last value read on this socket was discarded: the next read takes at most
    /// `HEAD_READ` (a reply's head), so that a large value is copied as little as possible.
    pub(super) head_first: bool,
    /// The head of this socket's last whole hit: the plain-GET short way checks the next
    /// reply against it first (`resp::whole_hit_hinted`).
    pub(super) hit: crate::proto::resp::HitHint,
    /// Requests at the back of `inflight` not written yet (their `sent` is stamped on write).
    pub(super) unstamped: usize,
    /// Closed-loop Redis Cluster: requests queued while this socket still awaits
    /// replies, written as one batch (at most a pipeline) once those have come.
    /// Refilled a few at a time on every node each time one node answered, a cluster
    /// client's sockets carried small batches, and each node paid a read per few requests
    /// (redis-benchmark --cluster and memtier_benchmark write a connection's pipeline
    /// whole). The last `held_ops` of `inflight` are these; they are also `unstamped`.
    pub(super) held: OutBuf,
    pub(super) held_ops: usize,
    pub(super) want_out: bool,
    pub(super) retry_at: u64,
    /// The iovecs of the last gathered write (`writev`, or io_uring's SENDMSG: then with
    /// its header, both untouched until it completes) when large values are spliced in.
    pub(super) iov: Vec<libc::iovec>,
    pub(super) msg: Box<libc::msghdr>,
    // io_uring only: the buffer a SEND in flight reads (never touched until it completes),
    // the in-flight flags, and a closed connection whose operations have not completed yet.
    pub(super) sending: OutBuf,
    pub(super) spos: usize,
    /// TLS on io_uring (`tlsbuf.rs`): the records a RECV read, not opened yet, and the
    /// plaintext sealed into `sending`.
    pub(super) tls_in: Vec<u8>,
    pub(super) tls_plain: usize,
    pub(super) send_busy: bool,
    pub(super) recv_busy: bool,
    /// The RECV in flight discards (`MSG_TRUNC`) instead of reading.
    pub(super) recv_discards: bool,
    pub(super) dirty: bool,
    /// io_uring: `fd` is in the ring's table of registered sockets, at slot = this
    /// socket's index (`Uring::register`).
    pub(super) fixed: bool,
    pub(super) zombie: Option<Stream>,
}

/// What an I/O backend did on one socket, for the worker to act on.
pub(super) enum Completion {
    /// This many bytes arrived at the end of the socket's read buffer.
    Read(usize),
    /// This many queued bytes left.
    Wrote(usize),
    /// The server closed the connection.
    Closed,
    ReadFailed(std::io::Error),
    WriteFailed(std::io::Error),
}

/// Most bytes taken from a socket by one read: a little less than one 64 KiB loopback (or
/// GRO) segment. Reading whole segments at once (100 KB GETs from Redis) often left the last
/// reference to the server's socket pages with the client, so they were freed on the
/// client's CPU and the server copied its next replies into pages cold in its cache (page
/// frees on the client's side per GET: 0.35–0.5 unbounded, 0.16–0.23 at 48–56 KiB). 56 KiB
/// still takes a 100 KB reply in two reads; 48 KiB took three, costing memcached runs ~25 %
/// more client CPU per op (docs/engine.md).
pub(super) const MAX_READ: usize = 56 * 1024;

/// The least of a value still to come that is discarded from the socket unread rather than
/// copied in (`recv` with `MSG_TRUNC`, TCP only), when the request is not verified. One
/// more syscall per value (the discard, then the value's tail) must buy a large copy.
pub(super) const SKIP_MIN: usize = 16 * 1024;

/// The first read after a discarded value: enough for the next reply's head (and a small
/// reply whole), so that a large value that follows is mostly discarded, not copied.
pub(super) const HEAD_READ: usize = 4 * 1024;

/// Most bytes discarded by one `recv(MSG_TRUNC)`.
pub(super) const DISCARD_MAX: usize = 2 * MAX_READ;

impl Sock {
    /// Requests written and awaiting replies.
    #[inline]
    pub(super) fn awaiting(&self) -> usize {
        self.inflight.len() - self.unstamped
    }

    /// Moves the held requests behind what is queued to write (they go with the next flush).
    #[inline]
    pub(super) fn release_held(&mut self) {
        if self.held_ops > 0 {
            self.wbuf.append(&mut self.held);
            self.held_ops = 0;
        }
    }

    /// A socket of client `client` to server `server`, not connected yet.
    pub(super) fn new(server: usize, client: usize, pipeline: usize) -> Self {
        Sock {
            stream: None,
            fd: -1,
            server,
            client,
            wbuf: OutBuf::with_capacity(16 * 1024),
            wpos: 0,
            rbuf: Vec::with_capacity(64 * 1024),
            rpos: 0,
            need: 0,
            inflight: VecDeque::with_capacity(pipeline.max(16)),
            skip: 0,
            skipping: None,
            head_first: false,
            hit: Default::default(),
            unstamped: 0,
            held: OutBuf::default(),
            held_ops: 0,
            want_out: false,
            retry_at: 0,
            sending: OutBuf::with_capacity(16 * 1024),
            spos: 0,
            tls_in: Vec::new(),
            tls_plain: 0,
            iov: Vec::new(),
            // SAFETY: an all-zero msghdr is a valid empty one.
            msg: Box::new(unsafe { std::mem::zeroed() }),
            send_busy: false,
            recv_busy: false,
            recv_discards: false,
            dirty: false,
            fixed: false,
            zombie: None,
        }
    }

    /// Whether bytes may be discarded from this socket unread: TCP only (TLS records are
    /// sealed whole, and `MSG_TRUNC` on a Unix stream socket copies like a plain read).
    #[inline]
    pub(super) fn may_discard(&self) -> bool {
        matches!(self.stream, Some(Stream::Tcp(_)))
    }

    /// How much the next read (`spare` bytes of room) or discard may take.
    #[inline]
    pub(super) fn read_len(&self, spare: usize) -> usize {
        if self.skip > 0 {
            self.skip.min(DISCARD_MAX)
        } else if self.head_first {
            spare.min(HEAD_READ)
        } else {
            spare
        }
    }

    /// Makes room at the end of `rbuf` for the next read; returns how much it may take.
    pub(super) fn read_room(&mut self) -> usize {
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

/// A logical client: one socket per server (as a memcached pool client holds), at most
/// `pipeline` requests in flight, its own key picker and, in open loop, its schedule.
pub(super) struct Client {
    /// Its first socket: socket `first_sock + k` is its connection to server `k`.
    pub(super) first_sock: usize,
    pub(super) inflight: usize,
    pub(super) next_intended: u64,
    pub(super) arrivals: Arrivals,
    pub(super) picker: KeyPicker,
    pub(super) prefill_next: u64,
    /// Replay: this client's script, at the next step to send (None when ops are drawn).
    pub(super) script: Option<Box<Script>>,
}

/// One blocking read, retried when a signal interrupts it: Python installs its handlers
/// without SA_RESTART, and a read on a socket with a timeout is never restarted anyway.
/// (`connect_timeout` and `write_all` retry on EINTR themselves.)
pub(super) fn read_some(s: &mut Stream, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match s.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

/// Opens one connection and sends the protocol's set-up handshake (`proto::handshake`:
/// HELLO/AUTH/SELECT/PING, `version` or `mn`), all blocking, then makes it non-blocking.
/// A cluster replica read from (`read_from_replicas`) is also sent `READONLY`, without
/// which it would answer every read with `MOVED` to its primary.
pub(super) fn connect(plan: &Plan, server: usize, timeout: Duration) -> Result<Stream, String> {
    let tls = plan.tls.as_ref().map(|c| (c, &plan.tls_names[server]));
    let replica = plan.read_from_replicas && server >= plan.primaries;
    connect_with(
        plan,
        &plan.servers[server],
        &plan.server_names[server],
        tls,
        timeout,
        replica,
    )
}

/// [`connect`] to an address the plan does not list (a primary the Sentinels named).
pub(super) fn connect_to(
    plan: &Plan,
    addr: &ServerAddr,
    name: &str,
    tls: Option<(&Arc<rustls::ClientConfig>, &ServerName<'static>)>,
    timeout: Duration,
) -> Result<Stream, String> {
    connect_with(plan, addr, name, tls, timeout, false)
}

fn connect_with(
    plan: &Plan,
    addr: &ServerAddr,
    name: &str,
    tls: Option<(&Arc<rustls::ClientConfig>, &ServerName<'static>)>,
    timeout: Duration,
    replica: bool,
) -> Result<Stream, String> {
    let mut s = Stream::connect(addr, timeout, tls)
        .map_err(|e| format!("cannot connect to {name}: {e}"))?;
    s.set_timeouts(Some(timeout)).map_err(|e| e.to_string())?;
    let mut hs = proto::handshake(
        plan.protocol,
        plan.username.as_deref(),
        plan.password.as_deref(),
        plan.db,
    );
    if replica {
        hs.request.extend_from_slice(b"*1\r\n$8\r\nREADONLY\r\n");
        hs.steps.push("READONLY (reads from a replica)");
    }
    s.write_all(&hs.request)
        .map_err(|e| format!("{name}: cannot send: {e}"))?;
    let mut buf = Vec::with_capacity(4096);
    let mut pos = 0;
    for what in &hs.steps {
        loop {
            match proto::parse(plan.protocol, &buf[pos..], Kind::Setup, &plan.limits) {
                Parse::Done(r) => {
                    if r.outcome == Outcome::ServerError || r.outcome == Outcome::ProtocolError {
                        let msg = r
                            .message
                            .map(|m| printable(&buf[pos + m.start..pos + m.end]))
                            .unwrap_or_default();
                        let hint = if *what == proto::memcache_binary::SASL_STEP {
                            "memcached refused the credentials"
                        } else if msg.contains("NOAUTH")
                            || msg.contains("WRONGPASS")
                            || msg.contains("AUTH")
                            || msg.contains("Auth failure")
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

    #[test]
    fn connects_and_handshakes_over_a_unix_socket() {
        let dir = std::env::temp_dir().join(format!("cachemark-conn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("redis.sock");
        let _ = std::fs::remove_file(&path);
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 256];
            let _ = s.read(&mut buf);
            s.write_all(b"+PONG\r\n").unwrap();
            s
        });
        let json = format!(
            r#"{{"protocol":"resp2","servers":["unix:{}"]}}"#,
            path.display()
        );
        let plan = Config::from_json(&json).unwrap().plan().unwrap();
        let result = connect(&plan, 0, Duration::from_secs(5));
        let _conn = server.join().unwrap();
        assert!(matches!(result, Ok(Stream::Unix(_))));
        let missing = format!(
            r#"{{"protocol":"resp2","servers":["unix:{}x"]}}"#,
            path.display()
        );
        let plan = Config::from_json(&missing).unwrap().plan().unwrap();
        let err = connect(&plan, 0, Duration::from_secs(1)).err().unwrap();
        assert!(err.starts_with("cannot connect to unix:"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// For the reactors' tests: a socket connected to a peer on loopback, as the worker attaches one.
#[cfg(test)]
pub(crate) mod test_support {
    use super::{Sock, Stream};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

    pub(crate) fn connected() -> (Sock, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        stream.set_nonblocking(true).unwrap();
        let (peer, _) = listener.accept().unwrap();
        let mut s = Sock::new(0, 0, 1);
        s.fd = stream.as_raw_fd();
        s.stream = Some(Stream::Tcp(stream));
        (s, peer)
    }
}
