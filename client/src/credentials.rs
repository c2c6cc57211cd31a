//! What the SDK presents to the cluster (issue 29): a bearer token sent as
//! `authorization: Bearer <token>` on every call of every channel of a
//! [`crate::Connection`] (brokers and coordinators alike). No token: the cluster sees
//! `User:ANONYMOUS`.

use std::path::Path;
use std::task::{Context, Poll};

use tonic::codegen::http::{self, HeaderValue};
use tonic::codegen::Service;
use tonic::transport::Channel;

use crate::error::ClientError;

/// The credential a connection presents. Its `Debug` never shows the token.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    authorization: Option<HeaderValue>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.authorization {
            Some(_) => "Credentials(bearer token)",
            None => "Credentials(none)",
        })
    }
}

impl Credentials {
    /// No credential: `User:ANONYMOUS`.
    pub fn none() -> Credentials {
        Credentials::default()
    }

    /// A bearer token; refused when empty or not sendable in a header.
    pub fn bearer(token: &str) -> Result<Credentials, ClientError> {
        let token = token.trim();
        if token.is_empty() {
            return Err(ClientError::InvalidConfig(
                "the bearer token is empty".into(),
            ));
        }
        let mut value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
            ClientError::InvalidConfig(
                "the bearer token holds characters a header cannot carry".into(),
            )
        })?;
        value.set_sensitive(true);
        Ok(Credentials {
            authorization: Some(value),
        })
    }

    /// The bearer token held by the file at `path` (surrounding whitespace ignored),
    /// so the token need not appear on a command line.
    pub fn bearer_from_file(path: &Path) -> Result<Credentials, ClientError> {
        let token = std::fs::read_to_string(path).map_err(|e| {
            ClientError::InvalidConfig(format!("cannot read token file {}: {e}", path.display()))
        })?;
        Credentials::bearer(&token)
    }

    /// `Credentials::bearer_from_file` when a path is given, else none.
    pub fn from_token_path(path: Option<&Path>) -> Result<Credentials, ClientError> {
        path.map_or(Ok(Credentials::none()), Credentials::bearer_from_file)
    }
}

/// A channel that adds the connection's credential to every request.
#[derive(Debug, Clone)]
pub struct AuthChannel {
    channel: Channel,
    credentials: Credentials,
}

impl AuthChannel {
    pub fn new(channel: Channel, credentials: Credentials) -> AuthChannel {
        AuthChannel {
            channel,
            credentials,
        }
    }
}

impl Service<http::Request<tonic::body::Body>> for AuthChannel {
    type Response = http::Response<tonic::body::Body>;
    type Error = tonic::transport::Error;
    type Future = <Channel as Service<http::Request<tonic::body::Body>>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Service::poll_ready(&mut self.channel, cx)
    }

    fn call(&mut self, mut request: http::Request<tonic::body::Body>) -> Self::Future {
        if let Some(value) = &self.credentials.authorization {
            request
                .headers_mut()
                .insert(http::header::AUTHORIZATION, value.clone());
        }
        // The caller's span continues on the node called (the coordinator's marker
        // rounds on the brokers that write them).
        #[cfg(feature = "otel")]
        crate::trace_context::inject_rpc(request.headers_mut());
        self.channel.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_or_unsendable_token_is_refused() {
        assert!(matches!(
            Credentials::bearer("  "),
            Err(ClientError::InvalidConfig(_))
        ));
        assert!(matches!(
            Credentials::bearer("a\nb"),
            Err(ClientError::InvalidConfig(_))
        ));
        assert!(Credentials::bearer("t-a\n").is_ok());
    }

    #[test]
    fn debug_never_shows_the_token() {
        let credentials = Credentials::bearer("secret").expect("valid");
        assert!(!format!("{credentials:?}").contains("secret"));
    }
}
