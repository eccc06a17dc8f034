//! One proxied TCP socket, read with the kernel's arrival timestamp.
//!
//! Why not tokio's `TcpStream`: a segment's delay must count from when it *arrived*,
//! not from when the proxy's thread got round to reading it (that wake-up is tens of
//! microseconds on these VMs, as large as the smallest delays we emulate). With
//! `SO_TIMESTAMPNS` the kernel stamps each received skb, and `recvmsg` hands the stamp
//! back; we read it through an [`AsyncFd`] so a short read can clear readiness without
//! a second, empty `recvmsg` (what tokio's own `poll_read` does internally).
use std::io::{self, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use crate::timer::{now_ns, realtime_ns};

// SO_TIMESTAMPNS(_OLD) / SCM_TIMESTAMPNS on the "generic" Linux ABI (x86, x86_64, arm,
// aarch64, riscv): a struct timespec of CLOCK_REALTIME. Other ABIs fall back to
// stamping after the read returns.
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "x86",
    target_arch = "aarch64",
    target_arch = "arm",
    target_arch = "riscv64"
))]
const SO_TIMESTAMPNS: libc::c_int = 35;

pub struct Sock {
    fd: AsyncFd<TcpStream>,
}

impl Sock {
    /// Take over a connected tokio stream (deregistering it from tokio's own driver).
    pub fn new(stream: tokio::net::TcpStream) -> io::Result<Sock> {
        let std = stream.into_std()?;
        std.set_nonblocking(true)?;
        std.set_nodelay(true)?;
        #[cfg(any(
            target_arch = "x86_64",
            target_arch = "x86",
            target_arch = "aarch64",
            target_arch = "arm",
            target_arch = "riscv64"
        ))]
        {
            let on: libc::c_int = 1;
            // SAFETY: setsockopt on an fd we own with a correctly sized int. Failure only
            // costs precision (we fall back to a user-space stamp), so it is not checked.
            unsafe {
                libc::setsockopt(
                    std.as_raw_fd(),
                    libc::SOL_SOCKET,
                    SO_TIMESTAMPNS,
                    (&on as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                );
            }
        }
        // SAFETY: the TcpStream owns its fd for as long as the AsyncFd holds it.
        let fd = unsafe {
            AsyncFd::register_with_interest(std, Interest::READABLE | Interest::WRITABLE)
        }
        .map_err(|e| e.into_parts().1)?;
        Ok(Sock { fd })
    }

    /// Read what is available; returns the byte count (0 = EOF) and the CLOCK_MONOTONIC
    /// time the data arrived (the kernel's stamp when there is one, else now).
    pub async fn recv(&self, buf: &mut [u8]) -> io::Result<(usize, u64)> {
        loop {
            let mut guard = self.fd.readable().await?;
            match guard.try_io(|s| recv_stamped(s.get_ref().as_raw_fd(), buf)) {
                Ok(Ok((n, stamp))) => {
                    if n > 0 && n < buf.len() {
                        // Drained: skip the empty recvmsg that would only say EAGAIN. Safe,
                        // because data arriving after our read bumps the readiness tick.
                        guard.clear_ready();
                    }
                    return Ok((n, stamp));
                }
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
    }

    pub async fn write_all(&self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let mut guard = self.fd.writable().await?;
            match guard.try_io(|s| s.get_ref().write(data)) {
                Ok(Ok(0)) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(Ok(n)) => data = &data[n..],
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
        Ok(())
    }

    /// Forward an EOF: no more data this way, the other direction stays open.
    pub fn shutdown_write(&self) -> io::Result<()> {
        match self.fd.get_ref().shutdown(Shutdown::Write) {
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(()),
            other => other,
        }
    }

    /// SO_LINGER {on, 0}: the close that follows sends RST instead of FIN, which is what
    /// a reset looks like on the wire (a zero linger never blocks the closing thread).
    pub fn reset_on_close(&self) {
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        // SAFETY: setsockopt on a socket we hold open, with a correctly sized struct.
        unsafe {
            libc::setsockopt(
                self.fd.get_ref().as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                (&linger as *const libc::linger).cast(),
                std::mem::size_of::<libc::linger>() as libc::socklen_t,
            );
        }
    }
}

/// recvmsg with room for one timestamp control message.
fn recv_stamped(fd: libc::c_int, buf: &mut [u8]) -> io::Result<(usize, u64)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = [0u64; 8]; // 64 bytes, 8-aligned: fits a cmsghdr + timespec
                                 // SAFETY: an all-zero msghdr is valid; we then point it at live buffers.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: msg points at buffers that outlive the call.
    let n = unsafe { libc::recvmsg(fd, &mut msg, 0) };
    let now = now_ns();
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut arrival = now;
    #[cfg(any(
        target_arch = "x86_64",
        target_arch = "x86",
        target_arch = "aarch64",
        target_arch = "arm",
        target_arch = "riscv64"
    ))]
    // SAFETY: the CMSG_* helpers walk the control buffer the kernel just filled, within
    // msg_controllen; the payload of SCM_TIMESTAMPNS is a struct timespec.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == SO_TIMESTAMPNS {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                let stamp_real = ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128;
                let age = realtime_ns() - stamp_real;
                // A stamp from the future or from long ago means the wall clock stepped
                // (or the data sat in the buffer while we were not reading: backpressure);
                // then "now" is the honest arrival.
                if (0..1_000_000_000).contains(&age) {
                    arrival = now.saturating_sub(age as u64);
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n as usize, arrival))
}
