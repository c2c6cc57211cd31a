//! The token of one claim of one transaction log partition. It is lost exactly once —
//! by the ownership backend (owner key gone, lease lapsed) or by the core (a broker
//! fenced our writes) — and never found again: a new claim gets a new token. Everything
//! working for the claim (writer, loader, marker writes) checks or awaits it.

use std::sync::Arc;

use tokio::sync::watch;

#[derive(Debug, Clone)]
pub struct OwnershipToken {
    lost: Arc<watch::Sender<bool>>,
}

impl Default for OwnershipToken {
    fn default() -> Self {
        Self::new()
    }
}

impl OwnershipToken {
    pub fn new() -> Self {
        let (lost, _) = watch::channel(false);
        OwnershipToken {
            lost: Arc::new(lost),
        }
    }

    /// Marks the claim lost; returns whether this call was the one that lost it.
    pub fn lose(&self) -> bool {
        self.lost
            .send_if_modified(|lost| !std::mem::replace(lost, true))
    }

    pub fn is_lost(&self) -> bool {
        *self.lost.borrow()
    }

    /// Resolves once the claim is lost.
    pub async fn lost(&self) {
        let mut rx = self.lost.subscribe();
        // The sender lives in `self`, so waiting cannot fail while we hold it.
        let _ = rx.wait_for(|lost| *lost).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_token_is_lost_once_and_every_clone_sees_it() {
        let token = OwnershipToken::new();
        let clone = token.clone();
        assert!(!clone.is_lost());
        let waiter = tokio::spawn(async move { clone.lost().await });
        assert!(token.lose());
        assert!(!token.lose(), "only the first call loses it");
        assert!(token.is_lost());
        waiter.await.expect("woken");
    }
}
