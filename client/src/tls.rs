//! The SDK's TLS settings: the CA the brokers' and coordinators' certificates must be
//! signed by, and optionally a client certificate and key (mutual TLS). Given them,
//! every channel the SDK opens (bootstrap, brokers, coordinators) dials `https` and
//! verifies the server's certificate for the host name or IP address it dials.

use std::path::Path;
use std::sync::{Arc, RwLock};

use tonic::transport::{Certificate, ClientTlsConfig, Identity};

use crate::error::ClientError;

/// PEM trust anchors and an optional PEM client identity.
#[derive(Clone, PartialEq, Eq)]
struct Pems {
    ca_pem: Vec<u8>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
}

/// PEM trust anchors and an optional PEM client identity. Clones share one value, which
/// [`TlsConfig::replace`] changes for all of them: a server that rotates its
/// certificate (an idem coordinator on SIGHUP) makes every connection its clients dial
/// afterwards present the new one; connections already open keep their session.
#[derive(Clone)]
pub struct TlsConfig {
    pems: Arc<RwLock<Pems>>,
}

impl PartialEq for TlsConfig {
    fn eq(&self, other: &TlsConfig) -> bool {
        *self.current() == *other.current()
    }
}

impl Eq for TlsConfig {}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("TlsConfig")
            .field("client_certificate", &self.current().identity.is_some())
            .finish_non_exhaustive()
    }
}

impl TlsConfig {
    /// Trusts the certificates of `ca_pem` (PEM, one or more) and presents no client
    /// certificate.
    pub fn new(ca_pem: impl Into<Vec<u8>>) -> TlsConfig {
        TlsConfig {
            pems: Arc::new(RwLock::new(Pems {
                ca_pem: ca_pem.into(),
                identity: None,
            })),
        }
    }

    fn current(&self) -> std::sync::RwLockReadGuard<'_, Pems> {
        self.pems
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Presents `cert_pem` (with its private key `key_pem`) to servers that ask for a
    /// client certificate.
    pub fn with_client_identity(
        self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> TlsConfig {
        self.pems
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .identity = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// Makes what `other` holds what this config and every clone of it dial with from
    /// now on.
    pub fn replace(&self, other: &TlsConfig) {
        let new = other.current().clone();
        *self
            .pems
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = new;
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
        let config = TlsConfig::new(read("the TLS CA", ca)?);
        Ok(Some(match identity {
            Some((cert, key)) => config.with_client_identity(cert, key),
            None => config,
        }))
    }

    /// tonic's client TLS for one endpoint; the server name is the endpoint's host.
    pub fn client_config(&self) -> ClientTlsConfig {
        let pems = self.current();
        let config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&pems.ca_pem));
        match &pems.identity {
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
    let says = |words: &[&str]| words.iter().any(|w| lower.contains(w));
    // A server that hangs up right after the handshake (TLS 1.3 tells a client its
    // certificate was refused only then) or at the first bytes of plaintext.
    let closed_early = says(&[
        "connection closed",
        "connection reset",
        "broken pipe",
        "frame with invalid size",
        "protocol error",
        "unexpected eof",
        "close_notify",
    ]);
    if !tls {
        return closed_early.then_some(
            "the server closed the connection at once: it may require TLS (give the CA \
             with --tls-ca, and a client certificate with --tls-cert and --tls-key when it \
             asks for one)",
        );
    }
    if says(&[
        "invalid http version",
        "corrupt message",
        "wrong version number",
    ]) {
        return Some("the server does not speak TLS: dial it without --tls-ca");
    }
    if says(&["invalid peer certificate"]) {
        return Some(
            "the server's certificate is not signed by the given CA (--tls-ca) or does not \
             name the address dialled",
        );
    }
    if says(&[
        "certificaterequired",
        "unknownca",
        "badcertificate",
        "certificateunknown",
        "decrypterror",
    ]) {
        return Some(
            "the server refused the client certificate: it requires one (--tls-cert, \
             --tls-key) signed by its CA",
        );
    }
    if says(&[
        "certificate",
        "unknownissuer",
        "unknown issuer",
        "alert",
        "handshake",
    ]) {
        return Some(
            "the TLS handshake failed: the server's certificate is not signed by the given \
             CA (--tls-ca) or does not name the address dialled, or the server refused the \
             client certificate (--tls-cert, --tls-key)",
        );
    }
    closed_early.then_some(
        "the server closed the TLS connection after the handshake: it requires a client \
         certificate signed by its CA (--tls-cert, --tls-key)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_connection_failures_then_only_tls_mismatches_get_a_hint() {
        let closed = "Metadata failed: hyper::Error(Canceled, \"connection closed\")";
        assert!(mismatch_hint(false, closed).is_some_and(|h| h.contains("may require TLS")));
        assert!(mismatch_hint(true, closed).is_some_and(|h| h.contains("client certificate")));
        let unknown = "invalid peer certificate: UnknownIssuer";
        assert!(mismatch_hint(true, unknown).is_some_and(|h| h.contains("--tls-ca")));
        let required = "received fatal alert: CertificateRequired";
        assert!(mismatch_hint(true, required)
            .is_some_and(|h| h.contains("refused the client certificate")));
        let refused = "tcp connect error: Connection refused (os error 111)";
        assert_eq!(mismatch_hint(false, refused), None);
        assert_eq!(mismatch_hint(true, refused), None);
        assert_eq!(
            mismatch_hint(false, "no answer to Metadata within 1s"),
            None
        );
    }

    #[test]
    fn given_a_certificate_without_a_key_then_the_files_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cert = dir.path().join("c.pem");
        std::fs::write(&cert, "x").expect("write");
        assert!(matches!(
            TlsConfig::from_files(None, Some(&cert), None),
            Err(ClientError::InvalidConfig(_))
        ));
        assert!(matches!(
            TlsConfig::from_files(Some(&cert), None, Some(&cert)),
            Err(ClientError::InvalidConfig(_))
        ));
        assert!(matches!(
            TlsConfig::from_files(None, Some(&cert), Some(&cert)),
            Err(ClientError::InvalidConfig(_))
        ));
        assert_eq!(TlsConfig::from_files(None, None, None).ok(), Some(None));
        assert!(matches!(
            TlsConfig::from_files(Some(&dir.path().join("missing")), None, None),
            Err(ClientError::InvalidConfig(_))
        ));
    }
}
