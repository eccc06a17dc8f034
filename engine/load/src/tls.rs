//! TLS for the engine's connections (`rediss://`, memcached `?tls=1`): the config's `tls`
//! section turned into one rustls client configuration (ring provider) shared by every
//! connection. Files are read and checked when the run is planned, so a missing or
//! malformed CA, certificate or key is one clear line before any connection is opened.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use serde::Deserialize;
use std::sync::Arc;

/// The config's `tls` section (docs/engine.md).
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM file of the CA certificates to trust; the system bundle when absent.
    #[serde(default)]
    pub ca_file: Option<String>,
    /// PEM client certificate (chain) and its key, for servers that ask for one.
    #[serde(default)]
    pub cert_file: Option<String>,
    #[serde(default)]
    pub key_file: Option<String>,
    /// false: accept any server certificate (handshake signatures are still checked).
    #[serde(default = "yes")]
    pub verify: bool,
    /// The name to verify and send as SNI; the server's host when absent.
    #[serde(default)]
    pub server_name: Option<String>,
}

fn yes() -> bool {
    true
}

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig {
            ca_file: None,
            cert_file: None,
            key_file: None,
            verify: true,
            server_name: None,
        }
    }
}

/// Where Debian, Fedora and Alpine keep the system's CA bundle.
const SYSTEM_BUNDLES: [&str; 3] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certs(path: &str, what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("tls: cannot read the {what} {path:?}: {e}"))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("tls: the {what} {path:?} is not valid PEM: {e}"))?;
    if certs.is_empty() {
        return Err(format!("tls: the {what} {path:?} holds no certificate"));
    }
    Ok(certs)
}

/// The rustls client configuration for a `tls` section.
pub fn client_config(tls: &TlsConfig) -> Result<Arc<ClientConfig>, String> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("tls: {e}"))?;
    let builder = if tls.verify {
        let mut roots = RootCertStore::empty();
        let path = match &tls.ca_file {
            Some(p) => p.clone(),
            None => SYSTEM_BUNDLES
                .iter()
                .find(|p| std::path::Path::new(p).exists())
                .ok_or("tls: no CA file given (ssl_ca_certs) and no system CA bundle found")?
                .to_string(),
        };
        for cert in certs(&path, "CA file")? {
            roots.add(cert).map_err(|e| {
                format!("tls: a certificate in the CA file {path:?} is unusable: {e}")
            })?;
        }
        builder.with_root_certificates(roots)
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCert(provider())))
    };
    let config = match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => {
            let chain = certs(cert, "client certificate")?;
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| format!("tls: cannot read the client key {key:?}: {e}"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("tls: the client certificate and key do not fit: {e}"))?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => {
            return Err(
                "tls: a client certificate needs its key too (ssl_certfile and ssl_keyfile)".into(),
            )
        }
    };
    Ok(Arc::new(config))
}

/// The name a server's certificate must carry (and SNI): the configured one, else its host.
pub fn server_name(tls: &TlsConfig, server: &str) -> Result<ServerName<'static>, String> {
    sni(tls.server_name.as_deref(), server)
}

/// The name to verify for `server` (`host:port`): `given` (the config's `server_name`), or
/// the server's host. Also for servers learnt during a run (a Redis Cluster's nodes).
pub fn sni(given: Option<&str>, server: &str) -> Result<ServerName<'static>, String> {
    let host = match given {
        Some(n) => n,
        None => server
            .rsplit_once(':')
            .map(|(h, _)| h)
            .unwrap_or(server)
            .trim_start_matches('[')
            .trim_end_matches(']'),
    };
    ServerName::try_from(host.to_string())
        .map_err(|_| format!("tls: {host:?} is not a valid server name for TLS"))
}

/// `ssl_cert_reqs=none`: any certificate is accepted, but the handshake's signatures are
/// still checked against it (as OpenSSL's CERT_NONE does).
#[derive(Debug)]
struct AcceptAnyCert(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_and_names_fail_in_one_line() {
        let bad = TlsConfig {
            ca_file: Some("/nonexistent/ca.pem".into()),
            ..TlsConfig::default()
        };
        let e = client_config(&bad).unwrap_err();
        assert!(e.starts_with("tls: cannot read the CA file"), "{e}");
        let e = client_config(&TlsConfig {
            verify: false,
            cert_file: Some("/x.pem".into()),
            ..TlsConfig::default()
        })
        .unwrap_err();
        assert!(e.contains("needs its key"), "{e}");
        assert!(client_config(&TlsConfig {
            verify: false,
            ..TlsConfig::default()
        })
        .is_ok());
        let tls = TlsConfig::default();
        assert_eq!(
            server_name(&tls, "127.0.0.1:6380").unwrap(),
            ServerName::try_from("127.0.0.1").unwrap()
        );
        assert_eq!(
            server_name(&tls, "cache.example:6380").unwrap(),
            ServerName::try_from("cache.example").unwrap()
        );
        assert!(server_name(&tls, "[::1]:6380").is_ok());
    }
}
