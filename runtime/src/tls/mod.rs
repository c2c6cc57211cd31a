//! TLS on every gRPC listener of a server, and on the connections it opens to other
//! members: the files and what they load into ([`files`]), the accept path that runs
//! each handshake off the accept loop with the current certificate ([`acceptor`]), the
//! TLS the server dials members with ([`peer`]), and reloading the files on SIGHUP
//! ([`reload`]) for both.

pub mod acceptor;
pub mod files;
pub mod peer;
pub mod reload;

pub use acceptor::{HandshakeError, ServerTls};
pub use files::{ClientAuth, LoadedTls, TlsFiles};
pub use peer::PeerTls;
