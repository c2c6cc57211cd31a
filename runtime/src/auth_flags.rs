//! The authentication and authorization settings every server takes (issue 29), and
//! what they start: the token file checked by the authentication layer, the
//! authorizer, and the credential the server itself presents to other nodes.

use std::path::PathBuf;

use crate::acl::{Authorizer, AuthorizerKind};
use crate::authn::{AuthnLayer, TokenFile, TokenFileError};

#[derive(Debug, Clone, Default, clap::Args)]
pub struct AuthFlags {
    /// `none` (every request allowed, as Kafka without an authorizer) or `acl` (every
    /// RPC checked against the ACLs stored in etcd).
    #[arg(long, env = "IDEM_AUTHORIZER", default_value = "none")]
    pub authorizer: AuthorizerKind,
    /// Principals allowed everything whatever the ACLs say, comma-separated; list the
    /// nodes' own principals here (e.g. `User:broker,User:coordinator`).
    #[arg(long, env = "IDEM_SUPER_USERS", value_delimiter = ',')]
    pub super_users: Vec<String>,
    /// Bearer tokens accepted, one `PRINCIPAL TOKEN` line each; re-read when the file
    /// changes. Without it, requests carry no principal but `User:ANONYMOUS`.
    #[arg(long, env = "IDEM_AUTH_TOKEN_FILE")]
    pub auth_token_file: Option<PathBuf>,
    /// A file holding the bearer token this server presents on its own calls to other
    /// nodes (replica fetches, markers, the transaction log).
    #[arg(long, env = "IDEM_AUTH_TOKEN")]
    pub auth_token: Option<PathBuf>,
}

impl AuthFlags {
    /// The authentication layer and the authorizer these settings ask for; the token
    /// file is followed until `stop`. Logs whether the server is open.
    pub fn start(
        &self,
        stop: &tokio_util::sync::CancellationToken,
    ) -> Result<(AuthnLayer, Authorizer), TokenFileError> {
        let tokens = self
            .auth_token_file
            .as_deref()
            .map(TokenFile::load)
            .transpose()?;
        if let Some(tokens) = &tokens {
            tokens.spawn_reload(stop.child_token());
        }
        match self.authorizer {
            // INFO, not WARN: open is the default, as in Kafka without an authorizer, and
            // a warning on every start of every server would be noise (idem dev prints it).
            AuthorizerKind::None => {
                tracing::info!("authorization is off (--authorizer none): every request is allowed")
            }
            AuthorizerKind::Acl => tracing::info!(
                super_users = ?self.super_users,
                token_file = ?self.auth_token_file,
                "every RPC is checked against the ACLs (--authorizer acl)"
            ),
        }
        let authorizer = Authorizer::new(self.authorizer, self.super_users.iter().cloned());
        Ok((AuthnLayer::new(tokens), authorizer))
    }

    /// The token this server presents, read from `--auth-token`.
    pub fn own_token(&self) -> Result<Option<String>, TokenFileError> {
        self.auth_token
            .as_deref()
            .map(|path| {
                std::fs::read_to_string(path)
                    .map(|token| token.trim().to_string())
                    .map_err(|source| TokenFileError::Read {
                        path: path.to_path_buf(),
                        source,
                    })
            })
            .transpose()
    }
}
