//! The TLS a server dials other members with (its own certificate as the client
//! certificate, the CA as the only trust anchor), kept current: a SIGHUP that reloads
//! the server's files replaces it too (see [`crate::tls::reload`]), so every connection
//! dialled afterwards presents the rotated certificate. Connections already open keep
//! their session, as the listeners' do.

use std::sync::{Arc, RwLock};

use tonic::transport::ClientTlsConfig;

use crate::tls::files::LoadedTls;

/// A handle on the current peer TLS; clones share it.
#[derive(Clone)]
pub struct PeerTls {
    current: Arc<RwLock<ClientTlsConfig>>,
}

impl std::fmt::Debug for PeerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("PeerTls").finish_non_exhaustive()
    }
}

impl PeerTls {
    pub fn new(loaded: &LoadedTls) -> PeerTls {
        PeerTls {
            current: Arc::new(RwLock::new(loaded.peer_client_config())),
        }
    }

    /// The client TLS to dial a member with now.
    pub fn client_config(&self) -> ClientTlsConfig {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Makes `loaded` what every connection dialled from now on presents.
    pub fn replace(&self, loaded: &LoadedTls) {
        *self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = loaded.peer_client_config();
    }
}
