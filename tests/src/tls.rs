//! Certificates made at test time (rcgen): a CA, server certificates for 127.0.0.1 and
//! localhost, client certificates with a chosen common name, and the PEM files a TLS
//! server or client is started with. Every server certificate is good for client
//! authentication too, since brokers and coordinators present it to each other.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A certificate and its private key, PEM.
#[derive(Debug, Clone)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
    /// The certificate, DER (what a server sees as the peer's certificate).
    pub cert_der: Vec<u8>,
}

/// A test certificate authority.
pub struct CertAuthority {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
}

impl CertAuthority {
    /// A new self-signed CA named `name`.
    pub fn new(name: &str) -> CertAuthority {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).expect("self-signed CA");
        CertAuthority {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// A server certificate for 127.0.0.1 and localhost (and `extra` names), also good
    /// as a client certificate.
    pub fn server(&self, extra: &[&str]) -> Issued {
        let mut names = vec!["127.0.0.1".to_string(), "localhost".to_string()];
        names.extend(extra.iter().map(|n| n.to_string()));
        self.issue(names, "idem server")
    }

    /// A client certificate whose subject common name is `common_name`.
    pub fn client(&self, common_name: &str) -> Issued {
        self.issue(Vec::new(), common_name)
    }

    /// An SDK client's TLS config trusting this CA and presenting a certificate it
    /// issued for `common_name` (the principal `User:{common_name}` under mutual TLS).
    pub fn client_config(&self, common_name: &str) -> idem_client::TlsConfig {
        let issued = self.client(common_name);
        idem_client::TlsConfig::new(self.cert_pem())
            .with_client_identity(issued.cert_pem, issued.key_pem)
    }

    fn issue(&self, names: Vec<String>, common_name: &str) -> Issued {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(names).expect("params");
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            cert_der: cert.der().to_vec(),
        }
    }
}

/// The files of one TLS identity in a directory: `{name}.crt`, `{name}.key` and the CA
/// as `{name}-ca.crt`.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

impl TlsFiles {
    /// Writes `issued` and `ca` under `dir`.
    pub fn write(dir: &Path, name: &str, issued: &Issued, ca: &CertAuthority) -> TlsFiles {
        let files = TlsFiles {
            cert: dir.join(format!("{name}.crt")),
            key: dir.join(format!("{name}.key")),
            ca: dir.join(format!("{name}-ca.crt")),
        };
        files.replace(issued, ca.cert_pem());
        files
    }

    /// Writes new contents over the files (a certificate rotation).
    pub fn replace(&self, issued: &Issued, ca_pem: &str) {
        std::fs::write(&self.cert, &issued.cert_pem).expect("write cert");
        std::fs::write(&self.key, &issued.key_pem).expect("write key");
        std::fs::write(&self.ca, ca_pem).expect("write CA");
    }

    /// The server flags naming these files.
    pub fn server_flags(&self, client_auth: &str) -> Vec<String> {
        vec![
            "--tls-cert".into(),
            self.cert.display().to_string(),
            "--tls-key".into(),
            self.key.display().to_string(),
            "--tls-ca".into(),
            self.ca.display().to_string(),
            "--tls-client-auth".into(),
            client_auth.into(),
        ]
    }

    /// Mutual TLS with ACLs on: a client's certificate names its principal, and the
    /// server's own (`User:idem server`) and `User:admin` are super users.
    pub fn mutual_tls_acl_flags(&self) -> Vec<String> {
        let mut flags = self.server_flags("required");
        flags.extend(
            [
                "--authorizer",
                "acl",
                "--super-users",
                "User:idem server,User:admin",
            ]
            .map(String::from),
        );
        flags
    }
}
