//! Health that tells the truth: a server reports SERVING through the standard gRPC
//! health service only while it can do its job: its state is loaded (a broker's logs,
//! a coordinator's slices), it holds its etcd lease, and it is not stopping. Each
//! condition is published on a `watch` channel, so tests, metrics and the health
//! service all read the one source.

use tokio::sync::watch;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

/// What a server must have to serve. Starts as "loading, lease held": a server without
/// etcd has no lease to lose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Readiness {
    /// Its state is loaded (a broker's logs, a coordinator's slices).
    pub loaded: bool,
    /// It holds its etcd lease (always true without etcd).
    pub lease_held: bool,
    /// It was asked to stop.
    pub stopping: bool,
    /// Every replica it holds is in its partition's ISR (brokers; always true
    /// elsewhere): a broker restarted is serving before it has caught up.
    pub caught_up: bool,
}

/// The health service name that reports SERVING only while the server serves AND has
/// caught up (Kubernetes' readiness probe of brokers: a rolling restart must not stop
/// the next broker while the last one is still out of some ISR).
pub const CAUGHT_UP_SERVICE: &str = "idem.CaughtUp";

impl Readiness {
    pub fn serving(&self) -> bool {
        self.loaded && self.lease_held && !self.stopping
    }

    pub fn serving_caught_up(&self) -> bool {
        self.serving() && self.caught_up
    }
}

impl Default for Readiness {
    fn default() -> Self {
        Readiness {
            loaded: false,
            lease_held: true,
            stopping: false,
            caught_up: true,
        }
    }
}

/// A server's readiness, as it publishes it.
#[derive(Debug, Clone)]
pub struct Health {
    readiness: watch::Sender<Readiness>,
}

impl Default for Health {
    fn default() -> Self {
        Health::new()
    }
}

impl Health {
    pub fn new() -> Health {
        Health {
            readiness: watch::Sender::new(Readiness::default()),
        }
    }

    pub fn set_loaded(&self, loaded: bool) {
        self.readiness
            .send_if_modified(|r| replace(&mut r.loaded, loaded));
    }

    pub fn set_lease_held(&self, held: bool) {
        self.readiness
            .send_if_modified(|r| replace(&mut r.lease_held, held));
    }

    pub fn set_caught_up(&self, caught_up: bool) {
        self.readiness
            .send_if_modified(|r| replace(&mut r.caught_up, caught_up));
    }

    pub fn set_stopping(&self) {
        self.readiness
            .send_if_modified(|r| replace(&mut r.stopping, true));
    }

    pub fn readiness(&self) -> Readiness {
        *self.readiness.borrow()
    }

    pub fn subscribe(&self) -> watch::Receiver<Readiness> {
        self.readiness.subscribe()
    }

    /// Mirrors every change onto the gRPC health service for `service` and for the
    /// whole server (the empty name); runs until the [`Health`] is dropped.
    pub async fn report(self, reporter: HealthReporter, service: &'static str) {
        let mut readiness = self.subscribe();
        drop(self);
        loop {
            let now = *readiness.borrow_and_update();
            let status_of = |up: bool| {
                if up {
                    ServingStatus::Serving
                } else {
                    ServingStatus::NotServing
                }
            };
            let status = status_of(now.serving());
            tracing::info!(
                service,
                loaded = now.loaded,
                lease_held = now.lease_held,
                stopping = now.stopping,
                caught_up = now.caught_up,
                serving = now.serving(),
                "health"
            );
            reporter.set_service_status(service, status).await;
            reporter.set_service_status("", status).await;
            reporter
                .set_service_status(CAUGHT_UP_SERVICE, status_of(now.serving_caught_up()))
                .await;
            if readiness.changed().await.is_err() {
                return;
            }
        }
    }
}

/// Sets `*slot` to `value`, saying whether it changed.
fn replace(slot: &mut bool, value: bool) -> bool {
    let changed = *slot != value;
    *slot = value;
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serving_needs_loaded_state_a_held_lease_and_no_stop() {
        let health = Health::new();
        assert!(!health.readiness().serving(), "loading at first");
        health.set_loaded(true);
        assert!(health.readiness().serving());
        health.set_lease_held(false);
        assert!(!health.readiness().serving(), "lease lost");
        health.set_lease_held(true);
        assert!(health.readiness().serving(), "registered again");
        health.set_stopping();
        assert!(!health.readiness().serving(), "stopping");
    }

    #[test]
    fn caught_up_needs_serving_and_every_replica_in_sync() {
        let health = Health::new();
        health.set_loaded(true);
        assert!(health.readiness().serving_caught_up());
        health.set_caught_up(false);
        assert!(health.readiness().serving(), "serving while catching up");
        assert!(!health.readiness().serving_caught_up());
        health.set_caught_up(true);
        health.set_stopping();
        assert!(!health.readiness().serving_caught_up(), "stopping");
    }

    #[tokio::test]
    async fn the_health_service_follows_readiness() {
        let (reporter, _service) = tonic_health::server::health_reporter();
        let health = Health::new();
        let mut seen = health.subscribe();
        tokio::spawn(health.clone().report(reporter, "idem.v1.Test"));
        health.set_loaded(true);
        let serving = seen.wait_for(|r| r.serving()).await.map(|r| *r);
        assert!(serving.is_ok());
    }
}
