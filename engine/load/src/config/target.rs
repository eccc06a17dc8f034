//! The target, checked: the servers (or a cluster's seeds) and their addresses, TLS, the
//! credentials the protocol can carry, cluster mode's limits and the Sentinels.

use super::{Config, Protocol, SentinelPlan, ServerAddr};
use crate::tls::{client_config, server_name};
use rustls::pki_types::ServerName;
use std::sync::Arc;

/// What the plan needs of the target section.
pub(super) struct Target {
    pub(super) servers: Vec<ServerAddr>,
    pub(super) tls: Option<Arc<rustls::ClientConfig>>,
    pub(super) tls_names: Vec<ServerName<'static>>,
    pub(super) sentinel: Option<Arc<SentinelPlan>>,
}

/// TLS: one client configuration for all connections, and each server's name.
type TlsPlan = (Option<Arc<rustls::ClientConfig>>, Vec<ServerName<'static>>);

impl Config {
    /// The servers, TLS and Sentinels, checked in this order: the servers' count (one for
    /// RESP but for a cluster's seeds), cluster mode, the Sentinels, each address, TLS, the
    /// credentials.
    pub(super) fn target(&self) -> Result<Target, String> {
        if self.servers.is_empty() {
            return Err("engine config: \"servers\" is empty".into());
        }
        if self.protocol.is_resp() && self.servers.len() > 1 && !self.cluster {
            return Err(
                "engine config: RESP targets take one server (or seeds, with \"cluster\": true)"
                    .into(),
            );
        }
        if self.cluster {
            self.check_cluster()?;
        } else if self.read_from_replicas {
            return Err(
                "engine config: \"read_from_replicas\" is for a Redis Cluster (\"cluster\": true)"
                    .into(),
            );
        }
        let sentinel = self.sentinel_plan()?;
        let mut servers = Vec::new();
        for s in &self.servers {
            servers.push(ServerAddr::parse(s)?);
        }
        let (tls, tls_names) = self.tls_plan(&servers)?;
        self.check_credentials()?;
        Ok(Target {
            servers,
            tls,
            tls_names,
            sentinel,
        })
    }

    /// The TLS section: one client configuration, and each server's name (SNI); TCP only.
    fn tls_plan(&self, servers: &[ServerAddr]) -> Result<TlsPlan, String> {
        let Some(t) = &self.tls else {
            return Ok((None, Vec::new()));
        };
        if servers.iter().any(|a| matches!(a, ServerAddr::Unix(_))) {
            return Err("tls: the engine speaks TLS over TCP only, not over a Unix socket".into());
        }
        let names = self
            .servers
            .iter()
            .map(|s| server_name(t, s))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((Some(client_config(t)?), names))
    }

    /// Credentials: memcached carries them only over the binary protocol (SASL), and then
    /// both.
    fn check_credentials(&self) -> Result<(), String> {
        if !self.protocol.is_resp()
            && self.protocol != Protocol::MemcacheBinary
            && (self.password.is_some() || self.username.is_some())
        {
            return Err(
                "engine config: memcached credentials need protocol memcache_binary (SASL)".into(),
            );
        }
        if self.protocol == Protocol::MemcacheBinary
            && self.username.is_some() != self.password.is_some()
        {
            return Err("engine config: SASL needs both username and password".into());
        }
        Ok(())
    }

    /// What cluster mode cannot do: every request must name one key the engine can route.
    fn check_cluster(&self) -> Result<(), String> {
        if !self.protocol.is_resp() {
            return Err("engine config: \"cluster\" is for RESP (Redis Cluster) only".into());
        }
        if self.db != 0 {
            return Err("engine config: a Redis Cluster has database 0 only".into());
        }
        if let Some(m) = self
            .mix
            .iter()
            .find(|m| matches!(m.op.as_str(), "mget" | "template"))
        {
            return Err(format!(
                "engine config: {:?} in cluster mode: its keys are not routed by hash slot \
                 (use get, gets, set, delete, exists, incr, touch)",
                m.op
            ));
        }
        Ok(())
    }

    /// The Sentinels section, checked: RESP, one server (the primary at the start), TCP.
    fn sentinel_plan(&self) -> Result<Option<Arc<SentinelPlan>>, String> {
        let Some(c) = &self.sentinel else {
            return Ok(None);
        };
        if !self.protocol.is_resp() || self.cluster {
            return Err("engine config: \"sentinel\" is for one RESP primary (not memcached, not a cluster)".into());
        }
        if self.tls.is_some() {
            return Err("engine config: \"sentinel\" with \"tls\" is not supported".into());
        }
        if c.sentinels.is_empty() || c.service.is_empty() {
            return Err(
                "engine config: \"sentinel\" needs \"sentinels\" and a \"service\" name".into(),
            );
        }
        let mut addrs = Vec::new();
        for s in &c.sentinels {
            match ServerAddr::parse(s)? {
                ServerAddr::Unix(_) => {
                    return Err(format!(
                        "engine config: sentinel {s:?}: Sentinels are host:port"
                    ))
                }
                a => addrs.push(a),
            }
        }
        Ok(Some(Arc::new(SentinelPlan {
            addrs,
            names: c.sentinels.clone(),
            service: c.service.clone(),
            password: c.password.clone(),
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::super::Config;

    #[test]
    fn sentinel_section() {
        let json = |extra: &str| {
            format!(
                r#"{{"protocol":"resp2","servers":["127.0.0.1:6379"],"sentinel":{{"sentinels":["127.0.0.1:26379","127.0.0.1:26380"],"service":"mymaster","password":"pw"}}{extra}}}"#
            )
        };
        let p = Config::from_json(&json("")).unwrap().plan().unwrap();
        let s = p.sentinel.unwrap();
        assert_eq!(s.names, ["127.0.0.1:26379", "127.0.0.1:26380"]);
        assert_eq!(
            (s.service.as_str(), s.password.as_deref()),
            ("mymaster", Some("pw"))
        );
        let err = |extra: &str| Config::from_json(&json(extra)).unwrap().plan().unwrap_err();
        assert!(err(r#","cluster":true"#).contains("\"sentinel\" is for one RESP primary"));
        let memcached = json("").replace("resp2", "memcache_text");
        assert!(Config::from_json(&memcached)
            .unwrap()
            .plan()
            .unwrap_err()
            .contains("not memcached"));
        let unix = json("").replace("127.0.0.1:26380", "unix:/x.sock");
        assert!(Config::from_json(&unix)
            .unwrap()
            .plan()
            .unwrap_err()
            .contains("Sentinels are host:port"));
        let no_service = json("").replace("mymaster", "");
        assert!(Config::from_json(&no_service)
            .unwrap()
            .plan()
            .unwrap_err()
            .contains("\"service\""));
        assert!(Config::from_json(&json("").replace("\"password\"", "\"pass\"")).is_err());
    }

    #[test]
    fn read_from_replicas_is_for_a_cluster() {
        let json = |extra: &str| {
            format!(
                r#"{{"protocol":"resp2","servers":["127.0.0.1:7000"],"read_from_replicas":true{extra}}}"#
            )
        };
        let p = Config::from_json(&json(r#","cluster":true"#))
            .unwrap()
            .plan()
            .unwrap();
        assert!(p.read_from_replicas && p.primaries == 1 && p.replicas.is_empty());
        let err = Config::from_json(&json("")).unwrap().plan().unwrap_err();
        assert!(
            err.contains("\"read_from_replicas\" is for a Redis Cluster"),
            "{err}"
        );
    }
}
