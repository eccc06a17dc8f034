//! The on-error policy (`on_error: "stop"`): the orchestrating thread feeds it the op
//! counts every load thread publishes (about every 10 ms), and it says when every op
//! completed over the last `error_grace_s` seconds was an error — a server that was
//! killed, or hangs past its timeouts — so the phase stops instead of measuring a dead
//! server until the deadline. The same rule as the Python workers' (run/error_policy.py),
//! with the same one-line reason, so results read alike whichever side measured.

use crate::engine::ERROR_KINDS;
use std::time::SystemTime;

/// Error counts by kind, in the order of [`ERROR_KINDS`].
pub type Kinds = [u64; 6];

/// Watches the totals of one engine run.
pub struct ErrorWatch {
    grace_ns: Option<u64>,
    ok: u64,
    failed: Kinds,
    /// Since when (engine ns, wall clock) only errors came in, and the counts then.
    failing: Option<(u64, SystemTime, Kinds)>,
}

impl ErrorWatch {
    /// `grace_ns`: None never stops (`on_error: "continue"`).
    pub fn new(grace_ns: Option<u64>) -> Self {
        ErrorWatch {
            grace_ns,
            ok: 0,
            failed: [0; 6],
            failing: None,
        }
    }

    /// Feeds the current totals at engine time `now`; true once nothing but errors has
    /// come in for the grace period.
    pub fn should_stop(&mut self, now: u64, ok: u64, failed: Kinds) -> bool {
        if ok > self.ok {
            self.ok = ok;
            self.failing = None;
        }
        if failed.iter().sum::<u64>() > self.failed.iter().sum::<u64>() && self.failing.is_none() {
            self.failing = Some((now, SystemTime::now(), self.failed));
        }
        self.failed = failed;
        match (self.grace_ns, &self.failing) {
            (Some(grace), Some((since, _, _))) => now.saturating_sub(*since) >= grace,
            _ => false,
        }
    }

    /// `connection errors from 12:01:03: 100 % of ops failed for 2 s, so the run stopped
    /// (--on-error continue runs on); last: …` — the kind that failed most since then.
    pub fn reason(&self, during: &str, last: Option<&str>) -> String {
        let (_, wall, before) = self.failing.unwrap_or((0, SystemTime::now(), [0; 6]));
        // Ties go to the earlier kind: a timeout is the cause of the reconnects that follow it.
        let kind = (0..6)
            .rev()
            .max_by_key(|&k| self.failed[k].saturating_sub(before[k]))
            .map_or("op", |k| ERROR_KINDS[k]);
        let grace = self.grace_ns.unwrap_or(0) as f64 / 1e9;
        let mut s = format!(
            "{kind} errors from {}: 100 % of ops failed for {grace} s{during}, so the run stopped \
             (--on-error continue runs on)",
            local_hms(wall)
        );
        if let Some(m) = last {
            s.push_str("; last: ");
            s.push_str(m);
        }
        s
    }
}

/// `HH:MM:SS` in local time.
fn local_hms(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as libc::time_t;
    // SAFETY: localtime_r fills the struct we pass; an all-zero tm is valid.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    unsafe { libc::localtime_r(&secs, &mut tm) };
    format!("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn stops_after_the_grace_of_only_errors() {
        let mut w = ErrorWatch::new(Some(2 * S));
        assert!(!w.should_stop(0, 100, [0; 6]));
        assert!(!w.should_stop(S, 200, [0, 5, 0, 0, 0, 0]));
        // Successes still came in: not yet failing only.
        assert!(!w.should_stop(2 * S, 210, [0, 9, 0, 0, 0, 0]));
        assert!(!w.should_stop(3 * S, 210, [0, 50, 0, 0, 0, 0]));
        assert!(!w.should_stop(4 * S - 1, 210, [0, 90, 0, 0, 0, 0]));
        assert!(w.should_stop(4 * S, 210, [0, 90, 0, 0, 0, 2]));
        let r = w.reason("", Some("x: Connection refused"));
        assert!(r.starts_with("connection errors from "), "{r}");
        assert!(
            r.contains(": 100 % of ops failed for 2 s, so the run stopped (--on-error continue runs on); last: x: Connection refused"),
            "{r}"
        );
        assert!(w
            .reason(" during prefill", None)
            .contains("for 2 s during prefill, so"));
    }

    #[test]
    fn a_success_resets_and_continue_never_stops() {
        let mut w = ErrorWatch::new(Some(S));
        assert!(!w.should_stop(0, 10, [1, 0, 0, 0, 0, 0]));
        assert!(!w.should_stop(S / 2, 11, [2, 0, 0, 0, 0, 0]));
        assert!(!w.should_stop(S, 11, [3, 0, 0, 0, 0, 0]));
        assert!(w.should_stop(2 * S, 11, [3, 0, 0, 0, 0, 0]));
        assert!(w.reason("", None).starts_with("timeout errors"));
        // As many timeouts as failed reconnects after them: the timeouts are named.
        let mut t = ErrorWatch::new(Some(S));
        assert!(!t.should_stop(0, 5, [0; 6]));
        assert!(!t.should_stop(S, 5, [1, 0, 0, 0, 0, 0]));
        assert!(t.should_stop(2 * S, 5, [2, 2, 0, 0, 0, 0]));
        assert!(t.reason("", None).starts_with("timeout errors"));
        let mut c = ErrorWatch::new(None);
        assert!(!c.should_stop(0, 0, [1, 0, 0, 0, 0, 0]));
        assert!(!c.should_stop(100 * S, 0, [9, 0, 0, 0, 0, 0]));
        // Nothing completed at all (a hung server before its timeouts): no verdict yet.
        let mut h = ErrorWatch::new(Some(S));
        assert!(!h.should_stop(10 * S, 0, [0; 6]));
    }
}
