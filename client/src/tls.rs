//! The SDK's TLS settings: the CA the brokers' and coordinators' certificates must be
//! signed by, and optionally a client certificate and key (mutual TLS). Given them,
//! every channel the SDK opens (bootstrap, brokers, coordinators) dials `https` and
//! verifies the server's certificate for the host name or IP address it dials.

use std::path::Path;

use tonic::transport::{Certificate, ClientTlsConfig, Identity};

use crate::error::ClientError;

/// PEM trust anchors and an optional PEM client identity.
#[derive(Clone, PartialEq, Eq)]
pub struct TlsConfig {
    ca_pem: Vec<u8>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("TlsConfig")
            .field("client_certificate", &self.identity.is_some())
            .finish_non_exhaustive()
    }
}

impl TlsConfig {
    /// Trusts the certificates of `ca_pem` (PEM, one or more) and presents no client
    /// certificate.
    pub fn new(ca_pem: impl Into<Vec<u8>>) -> TlsConfig {
        TlsConfig {
            ca_pem: ca_pem.into(),
            identity: None,
        }
    }

    /// Presents `cert_pem` (with its private key `key_pem`) to servers that ask for a
    /// client certificate.
    pub fn with_client_identity(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> TlsConfig {
        self.identity = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// Reads the files (the CLI's `--tls-ca`, `--tls-cert`, `--tls-key`): `None` when
    /// none is given; a certificate needs its key and both need the CA.
    pub fn from_files(
        ca: Option<&Path>,
        cert: Option<&Path>,
        key: Option<&Path>,
    ) -> Result<Option<TlsConfig>, ClientError> {
        let read = |what: &str, path: &Path| {
            std::fs::read(path).map_err(|e| {
                ClientError::InvalidConfig(format!("cannot read {what} {}: {e}", path.display()))
            })
        };
        let identity = match (cert, key) {
            (None, None) => None,
            (Some(cert), Some(key)) => Some((
                read("the TLS certificate", cert)?,
                read("the TLS key", key)?,
            )),
            (Some(_), None) => {
                return Err(ClientError::InvalidConfig(
                    "a TLS client certificate needs its key (--tls-key)".into(),
                ))
            }
            (None, Some(_)) => {
                return Err(ClientError::InvalidConfig(
                    "a TLS key needs its certificate (--tls-cert)".into(),
                ))
            }
        };
        let Some(ca) = ca else {
            return match identity {
                None => Ok(None),
                Some(_) => Err(ClientError::InvalidConfig(
                    "a TLS client certificate needs the CA the servers are verified \
                     against (--tls-ca)"
                        .into(),
                )),
            };
        };
        let mut config = TlsConfig::new(read("the TLS CA", ca)?);
        config.identity = identity;
        Ok(Some(config))
    }

    /// tonic's client TLS for one endpoint; the server name is the endpoint's host.
    pub fn client_config(&self) -> ClientTlsConfig {
        let config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&self.ca_pem));
        match &self.identity {
            Some((cert, key)) => config.identity(Identity::from_pem(cert, key)),
            None => config,
        }
    }
}

/// A hint for a connection failure that looks like a TLS mismatch, to put beside the
/// transport's own words (which say "connection closed" or "invalid peer certificate"
/// rather than why).
pub(crate) fn mismatch_hint(tls: bool, failure: &str) -> Option<&'static str> {
    let lower = failure.to_ascii_lowercase();
    let tls_words = [
        "certificate",
        "unknownissuer",
        "unknown issuer",
        "handshake",
        "alert",
        "tls",
    ];
    if tls {
        if tls_words.iter().any(|w| lower.contains(w)) {
            return Some(
                "the TLS handshake failed: the server's certificate is not signed by the \
                 given CA (--tls-ca), does not name the address dialled, or the server \
                 refused the client certificate (--tls-cert, --tls-key)",
            );
        }
        if lower.contains("invalid http version")
            || lower.contains("corrupt message")
            || lower.contains("received corrupt")
        {
            return Some("the server does not speak TLS: dial it without --tls-ca");
        }
        return None;
    }
    let closed_early = [
        "connection closed",
        "connection reset",
        "broken pipe",
        "frame with invalid size",
        "protocol error",
        "unexpected eof",
        "unexpected end of file",
    ];
    closed_early.iter().any(|w| lower.contains(w)).then_some(
        "the server closed the connection at once: it may require TLS (give the CA with \
             --tls-ca, and a client certificate with --tls-cert and --tls-key when it asks \
             for one)",
    )
}
