//! The authentication layer [`crate::grpc_server`] puts in front of every server's
//! routes: it reads `authorization: Bearer <token>`, checks the token against the
//! token file and puts the [`Principal`] into the request's extensions. A token the
//! file does not hold is answered UNAUTHENTICATED before any service sees the request.
//! Without a token (or without a token file), a client certificate the TLS listener
//! verified (mutual TLS) names the principal, `User:<CN>`
//! ([`super::certificate`]); one without a common name is refused. No credential at
//! all is `User:ANONYMOUS`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tower::{Layer, Service};

use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};

use super::certificate::{principal_from_certificate, CertificateError};
use super::principal::Principal;
use super::token_file::TokenFile;

#[derive(Debug, Clone, Default)]
pub struct AuthnLayer {
    tokens: Option<TokenFile>,
    node: Option<NodeToken>,
}

/// A token no file holds, naming the process's own principal: what `idem dev`'s
/// coordinator presents to its broker (made at start, never written anywhere).
#[derive(Clone)]
pub struct NodeToken {
    pub token: Arc<str>,
    pub principal: Principal,
}

impl std::fmt::Debug for NodeToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NodeToken({})", self.principal.as_str())
    }
}

impl AuthnLayer {
    pub fn new(tokens: Option<TokenFile>) -> AuthnLayer {
        AuthnLayer { tokens, node: None }
    }

    /// The token file checked, if any: the Kafka listener's SASL checks the same one.
    pub fn tokens(&self) -> Option<&TokenFile> {
        self.tokens.as_ref()
    }

    /// Also accepts `node`'s token, as its principal.
    pub fn with_node_token(mut self, node: Option<NodeToken>) -> AuthnLayer {
        self.node = node;
        self
    }
}

impl<S> Layer<S> for AuthnLayer {
    type Service = Authn<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Authn {
            inner,
            tokens: self.tokens.clone(),
            node: self.node.clone(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Authn<S> {
    inner: S,
    tokens: Option<TokenFile>,
    node: Option<NodeToken>,
}

/// What a request's credentials say.
#[derive(Debug, PartialEq, Eq)]
enum Authenticated {
    As(Principal),
    Refused(String),
}

/// The principal of the client's certificate, when the connection is TLS and the
/// client presented one (the listener verified it against `--tls-ca`): the leaf,
/// parsed where it lies (the chain is shared with the connection, not copied).
fn certificate_principal<B>(
    request: &http::Request<B>,
) -> Option<Result<Principal, CertificateError>> {
    let info = request
        .extensions()
        .get::<TlsConnectInfo<TcpConnectInfo>>()?;
    let chain = info.peer_certs()?;
    chain
        .first()
        .map(|leaf| principal_from_certificate(leaf.as_ref()))
}

/// The node's own principal, when the request presents the node's token.
fn node_principal(
    header: Option<&http::HeaderValue>,
    node: Option<&NodeToken>,
) -> Option<Principal> {
    let node = node?;
    let token = header?.to_str().ok()?.strip_prefix("Bearer ")?.trim();
    same_secret(token.as_bytes(), node.token.as_bytes()).then(|| node.principal.clone())
}

/// Whether two secrets are equal, in a time that does not depend on where they differ:
/// the node token names a super user, so a caller must not learn it byte by byte.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

/// Who a request is. `certificate` is asked only when no checked token names the
/// principal, so a token-authenticated request (and a plaintext one) parses nothing.
fn authenticate(
    header: Option<&http::HeaderValue>,
    tokens: Option<&TokenFile>,
    certificate: impl FnOnce() -> Option<Result<Principal, CertificateError>>,
) -> Authenticated {
    let (Some(header), Some(tokens)) = (header, tokens) else {
        return match certificate() {
            Some(Ok(principal)) => Authenticated::As(principal),
            Some(Err(e)) => Authenticated::Refused(e.to_string()),
            None => Authenticated::As(Principal::anonymous()),
        };
    };
    let Some(token) = header
        .to_str()
        .ok()
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::trim)
    else {
        return Authenticated::Refused(
            "the authorization header is not of the form `Bearer <token>`".to_string(),
        );
    };
    match tokens.current().principal(token) {
        Some(principal) => Authenticated::As(principal.clone()),
        None => {
            Authenticated::Refused("invalid bearer token: this server does not know it".to_string())
        }
    }
}

impl<S, B, R> Service<http::Request<B>> for Authn<S>
where
    S: Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
    R: Default + Send + 'static,
    S::Error: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let header = request.headers().get(http::header::AUTHORIZATION);
        let authenticated = match node_principal(header, self.node.as_ref()) {
            Some(node) => Authenticated::As(node),
            None => authenticate(header, self.tokens.as_ref(), || {
                certificate_principal(&request)
            }),
        };
        match authenticated {
            Authenticated::As(principal) => {
                request.extensions_mut().insert(principal);
                Box::pin(self.inner.call(request))
            }
            Authenticated::Refused(why) => {
                let refusal = tonic::Status::unauthenticated(why).into_http();
                Box::pin(async move { Ok(refusal) })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn tokens() -> TokenFile {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("tokens");
        std::fs::write(&path, "alice t-a\n").expect("write");
        TokenFile::load(Path::new(&path)).expect("loaded")
    }

    #[test]
    fn a_known_token_names_its_principal() {
        let header = http::HeaderValue::from_static("Bearer t-a");
        assert_eq!(
            authenticate(Some(&header), Some(&tokens()), || None),
            Authenticated::As(Principal::user("alice"))
        );
    }

    #[test]
    fn an_unknown_token_or_a_malformed_header_is_refused() {
        let unknown = http::HeaderValue::from_static("Bearer nope");
        assert!(matches!(
            authenticate(Some(&unknown), Some(&tokens()), || None),
            Authenticated::Refused(why) if why.contains("invalid bearer token")
        ));
        let basic = http::HeaderValue::from_static("Basic YTpi");
        assert!(matches!(
            authenticate(Some(&basic), Some(&tokens()), || None),
            Authenticated::Refused(_)
        ));
    }

    #[test]
    fn the_node_token_names_the_node_and_no_other_token_does() {
        let node = NodeToken {
            token: Arc::from("n-1"),
            principal: Principal::user("node"),
        };
        let header = http::HeaderValue::from_static("Bearer n-1");
        assert_eq!(
            node_principal(Some(&header), Some(&node)),
            Some(Principal::user("node"))
        );
        let other = http::HeaderValue::from_static("Bearer t-a");
        assert_eq!(node_principal(Some(&other), Some(&node)), None);
        let longer = http::HeaderValue::from_static("Bearer n-12");
        assert_eq!(node_principal(Some(&longer), Some(&node)), None);
        let same_length = http::HeaderValue::from_static("Bearer n-2");
        assert_eq!(node_principal(Some(&same_length), Some(&node)), None);
        assert_eq!(node_principal(Some(&header), None), None);
        assert_eq!(node_principal(None, Some(&node)), None);
    }

    #[test]
    fn no_credential_is_anonymous() {
        assert_eq!(
            authenticate(None, Some(&tokens()), || None),
            Authenticated::As(Principal::anonymous())
        );
    }

    fn certificate(common_name: Option<&str>) -> Vec<u8> {
        let mut params =
            rcgen::CertificateParams::new(vec!["localhost".to_string()]).expect("params");
        let mut name = rcgen::DistinguishedName::new();
        name.push(rcgen::DnType::OrganizationName, "Example");
        if let Some(cn) = common_name {
            name.push(rcgen::DnType::CommonName, cn);
        }
        params.distinguished_name = name;
        let key = rcgen::KeyPair::generate().expect("key");
        params
            .self_signed(&key)
            .expect("certificate")
            .der()
            .to_vec()
    }

    #[test]
    fn a_client_certificate_names_the_principal_unless_a_token_does() {
        let bob = certificate(Some("bob"));
        assert_eq!(
            authenticate(None, Some(&tokens()), || Some(principal_from_certificate(
                &bob
            ))),
            Authenticated::As(Principal::user("bob"))
        );
        assert_eq!(
            authenticate(None, None, || Some(principal_from_certificate(&bob))),
            Authenticated::As(Principal::user("bob"))
        );
        // A token the server checks is the credential the client chose to present.
        let header = http::HeaderValue::from_static("Bearer t-a");
        assert_eq!(
            authenticate(Some(&header), Some(&tokens()), || unreachable!(
                "a checked token names the principal: no certificate is parsed"
            )),
            Authenticated::As(Principal::user("alice"))
        );
    }

    #[test]
    fn a_client_certificate_without_a_common_name_is_refused() {
        assert!(matches!(
            authenticate(None, None, || Some(principal_from_certificate(&certificate(None)))),
            Authenticated::Refused(why) if why.contains("no common name")
        ));
    }
}
