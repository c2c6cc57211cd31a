//! Certificates made for one `--compare-tls` run: a CA, a server certificate for
//! 127.0.0.1 (also the coordinator's client certificate towards the broker) and a client
//! certificate, written into the embedded servers' temporary directory, so the TLS rows
//! run with mutual TLS and nothing has to be prepared by hand.

use std::path::{Path, PathBuf};

use anyhow::Context;
use idem_client::TlsConfig;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// The servers' files and the client's settings.
pub struct RunCerts {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
    pub client: TlsConfig,
}

/// Makes a CA and the certificates, and writes the servers' files into `dir`.
pub fn generate(dir: &Path) -> anyhow::Result<RunCerts> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "idem bench CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_pem = ca_params.self_signed(&ca_key)?.pem();
    let issuer = Issuer::new(ca_params, ca_key);
    let issue = |names: Vec<String>, common_name: &str| -> anyhow::Result<(String, String)> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(names)?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        Ok((params.signed_by(&key, &issuer)?.pem(), key.serialize_pem()))
    };
    let (server_cert, server_key) = issue(
        vec!["127.0.0.1".to_string(), "localhost".to_string()],
        "idem bench server",
    )?;
    let (client_cert, client_key) = issue(Vec::new(), "idem bench client")?;
    let write = |name: &str, pem: &str| -> anyhow::Result<PathBuf> {
        let path = dir.join(name);
        std::fs::write(&path, pem).with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    };
    Ok(RunCerts {
        cert: write("server.crt", &server_cert)?,
        key: write("server.key", &server_key)?,
        ca: write("ca.crt", &ca_pem)?,
        client: TlsConfig::new(ca_pem).with_client_identity(client_cert, client_key),
    })
}
