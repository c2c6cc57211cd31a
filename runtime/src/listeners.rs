//! A server's two listeners, as Kafka names them: the internal one (what brokers,
//! coordinators and clients on the cluster's own network dial) and an optional external
//! one (what clients outside that network dial: the host of a docker compose cluster,
//! a load balancer). Each listener has its own bound address and its own advertised
//! address, and every address a server hands out (Metadata's brokers, FindCoordinator's
//! coordinator) is the one of the listener the request arrived on: a client that came
//! in from outside is only told addresses it can reach from outside.

use std::net::SocketAddr;

use crate::config_error::{check_advertised, ConfigError};

/// The listener a request arrived on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    Internal,
    External,
}

/// The addresses the server's sockets are bound to: they tell the listener of a
/// request from the local address of its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BoundListeners {
    pub internal: SocketAddr,
    pub external: Option<SocketAddr>,
}

impl BoundListeners {
    /// The listener `request` came in on, for a service that knows its sockets
    /// (`None`: a single listener, or no socket at all, as in-process).
    pub fn of_request<T>(bound: Option<BoundListeners>, request: &tonic::Request<T>) -> Listener {
        bound.map_or(Listener::Internal, |b| b.listener_of(request.local_addr()))
    }

    /// The listener a connection whose local address is `local` was accepted on.
    /// Connections of unknown origin (an in-process channel has no address) count as
    /// internal: that is what every server without an external listener answers.
    pub fn listener_of(&self, local: Option<SocketAddr>) -> Listener {
        match (self.external, local) {
            (Some(external), Some(local)) if accepted_on(external, local) => Listener::External,
            _ => Listener::Internal,
        }
    }
}

/// Whether a connection with local address `local` came through a socket bound to
/// `bound`. A socket bound to the unspecified address (0.0.0.0, ::) accepts on every
/// interface, so only the port tells; otherwise the address must match too.
fn accepted_on(bound: SocketAddr, local: SocketAddr) -> bool {
    bound.port() == local.port() && (bound.ip().is_unspecified() || bound.ip() == local.ip())
}

/// The `host:port`s a server publishes for its listeners.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advertised {
    pub internal: String,
    pub external: Option<String>,
}

impl Advertised {
    /// What a server bound to `bound` publishes: each listener's advertised address
    /// (`--advertise`, `--external-advertise`) if given, else the address bound.
    pub fn resolve(bound: BoundListeners, internal: Option<&str>, external: Option<&str>) -> Self {
        Advertised {
            internal: internal.map_or_else(|| bound.internal.to_string(), str::to_string),
            external: bound
                .external
                .map(|addr| external.map_or_else(|| addr.to_string(), str::to_string)),
        }
    }

    /// The address to hand a client that came in on `listener`.
    pub fn on(&self, listener: Listener) -> &str {
        pick(listener, &self.internal, self.external.as_deref())
    }
}

/// Of a peer's two published addresses, the one for a client on `listener`. A peer
/// without an external address (a listener not configured on every member) is
/// given by its internal one: better an address that may not be reachable than none.
pub fn pick<'a>(listener: Listener, internal: &'a str, external: Option<&'a str>) -> &'a str {
    match (listener, external) {
        (Listener::External, Some(external)) => external,
        _ => internal,
    }
}

/// Refuses an external listener that cannot work: an advertised address with nothing
/// bound to answer it, an address that is not `host:port`, or the internal listener's
/// own address (one socket cannot be two listeners). `flags` names the two flags.
pub fn check_external(
    flags: (&'static str, &'static str),
    internal: SocketAddr,
    listen: Option<SocketAddr>,
    advertise: Option<&str>,
) -> Result<(), ConfigError> {
    let (listen_flag, advertise_flag) = flags;
    check_advertised(advertise_flag, advertise)?;
    match listen {
        None if advertise.is_some() => Err(ConfigError::new(
            advertise_flag,
            format!("needs {listen_flag}: nothing would answer on the external address"),
        )),
        Some(external) if external == internal && external.port() != 0 => Err(ConfigError::new(
            listen_flag,
            "must differ from the internal listen address: a request's listener is told by \
             the socket it arrived on",
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().expect("test address")
    }

    #[test]
    fn given_external_flags_then_only_workable_pairs_pass() {
        let flags = ("--external-listen", "--external-advertise");
        let internal = addr("0.0.0.0:9092");
        assert!(check_external(flags, internal, None, None).is_ok());
        assert!(check_external(flags, internal, Some(addr("0.0.0.0:19092")), None).is_ok());
        assert!(check_external(
            flags,
            internal,
            Some(addr("0.0.0.0:19092")),
            Some("127.0.0.1:19091")
        )
        .is_ok());
        let refused = check_external(flags, internal, None, Some("127.0.0.1:19091"))
            .expect_err("advertised with nothing bound");
        assert!(
            refused.to_string().contains("--external-advertise"),
            "{refused}"
        );
        let refused = check_external(flags, internal, Some(addr("0.0.0.0:19092")), Some("h"))
            .expect_err("no port");
        assert!(
            refused.to_string().contains("--external-advertise"),
            "{refused}"
        );
        let refused =
            check_external(flags, internal, Some(internal), None).expect_err("same socket twice");
        assert!(
            refused.to_string().contains("--external-listen"),
            "{refused}"
        );
    }

    #[test]
    fn given_no_external_listener_then_every_request_is_internal() {
        let bound = BoundListeners {
            internal: addr("0.0.0.0:9092"),
            external: None,
        };
        assert_eq!(
            bound.listener_of(Some(addr("10.0.0.5:19092"))),
            Listener::Internal
        );
        assert_eq!(bound.listener_of(None), Listener::Internal);
    }

    #[test]
    fn given_an_unspecified_external_address_then_its_port_decides() {
        let bound = BoundListeners {
            internal: addr("0.0.0.0:9092"),
            external: Some(addr("0.0.0.0:19092")),
        };
        assert_eq!(
            bound.listener_of(Some(addr("172.18.0.3:19092"))),
            Listener::External
        );
        assert_eq!(
            bound.listener_of(Some(addr("172.18.0.3:9092"))),
            Listener::Internal
        );
        assert_eq!(bound.listener_of(None), Listener::Internal);
    }

    #[test]
    fn given_a_specific_external_address_then_address_and_port_must_match() {
        let bound = BoundListeners {
            internal: addr("10.0.0.1:9092"),
            external: Some(addr("192.168.1.1:9092")),
        };
        assert_eq!(
            bound.listener_of(Some(addr("192.168.1.1:9092"))),
            Listener::External
        );
        assert_eq!(
            bound.listener_of(Some(addr("10.0.0.1:9092"))),
            Listener::Internal
        );
    }

    #[test]
    fn given_a_peer_without_an_external_address_then_its_internal_one_is_given() {
        assert_eq!(pick(Listener::External, "b1:9092", None), "b1:9092");
        assert_eq!(
            pick(Listener::External, "b1:9092", Some("127.0.0.1:19091")),
            "127.0.0.1:19091"
        );
        assert_eq!(
            pick(Listener::Internal, "b1:9092", Some("127.0.0.1:19091")),
            "b1:9092"
        );
        let bound = BoundListeners {
            internal: addr("0.0.0.0:9092"),
            external: Some(addr("0.0.0.0:19092")),
        };
        let advertised = Advertised::resolve(bound, Some("b0:9092"), Some("127.0.0.1:19090"));
        assert_eq!(advertised.on(Listener::External), "127.0.0.1:19090");
        assert_eq!(advertised.on(Listener::Internal), "b0:9092");
        let defaulted = Advertised::resolve(bound, None, None);
        assert_eq!(
            (defaulted.internal.as_str(), defaulted.external.as_deref()),
            ("0.0.0.0:9092", Some("0.0.0.0:19092"))
        );
        let single = BoundListeners {
            external: None,
            ..bound
        };
        assert_eq!(
            Advertised::resolve(single, None, Some("ignored:1")).external,
            None
        );
    }
}
