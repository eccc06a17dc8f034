//! Whether the machine has a core to spare for a spinning proxy.
//!
//! Spinning saves the proxy the wake-up of a halted vCPU, which only happens on a machine
//! with idle cores; on a busy one the vCPUs are not halting anyway, and a spinning proxy
//! would take a core from the client or the server under test. So the proxy spins only while everything
//! else on the machine leaves a whole core idle: from `/proc/stat`'s busy time less the
//! proxy thread's own CPU time, sampled at most every [`SAMPLE_NS`] while traffic flows.
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use crate::timer::{now_ns, thread_cpu_ns};

/// How long one sample spans: `/proc/stat` counts in 10 ms ticks, so shorter is noise.
pub const SAMPLE_NS: u64 = 50_000_000;

pub struct SpareCore {
    gauge: Mutex<Option<Gauge>>,
    spare: AtomicBool,
    next_sample_ns: AtomicU64,
}

struct Gauge {
    stat: File,
    ns_per_tick: u64,
    cpus: u64,
    last: Option<Sample>,
}

#[derive(Clone, Copy)]
struct Sample {
    at_ns: u64,
    busy_ticks: u64,
    /// The sampling thread's own CPU time, and which thread that was.
    own_ns: u64,
    thread: libc::pid_t,
}

impl SpareCore {
    /// Without a readable `/proc/stat` there is never a core to spare (no spinning).
    pub fn new() -> SpareCore {
        // SAFETY: sysconf has no preconditions.
        let (tck, cpus) = unsafe {
            (
                libc::sysconf(libc::_SC_CLK_TCK),
                libc::sysconf(libc::_SC_NPROCESSORS_ONLN),
            )
        };
        let gauge = File::open("/proc/stat").ok().map(|stat| Gauge {
            stat,
            ns_per_tick: 1_000_000_000 / tck.max(1) as u64,
            cpus: cpus.max(1) as u64,
            last: None,
        });
        let s = SpareCore {
            gauge: Mutex::new(gauge),
            spare: AtomicBool::new(false),
            next_sample_ns: AtomicU64::new(0),
        };
        s.spare(now_ns()); // the first sample: the next one has something to compare with
        s
    }

    /// True while the rest of the machine left at least one core idle over the last sample.
    pub fn spare(&self, now: u64) -> bool {
        if now >= self.next_sample_ns.load(Relaxed) {
            if let Ok(mut g) = self.gauge.try_lock() {
                self.next_sample_ns.store(now + SAMPLE_NS, Relaxed);
                let was = self.spare.load(Relaxed);
                if let Some(spare) = g.as_mut().and_then(|g| g.sample(now, was)) {
                    self.spare.store(spare, Relaxed);
                }
            }
        }
        self.spare.load(Relaxed)
    }
}

impl Default for SpareCore {
    fn default() -> Self {
        SpareCore::new()
    }
}

impl Gauge {
    /// A new sample; whether the others left a core idle since the previous one (`None` for
    /// the first sample). A proxy that spins keeps doing so until the others use a quarter of
    /// a core more: its own spinning speeds the client and the server up, and so raises their
    /// CPU use, which must not switch it off at once.
    fn sample(&mut self, now: u64, was_spare: bool) -> Option<bool> {
        let busy_ticks = self.busy_ticks()?;
        // SAFETY: gettid has no preconditions.
        let thread = unsafe { libc::gettid() };
        let s = Sample {
            at_ns: now,
            busy_ticks,
            own_ns: thread_cpu_ns(),
            thread,
        };
        let prev = self.last.replace(s)?;
        let wall = now.saturating_sub(prev.at_ns);
        if wall == 0 {
            return None;
        }
        let busy = (busy_ticks.saturating_sub(prev.busy_ticks)) * self.ns_per_tick;
        // The proxy's own spinning is not "others": subtract it when one thread sampled twice.
        let own = if prev.thread == thread {
            s.own_ns.saturating_sub(prev.own_ns)
        } else {
            0
        };
        Some(leaves_a_core(
            busy.saturating_sub(own),
            wall,
            self.cpus,
            was_spare,
        ))
    }

    /// All CPUs' non-idle time so far, in ticks (the first line of `/proc/stat`).
    fn busy_ticks(&mut self) -> Option<u64> {
        let mut buf = [0u8; 256];
        let n = self.stat.read_at(&mut buf, 0).ok()?;
        busy_of(&buf[..n])
    }
}

/// Whether `others_ns` of CPU time over `wall_ns` left one of `cpus` idle; with hysteresis
/// of a quarter of a core once spinning.
fn leaves_a_core(others_ns: u64, wall_ns: u64, cpus: u64, was_spare: bool) -> bool {
    let limit = (cpus - 1) * wall_ns + if was_spare { wall_ns / 4 } else { 0 };
    others_ns < limit
}

/// `cpu  user nice system idle iowait irq softirq steal ...`: everything but idle and iowait.
fn busy_of(text: &[u8]) -> Option<u64> {
    let line = text.split(|&b| b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut fields = line.split_ascii_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let v: Vec<u64> = fields.take(8).map_while(|f| f.parse().ok()).collect();
    if v.len() < 8 {
        return None;
    }
    Some(v[0] + v[1] + v[2] + v[5] + v[6] + v[7])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_time_is_all_but_idle_and_iowait() {
        let text = b"cpu  10 1 5 1000 7 2 3 4 0 0\ncpu0 5 0 2 500 3 1 1 2 0 0\n";
        assert_eq!(busy_of(text), Some(10 + 1 + 5 + 2 + 3 + 4));
        assert_eq!(busy_of(b"intr 1 2 3\n"), None);
    }

    #[test]
    fn a_core_is_spare_while_the_others_leave_one_idle() {
        let ms = 1_000_000;
        assert!(leaves_a_core(60 * ms, 100 * ms, 2, false)); // 0.6 of 2 cores busy
        assert!(!leaves_a_core(110 * ms, 100 * ms, 2, false));
        assert!(leaves_a_core(110 * ms, 100 * ms, 2, true)); // spinning: keeps on to 1.25
        assert!(!leaves_a_core(130 * ms, 100 * ms, 2, true));
        assert!(!leaves_a_core(10 * ms, 100 * ms, 1, false)); // one core: never spare
        assert!(leaves_a_core(600 * ms, 100 * ms, 8, false)); // 6 of 8 busy
    }

    #[test]
    fn proc_stat_is_read_again_from_the_start_and_sampling_is_rate_limited() {
        let s = SpareCore::new();
        let mut g = s.gauge.lock().unwrap();
        let g = g.as_mut().expect("/proc/stat");
        let a = g.busy_ticks().expect("a cpu line");
        let b = g.busy_ticks().expect("a cpu line again");
        assert!(b >= a);
        assert!(s.next_sample_ns.load(Relaxed) > now_ns());
    }
}
