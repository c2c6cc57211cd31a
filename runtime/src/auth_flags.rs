//! The authentication and authorization settings every server takes (issue 29), and
//! what they start: the token file checked by the authentication layer, the
//! authorizer, and the credential the server itself presents to other nodes.

use std::path::PathBuf;
use std::sync::Arc;

use crate::acl::{Authorizer, AuthorizerKind, EmbeddedAclStore};
use crate::authn::{AuthnLayer, NodeToken, Principal, TokenFile, TokenFileError};

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
    /// Set by `idem dev` only (no flag): where its ACLs are kept, and the identity its
    /// two servers present to each other.
    #[arg(skip)]
    pub dev: Option<DevAuth>,
}

/// The principal `idem dev`'s servers present to each other, a super user. The space
/// keeps it apart from every token-file principal (a name is one word there).
pub const DEV_NODE_PRINCIPAL: &str = "User:idem-dev node";

/// What `idem dev` gives both of its servers: the embedded ACL store, and a token made
/// for this run that names [`DEV_NODE_PRINCIPAL`] (its coordinator writes the
/// transaction log and markers through its broker as that principal).
#[derive(Debug, Clone)]
pub struct DevAuth {
    pub acls: EmbeddedAclStore,
    node: NodeToken,
}

impl DevAuth {
    /// A fresh random node token (128 bits) for this run.
    pub fn new(acls: EmbeddedAclStore) -> DevAuth {
        let token: String = (0..32)
            .map(|_| char::from_digit(rand::random::<u32>() % 16, 16).unwrap_or('0'))
            .collect();
        DevAuth {
            acls,
            node: NodeToken {
                token: Arc::from(token),
                principal: Principal(Arc::from(DEV_NODE_PRINCIPAL)),
            },
        }
    }
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
        let node = self.dev.as_ref().map(|dev| dev.node.clone());
        let super_users = self.super_users.iter().cloned().chain(
            node.as_ref()
                .map(|node| node.principal.as_str().to_string()),
        );
        let authorizer = Authorizer::new(self.authorizer, super_users);
        Ok((AuthnLayer::new(tokens).with_node_token(node), authorizer))
    }

    /// The token this server presents, read from `--auth-token` (in `idem dev`, the
    /// run's node token).
    pub fn own_token(&self) -> Result<Option<String>, TokenFileError> {
        if let Some(dev) = &self.dev {
            return Ok(Some(dev.node.token.to_string()));
        }
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
