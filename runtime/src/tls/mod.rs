//! TLS on every gRPC listener of a server, and on the connections it opens to other
//! members: the files and what they load into ([`files`]), the accept path that runs
//! each handshake off the accept loop with the current certificate ([`acceptor`]), and
//! reloading the files on SIGHUP ([`reload`]).

pub mod acceptor;
pub mod files;
pub mod reload;

pub use acceptor::ServerTls;
pub use files::{ClientAuth, LoadedTls, TlsFiles};
