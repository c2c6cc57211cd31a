//! The credential a server presents on its own calls to other nodes (replica
//! fetches): `authorization: Bearer <token>` from `--auth-token`, as a tonic
//! interceptor. No token: the call is `User:ANONYMOUS`. The interceptor also writes
//! the caller's trace context ([`crate::traces::inject_current`]): it is the one place
//! every inter-node call of a broker passes.

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;

#[derive(Clone, Default)]
pub struct NodeCredential {
    authorization: Option<MetadataValue<Ascii>>,
}

impl std::fmt::Debug for NodeCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.authorization {
            Some(_) => "NodeCredential(bearer token)",
            None => "NodeCredential(none)",
        })
    }
}

#[derive(Debug, thiserror::Error)]
#[error("the token of --auth-token cannot be sent in a header (empty, or a control character)")]
pub struct UnsendableToken;

impl NodeCredential {
    pub fn bearer(token: Option<&str>) -> Result<NodeCredential, UnsendableToken> {
        let authorization = match token.map(str::trim) {
            None => None,
            Some("") => return Err(UnsendableToken),
            Some(token) => Some(
                format!("Bearer {token}")
                    .parse::<MetadataValue<Ascii>>()
                    .map_err(|_| UnsendableToken)?,
            ),
        };
        Ok(NodeCredential { authorization })
    }
}

impl Interceptor for NodeCredential {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.authorization {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        let mut headers = std::mem::take(request.metadata_mut()).into_headers();
        crate::traces::inject_current(&mut headers);
        *request.metadata_mut() = tonic::metadata::MetadataMap::from_headers(headers);
        Ok(request)
    }
}
