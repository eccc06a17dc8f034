//! The io_uring backend (the default): one `io_uring_enter` per round submits a SEND for
//! every socket with queued requests (and a RECV where one is to be armed) and waits for
//! completions, so syscalls per op fall below one as load grows. Where the kernel can (6.0+)
//! and the run's values are small, a socket's RECV is multishot: armed once per connection,
//! it completes each time data arrives, into a buffer the kernel takes from the ring's pool of
//! provided buffers, and the buffer goes back as soon as its bytes were moved on. Else a
//! single-shot RECV into the socket's own read buffer is armed again after each completion.
//! Buffers the kernel may touch are never moved while an operation is in flight
//! (double-buffered sends; the read buffer is compacted only between single-shot RECVs; a
//! broken socket is closed only once its operations have completed).
//!
//! A round hands back the kernel's completions; [`Uring::complete`] turns each into the
//! socket's new buffer state and a [`Completion`], which the worker then acts on.

use super::conn::{Completion, Sock, MAX_READ};
use super::stream::Stream;
use super::tlsbuf;
use std::sync::atomic::{AtomicU16, Ordering};

/// One thread's ring, the sockets with data to send, and the last round's completions.
pub(super) struct Uring {
    // Dropped first: the ring (and any operation still in it) goes before the buffers below.
    ring: io_uring::IoUring,
    /// The buffers multishot RECVs fill (`None`: single-shot RECVs into each socket's own
    /// buffer, as on kernels before 6.0 or where the buffer ring could not be registered).
    pool: Option<Pool>,
    /// `RECVSEND_POLL_FIRST` where the kernel knows it, else 0.
    recv_ioprio: u16,
    /// `MSG_WAITALL` on SENDs where the ring retries a short send itself (5.19+, as for
    /// `recv_ioprio`), else 0: a SEND then completes once all of it is sent, and never asks
    /// the loop for another round to send the rest.
    send_flags: i32,
    /// Slots in the ring's table of registered sockets (0: none, an older kernel). A
    /// socket named by its slot (`Sock::fixed`) spares the kernel a file-table lookup
    /// and reference count on every SEND and RECV (~1 % of the client's CPU per op).
    slots: u32,
    /// Open sockets with no RECV pending (newly connected, or their last RECV completed):
    /// a round arms those alone, not every socket of the thread (a cluster client keeps
    /// room for nodes that may join, mostly closed).
    idle: Vec<usize>,
    dirty: Vec<usize>,
    /// The last round's completions: user data, result, flags.
    pub(super) cqes: Vec<(u64, i32, u32)>,
}

const TAG_RECV: u64 = 1;
const TAG_SEND: u64 = 2;
/// A multishot RECV: armed once per connection, it completes every time data arrives, into
/// a buffer of the pool the kernel picks, until a completion comes without `F_MORE`.
const TAG_RECV_MULTI: u64 = 3;
/// `IORING_RECVSEND_POLL_FIRST` from <linux/io_uring.h> (the io-uring crate keeps its `sys` private).
const RECVSEND_POLL_FIRST: u16 = 1;

impl Uring {
    /// A ring for about `sockets` sockets, or `None` when io_uring cannot be set up here.
    /// `multishot`: receive by multishot RECVs into a pool of buffers where the kernel can
    /// (the run's values are small: [`multishot_for`]).
    pub(super) fn new(sockets: usize, multishot: bool) -> Option<Self> {
        let entries = (2 * sockets + 16).next_power_of_two().max(64);
        let (ring, modern) = new_ring(entries as u32)?;
        let slots = sockets.min(u32::MAX as usize) as u32;
        let slots = match ring.submitter().register_files_sparse(slots) {
            Ok(()) => slots,
            Err(_) => 0,
        };
        // Multishot RECVs need Linux 6.0; the buffer ring 5.19 (a 5.19 kernel refuses the
        // first RECV, and the ring goes back to single-shot ones then: `complete`).
        let pool = if modern && multishot {
            Pool::new(&ring, pool_len(sockets))
        } else {
            None
        };
        Some(Uring {
            ring,
            pool,
            recv_ioprio: if modern { RECVSEND_POLL_FIRST } else { 0 },
            send_flags: if modern { libc::MSG_WAITALL } else { 0 },
            slots,
            idle: Vec::new(),
            dirty: Vec::new(),
            cqes: Vec::new(),
        })
    }

    /// Socket `si` was connected to `fd`, or closed (`fd` -1): puts it in (or takes it out
    /// of) the ring's table. Returns whether operations may name it by its slot. A closed
    /// socket must leave the table, which otherwise keeps it open; operations in flight
    /// keep their own reference until they complete.
    pub(super) fn register(&mut self, si: usize, fd: i32) -> bool {
        if si >= self.slots as usize {
            return false;
        }
        let done = self
            .ring
            .submitter()
            .register_files_update(si as u32, &[fd]);
        fd >= 0 && done.is_ok()
    }

    /// Socket `si` was connected: arm a RECV on it in the next round.
    #[inline]
    pub(super) fn arm(&mut self, si: usize) {
        self.idle.push(si);
    }

    /// Socket `si` has requests queued: send them in the next round.
    #[inline]
    pub(super) fn queue(&mut self, si: usize, s: &mut Sock) {
        if !s.dirty && !s.wbuf.is_empty() {
            s.dirty = true;
            self.dirty.push(si);
        }
    }

    /// One round: (re)arm a RECV on every live socket and a SEND on every socket with
    /// queued requests, submit them and wait (at most `wait_ns`) for completions in one
    /// `io_uring_enter`, then collect the completions into `self.cqes`. `Err`: the enter
    /// failed for another reason than a timeout or a signal.
    pub(super) fn round(
        &mut self,
        socks: &mut [Sock],
        filler: &[u8],
        wait_ns: u64,
    ) -> std::io::Result<()> {
        self.arm_recvs(socks);
        let (sends, unsealed) = self.arm_sends(socks, filler);
        self.enter(wait_ns, sends, &unsealed)
    }

    /// A RECV on every socket of `idle` that is still open and has none pending: into its
    /// read buffer's spare room, into its buffer of records (TLS), or nowhere for a value
    /// being discarded.
    #[inline]
    fn arm_recvs(&mut self, socks: &mut [Sock]) {
        for k in 0..self.idle.len() {
            let si = self.idle[k];
            let s = &mut socks[si];
            if s.fd < 0 || s.recv_busy || s.zombie.is_some() {
                continue; // closed since, listed twice, or its last connection's ops pending
            }
            if self.pool.is_some() {
                // Armed once: it stays armed until a completion without F_MORE (the
                // connection's end, or no buffer free: then it is armed again here).
                let sqe = if s.fixed {
                    io_uring::opcode::RecvMulti::new(io_uring::types::Fixed(si as u32), BGID)
                        .build()
                } else {
                    io_uring::opcode::RecvMulti::new(io_uring::types::Fd(s.fd), BGID).build()
                }
                .user_data(((si as u64) << 8) | TAG_RECV_MULTI);
                push(&mut self.ring, &sqe);
                s.recv_discards = false;
                s.recv_busy = true;
                continue;
            }
            if matches!(s.stream, Some(Stream::Tls(_))) {
                // Records, opened when the RECV completes (`tlsbuf::open`).
                s.tls_in.reserve(MAX_READ);
                s.recv_discards = false;
                // SAFETY: tls_in is empty and stays allocated and untouched until this RECV
                // completes (it is only read and cleared once it has).
                let buf = s.tls_in.as_mut_ptr();
                let sqe = recv(s, si, buf, MAX_READ as u32)
                    .ioprio(self.recv_ioprio)
                    .build()
                    .user_data(((si as u64) << 8) | TAG_RECV);
                push(&mut self.ring, &sqe);
                s.recv_busy = true;
                continue;
            }
            let spare = s.read_room();
            let len = s.rbuf.len();
            // A large unverified value is discarded unread (MSG_TRUNC on TCP), at most a read's
            // worth at a time, as the page recycling behind MAX_READ applies alike.
            s.recv_discards = s.skip > 0;
            let want = s.read_len(spare);
            let flags = if s.recv_discards { libc::MSG_TRUNC } else { 0 };
            // SAFETY: the spare capacity stays allocated and untouched until this RECV
            // completes (rbuf is only compacted or grown while no RECV is in flight). A
            // discard gets no buffer: TCP copies nothing out with MSG_TRUNC.
            let buf = if s.recv_discards {
                std::ptr::null_mut()
            } else {
                unsafe { s.rbuf.as_mut_ptr().add(len) }
            };
            let sqe = recv(s, si, buf, want as u32)
                .flags(flags)
                // IORING_RECVSEND_POLL_FIRST (Linux 5.19+; not set on older kernels): the RECV is
                // armed right after its replies were consumed and before its next requests are
                // sent, so an immediate attempt would find nothing and only cost a socket lock.
                // Arm the poll first; the kernel receives when data arrives. Measured: ~5 % less
                // client CPU per op at pipeline 1 (and no difference in the middle of a reply).
                .ioprio(self.recv_ioprio)
                .build()
                .user_data(((si as u64) << 8) | TAG_RECV);
            push(&mut self.ring, &sqe);
            s.recv_busy = true;
        }
        self.idle.clear();
    }

    /// A SEND (or SENDMSG, gathering a large value from the filler) on every socket of
    /// `dirty` with requests queued and no SEND pending; TLS sockets' requests are sealed
    /// into records first. Returns how many SENDs it armed and the completions of the sockets
    /// whose sealing failed.
    #[inline]
    fn arm_sends(&mut self, socks: &mut [Sock], filler: &[u8]) -> (u32, Vec<(u64, i32, u32)>) {
        let mut unsealed = Vec::new();
        let mut sends = 0;
        for k in 0..self.dirty.len() {
            let si = self.dirty[k];
            let s = &mut socks[si];
            s.dirty = false;
            if s.fd < 0 || s.send_busy || s.zombie.is_some() {
                continue;
            }
            if s.spos >= s.sending.len() {
                if matches!(s.stream, Some(Stream::Tls(_))) {
                    if tlsbuf::seal(s, filler).is_err() {
                        // rustls refuses only on a failed session: a failed write, below
                        unsealed.push((((si as u64) << 8) | TAG_SEND, -libc::EPROTO, 0));
                        continue;
                    }
                    if s.sending.is_empty() {
                        continue;
                    }
                } else {
                    if s.wbuf.is_empty() {
                        continue;
                    }
                    s.sending.clear();
                    std::mem::swap(&mut s.sending, &mut s.wbuf);
                    s.spos = 0;
                }
            }
            // SAFETY (both): `sending`, `iov` and `msg` are neither written nor reallocated
            // until this SEND completes; the filler lives as long as the plan.
            let sqe = if s.sending.is_contiguous() {
                let rest = &s.sending.inline()[s.spos..];
                let len = rest.len().min(u32::MAX as usize) as u32;
                if s.fixed {
                    io_uring::opcode::Send::new(
                        io_uring::types::Fixed(si as u32),
                        rest.as_ptr(),
                        len,
                    )
                    .flags(self.send_flags)
                    .build()
                } else {
                    io_uring::opcode::Send::new(io_uring::types::Fd(s.fd), rest.as_ptr(), len)
                        .flags(self.send_flags)
                        .build()
                }
            } else {
                s.sending.iovecs(s.spos, filler, &mut s.iov);
                s.msg.msg_iov = s.iov.as_mut_ptr();
                s.msg.msg_iovlen = s.iov.len();
                if s.fixed {
                    io_uring::opcode::SendMsg::new(io_uring::types::Fixed(si as u32), &*s.msg)
                        .flags(self.send_flags as u32)
                        .build()
                } else {
                    io_uring::opcode::SendMsg::new(io_uring::types::Fd(s.fd), &*s.msg)
                        .flags(self.send_flags as u32)
                        .build()
                }
            }
            .user_data(((si as u64) << 8) | TAG_SEND);
            push(&mut self.ring, &sqe);
            s.send_busy = true;
            sends += 1;
        }
        self.dirty.clear();
        (sends, unsealed)
    }

    /// Submits what was armed and waits (at most `wait_ns`) for completions in one
    /// `io_uring_enter`, then collects them, and `unsealed`'s, into `self.cqes`.
    #[inline]
    fn enter(
        &mut self,
        wait_ns: u64,
        sends: u32,
        unsealed: &[(u64, i32, u32)],
    ) -> std::io::Result<()> {
        let ts = io_uring::types::Timespec::new()
            .sec(wait_ns / 1_000_000_000)
            .nsec((wait_ns % 1_000_000_000) as u32);
        // Waiting for more than one completion per enter (min_complete = a share of the armed
        // RECVs, with or without IORING_ENTER min_wait) was measured at pipeline 16 and 1: no
        // CPU saving and lower throughput, so one completion is enough to wake.
        // The SENDs submitted here mostly complete inline, during the submission: waiting for
        // one completion would return at once with them, and the loop would enter again to wait
        // for a reply. Waiting for one more than them makes that one enter per round. Only
        // where a SEND completes whole (`send_flags`): a short one would otherwise wait here,
        // its rest unsent, for another socket's completion or the end of the wait.
        let want = if self.send_flags != 0 {
            (sends as usize + 1).min(self.ring.params().cq_entries() as usize)
        } else {
            1
        };
        let args = io_uring::types::SubmitArgs::new().timespec(&ts);
        // ETIME: the wait ended; EINTR: a signal came (the loop then simply goes round again,
        // and entries not yet submitted stay in the ring); EBUSY: completions to reap first.
        let mut failed = None;
        if let Err(e) = self.ring.submitter().submit_with_args(want, &args) {
            if e.raw_os_error() != Some(libc::ETIME)
                && e.raw_os_error() != Some(libc::EINTR)
                && e.raw_os_error() != Some(libc::EBUSY)
            {
                failed = Some(e);
            }
        }
        self.cqes.clear();
        for cqe in self.ring.completion() {
            self.cqes.push((cqe.user_data(), cqe.result(), cqe.flags()));
        }
        self.cqes.extend_from_slice(unsealed);
        failed.map_or(Ok(()), Err)
    }

    /// What completion `(user_data, result, flags)` of the last round did to its socket: marks
    /// the operation done, takes the bytes read into the read buffer or advances the send
    /// (queueing the rest), and says what happened. `None` for a socket that was closed
    /// meanwhile (its buffers are released once its last operation completed) and for a
    /// RECV a signal or a spurious wake-up ended. A buffer of the pool a multishot RECV
    /// filled goes back to the kernel here, whatever became of the socket.
    pub(super) fn complete(
        &mut self,
        (data, res, flags): (u64, i32, u32),
        socks: &mut [Sock],
    ) -> Option<(usize, Completion)> {
        if data & 0xFF == TAG_RECV_MULTI {
            let bid = io_uring::cqueue::buffer_select(flags);
            let done = self.complete_multi(data, res, flags, bid, socks);
            if let (Some(bid), Some(pool)) = (bid, self.pool.as_mut()) {
                pool.recycle(bid);
            }
            return done;
        }
        let si = (data >> 8) as usize;
        let tag = data & 0xFF;
        let s = &mut socks[si];
        if tag == TAG_RECV {
            s.recv_busy = false;
        } else {
            s.send_busy = false;
        }
        if s.zombie.is_some() || s.fd < 0 {
            self.laid_to_rest(si, s);
            return None;
        }
        if tag == TAG_RECV {
            self.idle.push(si);
        }
        let err = || std::io::Error::from_raw_os_error(-res);
        let done = if tag == TAG_RECV {
            if res > 0 && matches!(s.stream, Some(Stream::Tls(_))) {
                // SAFETY: the kernel wrote `res` bytes into tls_in's capacity.
                unsafe { s.tls_in.set_len(res as usize) };
                let records = std::mem::take(&mut s.tls_in);
                let opened = tlsbuf::open(s, &records);
                s.tls_in = records;
                s.tls_in.clear();
                if let Some(Stream::Tls(t)) = &s.stream {
                    if t.conn.wants_write() && !s.dirty {
                        s.dirty = true; // e.g. a key update's answer
                        self.dirty.push(si);
                    }
                }
                return opened.map(|done| (si, done));
            } else if res > 0 && s.recv_discards {
                s.skip -= (res as usize).min(s.skip);
                Completion::Read(res as usize)
            } else if res > 0 {
                let len = s.rbuf.len();
                // SAFETY: the kernel wrote `res` bytes into the spare capacity.
                unsafe { s.rbuf.set_len(len + res as usize) };
                Completion::Read(res as usize)
            } else if res == 0 {
                Completion::Closed
            } else if res != -libc::EAGAIN && res != -libc::EINTR {
                Completion::ReadFailed(err())
            } else {
                return None;
            }
        } else if res < 0 {
            Completion::WriteFailed(err())
        } else {
            s.spos += res as usize;
            if s.spos < s.sending.len() || !s.wbuf.is_empty() {
                s.dirty = true;
                self.dirty.push(si);
            }
            match s.stream {
                // TLS: the plaintext, once its records are all sent
                Some(Stream::Tls(_)) if s.spos < s.sending.len() => Completion::Wrote(0),
                Some(Stream::Tls(_)) => Completion::Wrote(s.tls_plain),
                _ => Completion::Wrote(res as usize),
            }
        };
        Some((si, done))
    }
}

impl Uring {
    /// A closed socket's operation completed: once none is left, its last connection's
    /// buffers may be reused, and a connection made meanwhile gets its RECV and SEND.
    fn laid_to_rest(&mut self, si: usize, s: &mut Sock) {
        if !s.recv_busy && !s.send_busy {
            s.zombie = None;
            s.sending.clear();
            s.spos = 0;
            if s.fd >= 0 {
                // Connected again meanwhile (a closed-loop client reconnects at once): its
                // first RECV and SEND waited for the old connection's operations.
                self.idle.push(si);
                self.queue(si, s);
            }
        }
    }

    /// A multishot RECV's completion: `res` bytes in the pool's buffer `bid`. They go where a
    /// single-shot RECV puts them (the read buffer, or `tls_in` for TLS), except the part of
    /// a value being discarded (`skip`): that is counted, not copied. The RECV ends with a
    /// completion without `F_MORE` (the connection's end or error, or no buffer was free:
    /// then it is armed again in the next round).
    fn complete_multi(
        &mut self,
        data: u64,
        res: i32,
        flags: u32,
        bid: Option<u16>,
        socks: &mut [Sock],
    ) -> Option<(usize, Completion)> {
        let si = (data >> 8) as usize;
        let s = &mut socks[si];
        let more = io_uring::cqueue::more(flags);
        if !more {
            s.recv_busy = false;
        }
        if s.zombie.is_some() || s.fd < 0 {
            self.laid_to_rest(si, s);
            return None;
        }
        if !more {
            self.idle.push(si);
        }
        if res <= 0 || bid.is_none() {
            return match -res {
                0 => Some((si, Completion::Closed)),
                // no buffer was free: armed again in the next round, once some are back
                libc::ENOBUFS | libc::EAGAIN | libc::EINTR => None,
                // a kernel with buffer rings (5.19) but no multishot RECV (6.0): single-shot
                // RECVs from now on, on every socket of the ring
                libc::EINVAL if !more => {
                    let _ = self.ring.submitter().unregister_buf_ring(BGID);
                    self.pool = None;
                    None
                }
                e => Some((
                    si,
                    Completion::ReadFailed(std::io::Error::from_raw_os_error(e)),
                )),
            };
        }
        let pool = self.pool.as_mut().expect("a multishot RECV has its pool");
        let n = res as usize;
        // SAFETY: the kernel wrote `n` bytes into buffer `bid`, which is ours until recycled.
        let got = unsafe { pool.buf(bid.unwrap_or(0), n) };
        if matches!(s.stream, Some(Stream::Tls(_))) {
            let opened = tlsbuf::open(s, got);
            if let Some(Stream::Tls(t)) = &s.stream {
                if t.conn.wants_write() && !s.dirty {
                    s.dirty = true; // e.g. a key update's answer
                    self.dirty.push(si);
                }
            }
            return opened.map(|done| (si, done));
        }
        if s.skip == 0 && s.rpos == s.rbuf.len() && s.rbuf.capacity() >= POOL_BUF {
            // Nothing left to parse: the buffer becomes the read buffer (no copy, and the
            // bytes are parsed where the kernel put them), the old one goes to the pool.
            // SAFETY: as for `got`; `got` is not used after.
            unsafe { pool.take(bid.unwrap_or(0), n, &mut s.rbuf) };
            s.need = s.need.saturating_sub(s.rpos);
            s.rpos = 0;
            return Some((si, Completion::Read(n)));
        }
        let dropped = s.skip.min(n);
        s.skip -= dropped;
        if dropped < n {
            s.read_room();
            s.rbuf.extend_from_slice(&got[dropped..]);
        }
        Some((si, Completion::Read(n)))
    }

    /// Keeps the pool's memory when operations may still be in flight at the end (the
    /// kernel might yet write into it).
    pub(super) fn leak_pool(&mut self) {
        if let Some(p) = self.pool.as_mut() {
            p.leak = true;
        }
    }
}

/// The largest value a run may have for its ring to receive by multishot RECVs. They pay where
/// replies are small and many (one SQE and one poll arming less per reply batch, and a filled
/// buffer becomes the read buffer whole); a large value fills several buffers, which are copied
/// behind one another into the read buffer, and cannot be discarded unread (`MSG_TRUNC`), as a
/// single-shot RECV can (measured: c=50 P=1 10 KB GETs, client CPU per op ×1.09, user ×1.4).
const MULTISHOT_MAX_VALUE: usize = 4 * 1024;

/// Whether a run whose largest value is `max_value` bytes receives by multishot RECVs.
pub(super) fn multishot_for(max_value: usize) -> bool {
    max_value <= MULTISHOT_MAX_VALUE
}

/// The buffer group of the pool (one per ring).
const BGID: u16 = 0;
/// One buffer of the pool: a small reply batch, or a part of a large value. Under
/// `MAX_READ`, for the page recycling behind it.
const POOL_BUF: usize = 16 * 1024;

/// Buffers in the pool for about `sockets` sockets: each is handed back as soon as its
/// completion is read, so a round needs about one per socket that received; twice that
/// leaves room, and a pool that ran dry only costs a RECV armed again.
fn pool_len(sockets: usize) -> u16 {
    (2 * sockets).next_power_of_two().clamp(64, 1024) as u16
}

/// A ring of provided buffers (`IORING_REGISTER_PBUF_RING`, Linux 5.19+), group `BGID`: the
/// kernel takes a buffer from its head for each multishot RECV completion and names it in
/// the completion's flags; [`Pool::recycle`] puts it back at the tail. The buffers are plain
/// vectors, so that a filled one can become a socket's read buffer, the socket's old one
/// taking its place in the pool ([`Pool::take`]).
struct Pool {
    entries: *mut io_uring::types::BufRingEntry,
    entries_len: usize,
    /// Buffer `bid`; its capacity is at least `POOL_BUF`.
    bufs: Vec<Vec<u8>>,
    mask: u16,
    tail: u16,
    /// Leave the memory allocated on drop (operations may still be in flight).
    leak: bool,
}

impl Pool {
    fn new(ring: &io_uring::IoUring, count: u16) -> Option<Pool> {
        let entries_len = count as usize * std::mem::size_of::<io_uring::types::BufRingEntry>();
        let entries = map(entries_len)?.cast::<io_uring::types::BufRingEntry>();
        let mut pool = Pool {
            entries,
            entries_len,
            bufs: (0..count).map(|_| Vec::with_capacity(POOL_BUF)).collect(),
            mask: count - 1,
            tail: 0,
            leak: false,
        };
        for bid in 0..count {
            pool.recycle(bid);
        }
        // SAFETY: the ring's memory is page-aligned, initialised, and lives as long as the
        // pool, which outlives the ring (`Uring`'s field order; or it is leaked).
        let registered = unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(entries as u64, count, BGID, 0)
        };
        registered.ok().map(|()| pool)
    }

    /// The first `n` bytes of buffer `bid`.
    ///
    /// # Safety
    /// The kernel handed `bid` back with `n` bytes in it, and it was not recycled since.
    unsafe fn buf(&self, bid: u16, n: usize) -> &[u8] {
        let b = &self.bufs[(bid & self.mask) as usize];
        std::slice::from_raw_parts(b.as_ptr(), n.min(b.capacity()))
    }

    /// Buffer `bid`, holding the `n` bytes the kernel put there, becomes `rbuf`; `rbuf`'s
    /// memory (emptied; at least `POOL_BUF` of capacity) takes its place, to be recycled.
    ///
    /// # Safety
    /// As for [`Pool::buf`].
    unsafe fn take(&mut self, bid: u16, n: usize, rbuf: &mut Vec<u8>) {
        debug_assert!(rbuf.capacity() >= POOL_BUF);
        let b = &mut self.bufs[(bid & self.mask) as usize];
        b.set_len(n.min(b.capacity()));
        std::mem::swap(b, rbuf);
        b.clear();
    }

    /// Gives buffer `bid` back to the kernel.
    #[inline]
    fn recycle(&mut self, bid: u16) {
        let bid = bid & self.mask;
        let addr = self.bufs[bid as usize].as_mut_ptr() as u64;
        // SAFETY: the slot at the tail is the application's until the tail moves past it.
        let e = unsafe { &mut *self.entries.add((self.tail & self.mask) as usize) };
        e.set_addr(addr);
        e.set_len(POOL_BUF as u32);
        e.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
        // SAFETY: the tail shares the first entry's last field, which the kernel reads.
        unsafe {
            let tail = io_uring::types::BufRingEntry::tail(self.entries) as *mut u16;
            AtomicU16::from_ptr(tail).store(self.tail, Ordering::Release);
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        if self.leak {
            std::mem::forget(std::mem::take(&mut self.bufs));
            return;
        }
        // SAFETY: mapped by `Pool::new`; the ring is gone, and no operation is left.
        unsafe { libc::munmap(self.entries.cast(), self.entries_len) };
    }
}

/// `len` bytes of fresh, page-aligned anonymous memory.
fn map(len: usize) -> Option<*mut libc::c_void> {
    // SAFETY: a private anonymous mapping; no address hint.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    (p != libc::MAP_FAILED).then_some(p)
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

/// A RECV on socket `si`, named by its slot in the ring's table when it has one.
fn recv(s: &Sock, si: usize, buf: *mut u8, len: u32) -> io_uring::opcode::Recv {
    if s.fixed {
        io_uring::opcode::Recv::new(io_uring::types::Fixed(si as u32), buf, len)
    } else {
        io_uring::opcode::Recv::new(io_uring::types::Fd(s.fd), buf, len)
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::conn::test_support::connected;
    use std::io::{Read, Write};

    /// Runs rounds until one brings a completion; returns it (one at a time here; the reads
    /// of a multishot RECV's several completions in one round as one).
    fn next(u: &mut Uring, socks: &mut [Sock]) -> Completion {
        for _ in 0..100 {
            u.round(socks, b"", 100_000_000).unwrap();
            let mut got = None;
            for cqe in std::mem::take(&mut u.cqes) {
                if let Some((si, done)) = u.complete(cqe, socks) {
                    assert_eq!(si, 0);
                    got = match (got, done) {
                        (None, done) => Some(done),
                        (Some(Completion::Read(a)), Completion::Read(b)) => {
                            Some(Completion::Read(a + b))
                        }
                        _ => panic!("one completion per round here"),
                    };
                }
            }
            if let Some(done) = got {
                return done;
            }
        }
        panic!("no completion");
    }

    /// Socket 0 sends `mn` to `peer` and reads its answer `MN` through the ring.
    fn exchange(u: &mut Uring, socks: &mut [Sock], peer: &mut std::net::TcpStream) {
        socks[0].wbuf.extend_from_slice(b"mn\r\n");
        u.queue(0, &mut socks[0]);
        assert!(matches!(next(u, socks), Completion::Wrote(4)));
        assert!(socks[0].recv_busy, "a RECV stays armed");
        let mut got = [0u8; 4];
        peer.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"mn\r\n");
        peer.write_all(b"MN\r\n").unwrap();
        assert!(matches!(next(u, socks), Completion::Read(4)));
        assert_eq!(socks[0].rbuf, b"MN\r\n");
    }

    #[test]
    fn sends_receives_and_reports_a_close() {
        let Some((mut u, mut socks, mut peer)) = one_socket() else {
            return;
        };
        exchange(&mut u, &mut socks, &mut peer);

        // A value discarded unread (MSG_TRUNC): counted, not copied; what follows is read.
        socks[0].rbuf.clear();
        socks[0].skip = 70_000;
        let mut sent = vec![b'v'; 70_000];
        sent.extend_from_slice(b"\r\nMN\r\n");
        peer.write_all(&sent).unwrap();
        let mut took = 0;
        while took < sent.len() {
            let Completion::Read(n) = next(&mut u, &mut socks) else {
                panic!("a read");
            };
            took += n;
        }
        assert_eq!((took, socks[0].skip), (sent.len(), 0));
        assert_eq!(socks[0].rbuf, b"\r\nMN\r\n");

        drop(peer);
        assert!(matches!(next(&mut u, &mut socks), Completion::Closed));
        // Leave no operation in flight on buffers about to be freed.
        socks[0].zombie = socks[0].stream.take();
        socks[0].fd = -1;
        let s = &socks[0];
        assert!(!s.recv_busy && !s.send_busy);
    }

    #[test]
    fn a_multishot_recv_outlasts_its_pool_and_hands_every_byte_on() {
        let Some((mut u, mut socks, mut peer)) = one_socket() else {
            return;
        };
        let multishot = u.pool.is_some();
        // Far more than the pool holds (64 buffers of 16 KiB), sent at once: the kernel runs
        // out of buffers (ENOBUFS ends the RECV, armed again) and every byte still arrives once.
        let sent: Vec<u8> = (0..4_000_000u32).map(|i| (i % 251) as u8).collect();
        let writer = std::thread::spawn(move || {
            peer.write_all(&sent).unwrap();
            (peer, sent)
        });
        let mut took = 0;
        while took < 4_000_000 {
            let Completion::Read(n) = next(&mut u, &mut socks) else {
                panic!("a read");
            };
            took += n;
            socks[0].rpos = socks[0].rbuf.len();
            let _ = socks[0].read_room();
            socks[0].rpos = 0;
        }
        let (peer, _sent) = writer.join().unwrap();
        assert_eq!(took, 4_000_000);
        if multishot {
            // Read buffers and the pool's swapped places: every buffer the kernel may fill
            // still has room for a whole one, and none holds stale bytes.
            let pool = u.pool.as_ref().expect("still multishot");
            assert!(pool
                .bufs
                .iter()
                .all(|b| b.capacity() >= POOL_BUF && b.is_empty()));
        }
        drop(peer);
        assert!(matches!(next(&mut u, &mut socks), Completion::Closed));
        assert!(!socks[0].recv_busy);
    }

    #[test]
    fn multishot_bytes_arrive_in_order() {
        let Some((mut u, mut socks, mut peer)) = one_socket() else {
            return;
        };
        let sent: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
        let copy = sent.clone();
        let writer = std::thread::spawn(move || {
            for chunk in copy.chunks(7_001) {
                peer.write_all(chunk).unwrap();
            }
            peer
        });
        while socks[0].rbuf.len() < sent.len() {
            assert!(matches!(next(&mut u, &mut socks), Completion::Read(_)));
        }
        assert!(socks[0].rbuf == sent, "the bytes, in order, once");
        drop(writer.join().unwrap());
        assert!(matches!(next(&mut u, &mut socks), Completion::Closed));
    }

    #[test]
    fn a_kernel_without_multishot_recvs_turns_the_ring_to_single_shot_ones() {
        let Some((mut u, mut socks, mut peer)) = one_socket() else {
            return;
        };
        if u.pool.is_none() {
            eprintln!("no buffer rings on this kernel: single-shot RECVs already");
            return;
        }
        // What a 5.19 kernel (buffer rings, no multishot RECV) answers the first RECV_MULTI: EINVAL,
        // without F_MORE. The ring lets its pool go and the socket is armed again, single-shot.
        let refused = (TAG_RECV_MULTI, -libc::EINVAL, 0); // socket 0 (user data: index << 8 | tag)
        assert!(u.complete(refused, &mut socks).is_none());
        assert!(u.pool.is_none() && !socks[0].recv_busy);
        exchange(&mut u, &mut socks, &mut peer);
        drop(peer);
        assert!(matches!(next(&mut u, &mut socks), Completion::Closed));
    }

    #[test]
    fn a_run_of_large_values_receives_by_single_shot_recvs() {
        assert!(multishot_for(100) && multishot_for(4096) && !multishot_for(10_000));
        let Some(mut u) = Uring::new(1, false) else {
            return;
        };
        assert!(u.pool.is_none());
        let (s, mut peer) = connected();
        let mut socks = vec![s];
        u.arm(0);
        exchange(&mut u, &mut socks, &mut peer);
        drop(peer);
        assert!(matches!(next(&mut u, &mut socks), Completion::Closed));
    }

    #[test]
    fn a_round_arms_a_recv_on_the_sockets_listed_only() {
        let Some(mut u) = ring(3) else {
            return;
        };
        let (a, _pa) = connected();
        let (b, _pb) = connected();
        let (c, _pc) = connected();
        let mut socks = vec![a, b, c];
        socks[2].fd = -1; // closed after it was listed
        for si in [0, 0, 2] {
            u.arm(si);
        }
        u.round(&mut socks, b"", 1_000_000).unwrap();
        let busy: Vec<bool> = socks.iter().map(|s| s.recv_busy).collect();
        assert_eq!(busy, [true, false, false]);
        assert!(u.idle.is_empty());
        // Leave no operation in flight on buffers about to be freed: the peer's close ends it.
        drop(_pa);
        for _ in 0..100 {
            u.round(&mut socks, b"", 100_000_000).unwrap();
            for cqe in std::mem::take(&mut u.cqes) {
                u.complete(cqe, &mut socks);
            }
            if !socks[0].recv_busy {
                break;
            }
        }
        assert!(!socks[0].recv_busy);
    }

    #[test]
    fn a_socket_connected_again_waits_for_its_old_connections_recv() {
        let Some((mut u, mut socks, _old_peer)) = one_socket() else {
            return;
        };
        u.round(&mut socks, b"", 1_000_000).unwrap();
        assert!(socks[0].recv_busy);
        // The worker's fail_sock, then at once its reconnect (a closed-loop client's next op).
        // SAFETY: shutting down a socket we own wakes its pending RECV.
        unsafe { libc::shutdown(socks[0].fd, libc::SHUT_RDWR) };
        socks[0].zombie = socks[0].stream.take();
        let (fresh, mut peer) = connected();
        socks[0].fd = fresh.fd;
        socks[0].stream = fresh.stream;
        u.arm(0);
        // The request reaches the new peer, and its reply is read: both waited for the old RECV.
        exchange(&mut u, &mut socks, &mut peer);
        drop(peer);
        assert!(matches!(next(&mut u, &mut socks), Completion::Closed));
    }

    /// A ring for `n` sockets, or `None` (said) where this kernel or sandbox has no io_uring.
    fn ring(n: usize) -> Option<Uring> {
        let u = Uring::new(n, true);
        if u.is_none() {
            eprintln!("io_uring unavailable here: skipped");
        }
        u
    }

    /// A ring for one socket, connected to `peer` and listed for a RECV in the next round, or
    /// `None` (said) where this kernel or sandbox has no io_uring.
    fn one_socket() -> Option<(Uring, Vec<Sock>, std::net::TcpStream)> {
        let mut u = ring(1)?;
        let (s, peer) = connected();
        u.arm(0);
        Some((u, vec![s], peer))
    }

    /// A ring for `n` sockets with a table of registered ones, or `None` (said) where this
    /// kernel has no io_uring or no such table.
    fn ring_with_slots(n: usize) -> Option<Uring> {
        let u = ring(n)?;
        if u.slots == 0 {
            eprintln!("no registered files on this kernel: skipped");
            return None;
        }
        Some(u)
    }

    #[test]
    fn a_registered_socket_is_used_by_its_slot() {
        let Some(mut u) = ring_with_slots(2) else {
            return;
        };
        let (a, _peer_a) = connected();
        let (b, mut peer) = connected();
        let mut socks = vec![a, b];
        u.arm(0);
        u.arm(1);
        // Slot 1 only: a request must reach this socket's own peer through its slot.
        socks[1].fixed = u.register(1, socks[1].fd);
        assert!(socks[1].fixed);
        socks[1].wbuf.extend_from_slice(b"mn\r\n");
        u.queue(1, &mut socks[1]);
        let mut wrote = false;
        for _ in 0..100 {
            u.round(&mut socks, b"", 100_000_000).unwrap();
            for cqe in std::mem::take(&mut u.cqes) {
                if let Some((1, Completion::Wrote(4))) = u.complete(cqe, &mut socks) {
                    wrote = true;
                }
            }
            if wrote {
                break;
            }
        }
        assert!(wrote);
        let mut got = [0u8; 4];
        peer.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"mn\r\n");

        assert!(!u.register(1, -1));
    }

    #[test]
    fn the_table_keeps_a_socket_open_until_it_lets_go() {
        let Some(mut u) = ring_with_slots(1) else {
            return;
        };
        let (mut s, mut peer) = connected();
        assert!(u.register(0, s.fd));
        drop(s.stream.take()); // its fd is closed, the table still holds the socket
        peer.set_read_timeout(Some(std::time::Duration::from_millis(300)))
            .unwrap();
        let mut buf = [0u8; 1];
        let open = peer.read(&mut buf).unwrap_err().kind();
        assert!(matches!(
            open,
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ));
        assert!(!u.register(0, -1));
        assert_eq!(peer.read(&mut buf).unwrap(), 0, "closed once let go");
    }
}
