//! Who sent a request (issue 29). [`layer`] puts a [`Principal`] into every request's
//! extensions: from a bearer token checked against a [`token_file`], else from the
//! client certificate's subject ([`certificate`]), else `User:ANONYMOUS`. Handlers
//! read it with [`principal_of`].

pub mod certificate;
pub mod layer;
pub mod node_credential;
pub mod principal;
pub mod token_file;

pub use layer::{AuthnLayer, NodeToken};
pub use node_credential::NodeCredential;
pub use principal::{principal_of, Principal};
pub use token_file::{TokenFile, TokenFileError, Tokens};
