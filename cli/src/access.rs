//! How the client subcommands reach a cluster: the bearer token (`--auth-token`) and
//! the TLS settings (`--tls-ca`, `--tls-cert`, `--tls-key`) every one of their
//! connections presents, and the admin connection most of them start with.

use anyhow::Context;
use idem_client::credentials::Credentials;
use idem_client::{Admin, TlsConfig};

/// What every connection of a client subcommand presents.
#[derive(Debug, Clone, Default)]
pub struct Access {
    pub credentials: Credentials,
    pub tls: Option<TlsConfig>,
}

impl Access {
    /// An admin client of `bootstrap` with these credentials and TLS settings.
    pub async fn admin(&self, bootstrap: &str) -> anyhow::Result<Admin> {
        Admin::connect_with(bootstrap, self.credentials.clone(), self.tls.clone())
            .await
            .with_context(|| format!("connecting to {bootstrap}"))
    }
}
