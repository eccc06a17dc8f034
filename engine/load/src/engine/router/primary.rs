//! Redis Sentinel, the routing part: the primary a load thread connects to now. Before a
//! reconnect it asks the Sentinels which address that is (`engine/sentinel.rs`, at most
//! every `ASK_EVERY_NS`), as redis-py's `Sentinel.master_for` does on each reconnect.

use super::super::conn::connect_to;
use super::super::record::Recorder;
use super::super::sentinel;
use super::super::shared::Shared;
use super::super::stream::Stream;
use super::{ASK_EVERY_NS, ASK_TIMEOUT_NS};
use crate::config::{Plan, ServerAddr};
use std::time::Duration;

/// The primary a thread connects to now, and when it last asked the Sentinels.
pub(in crate::engine) struct Primary {
    addr: ServerAddr,
    name: String,
    asked_at: Option<u64>,
}

impl Primary {
    /// The primary Python found at the start (the plan's one server).
    pub(super) fn new(plan: &Plan) -> Primary {
        Primary {
            addr: plan.servers[0].clone(),
            name: plan.server_names[0].clone(),
            asked_at: None,
        }
    }

    pub(super) fn name(&self) -> &str {
        &self.name
    }

    /// Connects to the primary the Sentinels name now (when they were last asked long
    /// enough ago; else, or when none answers, the last one named).
    pub(super) fn connect(
        &mut self,
        plan: &Plan,
        shared: &Shared,
        rec: &mut Recorder,
        wait: Duration,
    ) -> Result<Stream, String> {
        self.ask_sentinels(plan, shared, rec);
        connect_to(plan, &self.addr, &self.name, None, wait)
    }

    fn ask_sentinels(&mut self, plan: &Plan, shared: &Shared, rec: &mut Recorder) {
        let Some(sentinels) = &plan.sentinel else {
            return;
        };
        let now = shared.now();
        if self
            .asked_at
            .is_some_and(|t| now < t.saturating_add(ASK_EVERY_NS))
        {
            return;
        }
        self.asked_at = Some(now);
        let ask_wait = Duration::from_nanos(plan.timeout_ns.min(ASK_TIMEOUT_NS));
        match sentinel::ask(sentinels, ask_wait) {
            Ok((addr, name)) => (self.addr, self.name) = (addr, name),
            // The last primary named is tried again; the next question in 100 ms.
            Err(m) => rec.sample(|| m),
        }
    }
}
