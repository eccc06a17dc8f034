//! Dropped-write canaries: after the timed phase, a few private keys
//! (`prefix + "verify:" + tag + ":" + n`) are written, read back at once and deleted over
//! connections of their own, blocking and untimed; one that does not come back intact counts
//! as a `dropped_write` error of `set`. The tag is the run's own, drawn at random: engines
//! sharing a namespace (a distributed run's agents) would otherwise write, read and delete
//! the same canaries, and one's delete would read as the other's dropped write.

use super::conn::{connect, read_some};
use super::stream::Stream;
use crate::cluster::{key_slot, UNOWNED};
use crate::config::{OpPlan, Plan};
use crate::keyspace::{route, verify_value, Rng};
use crate::outbuf::OutBuf;
use crate::proto::{self, encode, key_bytes, Kind, Outcome, Parse, Request};
use std::io::Write;
use std::time::Duration;

/// Most canaries a run writes.
pub(super) const MAX_CANARIES: usize = 100;

/// How many canaries a run with `sets` timed sets gets: a share `verify_fraction` of them,
/// rounded up, at most [`MAX_CANARIES`].
pub(super) fn canary_count(sets: u64, verify_fraction: f64) -> usize {
    ((sets as f64 * verify_fraction).ceil() as usize).min(MAX_CANARIES)
}

/// The canaries' key prefix: the run's own, then `verify:` and this run's tag (canary n is
/// `prefix + n`).
pub(super) fn canary_prefix(prefix: &[u8], tag: u32) -> Vec<u8> {
    let mut p = prefix.to_vec();
    p.extend_from_slice(format!("verify:{tag:08x}:").as_bytes());
    p
}

/// A tag no other engine run sharing the namespace is likely to draw: the clock's
/// nanoseconds and this process's id, mixed.
fn run_tag() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    Rng::new(nanos ^ (u64::from(std::process::id()) << 32)).next_u64() as u32
}

fn request<'a>(
    plan: &'a Plan,
    prefix: &'a [u8],
    keys: &'a [u64],
    op: &'a OpPlan,
    size: usize,
) -> Request<'a> {
    Request {
        op,
        prefix,
        lengths: &[],
        keys,
        size,
        ttl: plan.ttl_s,
        filler: &plan.filler,
    }
}

/// Writes, reads back and deletes a few canary keys (`prefix + "verify:" + n`,
/// untimed) and counts the ones the server silently dropped (`dropped_write`). A cluster's
/// canaries go where `slots` (a load thread's map at its end) says their slots live.
pub(super) fn canaries(
    plan: &Plan,
    n: usize,
    rng: &mut Rng,
    slots: Option<&[u16]>,
) -> (u64, Vec<String>) {
    let mut dropped = 0;
    let mut msgs = Vec::new();
    let timeout = Duration::from_nanos(plan.timeout_ns);
    let mut conns: Vec<Option<Stream>> = (0..plan.servers.len()).map(|_| None).collect();
    let prefix = canary_prefix(&plan.prefix, run_tag());
    let (mut kb, mut tmp, mut out) = (Vec::new(), Vec::new(), OutBuf::default());
    let op = |kind| OpPlan {
        name: String::new(),
        kind,
        template: vec![],
        writes_value: kind == Kind::Set,
        write: kind == Kind::Set,
    };
    let (set_op, get_op, del_op) = (op(Kind::Set), op(Kind::Get), op(Kind::Delete));
    for i in 0..n as u64 {
        key_bytes(&mut kb, &prefix, &[], Kind::Get, i);
        let key = kb.clone();
        let server = match slots {
            Some(map) if plan.cluster => match map[key_slot(&key) as usize] {
                UNOWNED => 0,
                owner => owner as usize,
            },
            _ => route(&key, plan.servers.len()),
        };
        if conns[server].is_none() {
            match connect(plan, server, timeout) {
                Ok(s) => {
                    let _ = s.set_nonblocking(false);
                    conns[server] = Some(s);
                }
                Err(m) => {
                    msgs.push(m);
                    return (dropped, msgs);
                }
            }
        }
        let s = conns[server].as_mut().expect("connected above");
        let size = plan.sizes.sample(rng);
        let mut call =
            |req: &mut OutBuf, kind: Kind| -> Result<(Outcome, Option<Vec<u8>>), String> {
                s.write_all(&req.to_bytes(&plan.filler))
                    .map_err(|e| e.to_string())?;
                req.clear();
                let mut buf = Vec::new();
                loop {
                    match proto::parse(plan.protocol, &buf, kind, &plan.limits) {
                        Parse::Done(r) => return Ok((r.outcome, r.value.map(|v| buf[v].to_vec()))),
                        Parse::Bad(m) => return Err(m),
                        Parse::Need(_) => {
                            let mut chunk = vec![0u8; 64 * 1024];
                            let k = read_some(s, &mut chunk).map_err(|e| e.to_string())?;
                            if k == 0 {
                                return Err("connection closed".into());
                            }
                            buf.extend_from_slice(&chunk[..k]);
                        }
                    }
                }
            };
        let keys = [i];
        let req = |op, size| request(plan, &prefix, &keys, op, size);
        encode(
            plan.protocol,
            &mut out,
            &req(&set_op, size),
            &mut kb,
            &mut tmp,
        );
        let intact = match call(&mut out, Kind::Set) {
            Ok((Outcome::Ok, _)) => {
                encode(plan.protocol, &mut out, &req(&get_op, 0), &mut kb, &mut tmp);
                match call(&mut out, Kind::Get) {
                    Ok((Outcome::Hit, Some(v))) => {
                        v.len() == size && verify_value(&key, &v, &plan.filler)
                    }
                    Ok(_) => false,
                    Err(m) => {
                        msgs.push(format!("canary: {m}"));
                        false
                    }
                }
            }
            Ok(_) => false,
            Err(m) => {
                msgs.push(format!("canary: {m}"));
                false
            }
        };
        if !intact {
            dropped += 1;
            msgs.push(format!(
                "dropped_write: canary {} was not read back intact",
                String::from_utf8_lossy(&key)
            ));
        }
        out.clear();
        encode(plan.protocol, &mut out, &req(&del_op, 0), &mut kb, &mut tmp);
        let _ = call(&mut out, Kind::Delete);
    }
    (dropped, msgs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canary_keys_live_under_the_run_prefix() {
        let prefix = canary_prefix(b"cm:3f9a2c:", 0xbeef);
        assert_eq!(prefix, b"cm:3f9a2c:verify:0000beef:");
        let mut key = Vec::new();
        key_bytes(&mut key, &prefix, &[], Kind::Get, 17);
        assert_eq!(key, b"cm:3f9a2c:verify:0000beef:17");
    }

    #[test]
    fn two_runs_draw_different_tags() {
        let tags: std::collections::HashSet<u32> = (0..64).map(|_| run_tag()).collect();
        assert!(tags.len() > 60, "{} distinct of 64", tags.len());
    }

    #[test]
    fn canaries_follow_the_writes_up_to_a_hundred() {
        assert_eq!(canary_count(0, 0.01), 0);
        assert_eq!(canary_count(1, 0.01), 1);
        assert_eq!(canary_count(250, 0.01), 3);
        assert_eq!(canary_count(1_000_000, 0.01), MAX_CANARIES);
        assert_eq!(canary_count(1_000_000, 0.0), 0);
    }
}
