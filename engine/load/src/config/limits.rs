//! The load's size and time, checked: threads, connections, pipeline depth, the open
//! loop's rate, the phases' lengths and the op budget.

use super::{Config, Mode};

impl Config {
    /// Threads, connections (at least one per thread) and pipeline depth within bounds.
    pub(super) fn check_limits(&self) -> Result<(), String> {
        if self.threads == 0 || self.threads > 256 {
            return Err(format!("threads must be 1..256, not {}", self.threads));
        }
        if self.connections < self.threads || self.connections > 100_000 {
            return Err(format!(
                "connections must be at least threads ({}) and at most 100000, not {}",
                self.threads, self.connections
            ));
        }
        if self.pipeline == 0 || self.pipeline > 4096 {
            return Err(format!("pipeline must be 1..4096, not {}", self.pipeline));
        }
        Ok(())
    }

    /// The open loop's rate (ops/s; 0 in closed loop, where it is not used).
    pub(super) fn open_rate(&self) -> Result<f64, String> {
        let open = self.mode == Mode::Open;
        let rate = self.rate.unwrap_or(0.0);
        if open && !(rate.is_finite() && rate > 0.0) {
            return Err("open loop needs a positive \"rate\" (ops/s)".into());
        }
        if open && rate > 1e9 {
            // Far beyond any one host; gaps under a nanosecond per client would stall the schedule.
            return Err(format!("rate must be at most 1e9 ops/s, not {rate}"));
        }
        Ok(rate)
    }

    /// The timed phase's length, the on-error grace, the warm-up and the op budget.
    pub(super) fn check_phases(&self) -> Result<(), String> {
        if !(self.duration_s.is_finite() && self.duration_s > 0.0 && self.duration_s < 1e7) {
            return Err(format!(
                "duration_s must be positive, not {}",
                self.duration_s
            ));
        }
        if !(self.error_grace_s.is_finite()
            && self.error_grace_s > 0.0
            && self.error_grace_s <= 3600.0)
        {
            return Err(format!(
                "error_grace_s must be within (0, 3600], not {}",
                self.error_grace_s
            ));
        }
        if !(self.warmup_s.is_finite() && self.warmup_s >= 0.0) {
            return Err(format!("warmup_s must be >= 0, not {}", self.warmup_s));
        }
        if self.ops == Some(0) {
            return Err("ops must be positive when given".into());
        }
        Ok(())
    }
}
