//! The principal a client certificate names: `User:<CN>` from the subject's first
//! common name, as Kafka's default SSL principal mapping gives for a bare CN. For a
//! TLS listener with client authentication (mTLS), from `Request::peer_certs()`.

use x509_parser::prelude::{FromDer, X509Certificate};

use super::principal::Principal;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertificateError {
    #[error("client certificate is not valid DER X.509: {0}")]
    Parse(String),
    #[error("client certificate subject {0:?} has no common name (CN)")]
    NoCommonName(String),
}

/// The principal of the leaf certificate `der` (the first of a peer's chain).
pub fn principal_from_certificate(der: &[u8]) -> Result<Principal, CertificateError> {
    let (_, certificate) =
        X509Certificate::from_der(der).map_err(|e| CertificateError::Parse(e.to_string()))?;
    let subject = certificate.subject();
    let common_name = subject
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .filter(|cn| !cn.is_empty())
        .ok_or_else(|| CertificateError::NoCommonName(subject.to_string()))?;
    Ok(Principal::user(common_name))
}

#[cfg(test)]
mod tests {
    use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair};

    use super::*;

    fn certificate(subject: &[(DnType, &str)]) -> Vec<u8> {
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).expect("params");
        let mut name = DistinguishedName::new();
        for (kind, value) in subject {
            name.push(kind.clone(), *value);
        }
        params.distinguished_name = name;
        let key = KeyPair::generate().expect("key");
        params
            .self_signed(&key)
            .expect("certificate")
            .der()
            .to_vec()
    }

    #[test]
    fn the_subjects_common_name_is_the_user() {
        let der = certificate(&[
            (DnType::OrganizationName, "Example"),
            (DnType::CommonName, "alice"),
        ]);
        assert_eq!(
            principal_from_certificate(&der),
            Ok(Principal::user("alice"))
        );
    }

    #[test]
    fn a_subject_without_common_name_is_refused() {
        let der = certificate(&[(DnType::OrganizationName, "Example")]);
        assert!(matches!(
            principal_from_certificate(&der),
            Err(CertificateError::NoCommonName(subject)) if subject.contains("Example")
        ));
    }

    #[test]
    fn garbage_is_refused() {
        assert!(matches!(
            principal_from_certificate(b"not a certificate"),
            Err(CertificateError::Parse(_))
        ));
    }
}
