//! The authenticated principal of one request, as the authentication layer left it in
//! the request's extensions.

use std::sync::Arc;

use crate::acl::ANONYMOUS;

/// `User:<name>`: who a request comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal(pub Arc<str>);

impl Principal {
    pub fn user(name: &str) -> Principal {
        Principal(Arc::from(format!("User:{name}")))
    }

    pub fn anonymous() -> Principal {
        Principal(Arc::from(ANONYMOUS))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The principal of `request`; `User:ANONYMOUS` when no authentication layer ran
/// (in-process calls, as `idem dev` makes) or none was presented.
pub fn principal_of<T>(request: &tonic::Request<T>) -> &str {
    request
        .extensions()
        .get::<Principal>()
        .map_or(ANONYMOUS, Principal::as_str)
}
