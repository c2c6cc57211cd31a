//! A server's TLS settings (`--tls-cert`, `--tls-key`, `--tls-ca`, `--tls-client-auth`)
//! and what they load into: the rustls server config its listeners accept with, and the
//! PEMs its own connections to other members dial with (its certificate as the client
//! certificate, the CA as trust anchors). Loading checks everything a handshake would
//! trip on later (an unreadable file, no certificate in it, a key that is not the
//! certificate's), so a bad setting refuses the start naming its flag.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

use crate::config_error::ConfigError;

pub const CERT_FLAG: &str = "--tls-cert";
pub const KEY_FLAG: &str = "--tls-key";
pub const CA_FLAG: &str = "--tls-ca";
pub const CLIENT_AUTH_FLAG: &str = "--tls-client-auth";

/// Whether a TLS listener asks its clients for a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientAuth {
    /// Any client that completes the handshake is served (server authentication only).
    #[default]
    None,
    /// Mutual TLS: a client without a certificate signed by `--tls-ca` is refused in the
    /// handshake.
    Required,
}

impl FromStr for ClientAuth {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(ClientAuth::None),
            "required" => Ok(ClientAuth::Required),
            other => Err(format!("{other:?} is not one of: none, required")),
        }
    }
}

impl std::fmt::Display for ClientAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ClientAuth::None => "none",
            ClientAuth::Required => "required",
        })
    }
}

/// The TLS files of one server process; no file at all means plaintext.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM certificate chain the server presents (and presents as a client to peers).
    pub cert: Option<PathBuf>,
    /// PEM private key of `cert`.
    pub key: Option<PathBuf>,
    /// PEM trust anchors: verify the members this process dials, and client certificates.
    pub ca: Option<PathBuf>,
    pub client_auth: ClientAuth,
}

/// The loaded files: what the listeners accept with and what peers are dialled with.
#[derive(Clone)]
pub struct LoadedTls {
    pub server: Arc<ServerConfig>,
    /// The PEM files' bytes, for the clients this process builds (the SDK's and tonic's
    /// client TLS take PEM).
    pub ca_pem: Vec<u8>,
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
}

impl std::fmt::Debug for LoadedTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("LoadedTls").finish_non_exhaustive()
    }
}

impl LoadedTls {
    /// Client TLS for this process's connections to other members: its own certificate
    /// as the client certificate, the CA as the only trust anchor.
    pub fn peer_client_config(&self) -> tonic::transport::ClientTlsConfig {
        tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(&self.ca_pem))
            .identity(tonic::transport::Identity::from_pem(
                &self.cert_pem,
                &self.key_pem,
            ))
    }
}

impl TlsFiles {
    /// Whether any TLS setting is given (then all of cert, key and CA must be).
    pub fn is_enabled(&self) -> bool {
        self.cert.is_some()
            || self.key.is_some()
            || self.ca.is_some()
            || self.client_auth == ClientAuth::Required
    }

    /// Loads and checks the files: `None` for plaintext, an error naming the flag for
    /// a setting the server cannot serve TLS with. A TLS server needs all three files:
    /// its certificate and key to present, and the CA to verify the members it dials
    /// (and, with `--tls-client-auth required`, its clients).
    pub fn load(&self) -> Result<Option<LoadedTls>, ConfigError> {
        if !self.is_enabled() {
            return Ok(None);
        }
        let (cert_path, key_path, ca_path) = match (&self.cert, &self.key, &self.ca) {
            (Some(cert), Some(key), Some(ca)) => (cert, key, ca),
            (None, _, _) => {
                return Err(ConfigError::new(
                    CERT_FLAG,
                    format!(
                        "is needed with {KEY_FLAG}, {CA_FLAG} or {CLIENT_AUTH_FLAG} required: \
                         a TLS server presents a certificate"
                    ),
                ))
            }
            (Some(_), None, _) => {
                return Err(ConfigError::new(
                    KEY_FLAG,
                    format!("is needed with {CERT_FLAG}: the certificate's private key"),
                ))
            }
            (Some(_), Some(_), None) => {
                let why = match self.client_auth {
                    ClientAuth::Required => format!(
                        "is needed with {CLIENT_AUTH_FLAG} required: client certificates \
                         are verified against it"
                    ),
                    ClientAuth::None => "is needed with --tls-cert: the members this process \
                                         connects to are verified against it"
                        .to_string(),
                };
                return Err(ConfigError::new(CA_FLAG, why));
            }
        };
        let cert_pem = read(CERT_FLAG, cert_path)?;
        let key_pem = read(KEY_FLAG, key_path)?;
        let ca_pem = read(CA_FLAG, ca_path)?;
        let chain = certificates(CERT_FLAG, cert_path, &cert_pem)?;
        let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
            ConfigError::new(
                KEY_FLAG,
                format!("{}: no PEM private key: {e}", key_path.display()),
            )
        })?;
        let mut roots = RootCertStore::empty();
        for anchor in certificates(CA_FLAG, ca_path, &ca_pem)? {
            roots.add(anchor).map_err(|e| {
                ConfigError::new(
                    CA_FLAG,
                    format!("{}: not a CA certificate: {e}", ca_path.display()),
                )
            })?;
        }
        let server = server_config(chain, key, roots, self.client_auth).map_err(|e| {
            ConfigError::new(
                KEY_FLAG,
                format!(
                    "{} cannot serve {}: {e}",
                    key_path.display(),
                    cert_path.display()
                ),
            )
        })?;
        Ok(Some(LoadedTls {
            server: Arc::new(server),
            ca_pem,
            cert_pem,
            key_pem,
        }))
    }
}

fn read(flag: &'static str, path: &Path) -> Result<Vec<u8>, ConfigError> {
    std::fs::read(path)
        .map_err(|e| ConfigError::new(flag, format!("cannot read {}: {e}", path.display())))
}

/// Every certificate of a PEM file; at least one.
fn certificates(
    flag: &'static str,
    path: &Path,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ConfigError::new(flag, format!("{}: bad PEM: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(ConfigError::new(
            flag,
            format!("{}: no PEM certificate in it", path.display()),
        ));
    }
    Ok(certs)
}

/// The rustls server config: TLS 1.2 and 1.3 with the ring provider, HTTP/2 by ALPN
/// (gRPC clients ask for it), client certificates verified against `roots` when
/// required. Fails when the key is not the certificate's.
fn server_config(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    roots: RootCertStore,
    client_auth: ClientAuth,
) -> Result<ServerConfig, rustls::Error> {
    // ring, as tonic's `tls-ring` client side uses: rustls 0.23.48 deprecates it for
    // lacking post-quantum key exchange, which only aws-lc-rs (a C build) offers.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = match client_auth {
        ClientAuth::None => WebPkiClientVerifier::no_client_auth(),
        ClientAuth::Required => {
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .map_err(|e| rustls::Error::General(e.to_string()))?
        }
    };
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused_flag(files: TlsFiles) -> &'static str {
        files.load().expect_err("refused").flag
    }

    #[test]
    fn given_partial_tls_settings_then_the_missing_flag_is_named() {
        let path = |p: &str| Some(PathBuf::from(p));
        assert!(TlsFiles::default().load().expect("plaintext").is_none());
        assert_eq!(
            refused_flag(TlsFiles {
                cert: path("c"),
                ..TlsFiles::default()
            }),
            KEY_FLAG
        );
        assert_eq!(
            refused_flag(TlsFiles {
                ca: path("a"),
                ..TlsFiles::default()
            }),
            CERT_FLAG
        );
        assert_eq!(
            refused_flag(TlsFiles {
                client_auth: ClientAuth::Required,
                ..TlsFiles::default()
            }),
            CERT_FLAG
        );
        assert_eq!(
            refused_flag(TlsFiles {
                cert: path("c"),
                key: path("k"),
                client_auth: ClientAuth::Required,
                ..TlsFiles::default()
            }),
            CA_FLAG
        );
        assert_eq!(
            refused_flag(TlsFiles {
                cert: path("/nonexistent/c"),
                key: path("/nonexistent/k"),
                ca: path("/nonexistent/a"),
                ..TlsFiles::default()
            }),
            CERT_FLAG
        );
    }

    #[test]
    fn client_auth_parses_its_two_values_only() {
        assert_eq!("none".parse::<ClientAuth>(), Ok(ClientAuth::None));
        assert_eq!("required".parse::<ClientAuth>(), Ok(ClientAuth::Required));
        assert!("optional".parse::<ClientAuth>().is_err());
        assert_eq!(ClientAuth::Required.to_string(), "required");
    }
}
