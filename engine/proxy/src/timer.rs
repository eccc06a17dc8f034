//! Microsecond-precise timers for the proxy's tokio tasks.
//!
//! tokio's own timer wheel has a 1 ms resolution (and its epoll timeout is subject to the
//! thread's 50 µs timer slack), far too coarse to add a 0.1 ms one-way delay. A Linux
//! `timerfd` is an hrtimer with no slack: arming it at an absolute CLOCK_MONOTONIC
//! deadline and awaiting its readability through tokio's reactor wakes the task within a
//! few microseconds of the deadline, on the same thread, without spinning and without
//! a cross-thread hand-off.
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// One of the kernel's clocks, as it reads now.
#[inline]
fn read_clock(clock: libc::clockid_t) -> libc::timespec {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; the clocks asked for always exist.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts
}

/// CLOCK_MONOTONIC in nanoseconds: the clock every arrival and release time uses.
pub fn now_ns() -> u64 {
    let ts = read_clock(libc::CLOCK_MONOTONIC);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_REALTIME in nanoseconds: the kernel's receive timestamps, trace times (epoch µs) and
/// absolute TTLs (unix times) are on it.
pub fn realtime_ns() -> i128 {
    let ts = read_clock(libc::CLOCK_REALTIME);
    ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128
}

/// The calling thread's CPU time in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    let ts = read_clock(libc::CLOCK_THREAD_CPUTIME_ID);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One re-armable one-shot timer, awaited through tokio.
pub struct PreciseTimer {
    fd: AsyncFd<OwnedFd>,
}

impl PreciseTimer {
    /// Must be called inside a tokio runtime (the fd registers with its reactor).
    pub fn new() -> io::Result<Self> {
        // SAFETY: plain syscall; the result is checked before use.
        let raw = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh fd that nothing else owns.
        let owned = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: an OwnedFd stays open and names the same timerfd for as long as the
        // AsyncFd that owns it lives, which is what registration requires.
        let fd = unsafe { AsyncFd::register_with_interest(owned, Interest::READABLE) }
            .map_err(|e| e.into_parts().1)?;
        Ok(PreciseTimer { fd })
    }

    /// Fire at `deadline_ns` (CLOCK_MONOTONIC). A deadline in the past fires at once.
    /// Re-arming replaces the previous deadline and discards an unread expiry.
    pub fn arm(&self, deadline_ns: u64) -> io::Result<()> {
        // An all-zero it_value would disarm the timer instead of firing it.
        let deadline_ns = deadline_ns.max(1);
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
                tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
            },
        };
        // SAFETY: the fd is a timerfd we own; spec lives across the call.
        let rc = unsafe {
            libc::timerfd_settime(
                self.fd.get_ref().as_raw_fd(),
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Wait until the armed deadline passes. Cancel-safe (usable in `select!`).
    pub async fn wait(&self) -> io::Result<()> {
        loop {
            let mut guard = self.fd.readable().await?;
            let res = guard.try_io(|fd| {
                let mut ticks = [0u8; 8];
                // SAFETY: reads 8 bytes into a buffer of 8 bytes from our own timerfd.
                let n =
                    unsafe { libc::read(fd.get_ref().as_raw_fd(), ticks.as_mut_ptr().cast(), 8) };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(())
                }
            });
            match res {
                Ok(result) => return result,
                Err(_would_block) => continue,
            }
        }
    }

    /// Sleep until `deadline_ns` (for the connection-setup delay).
    pub async fn sleep_until(&self, deadline_ns: u64) -> io::Result<()> {
        if deadline_ns <= now_ns() {
            return Ok(());
        }
        self.arm(deadline_ns)?;
        self.wait().await
    }
}
