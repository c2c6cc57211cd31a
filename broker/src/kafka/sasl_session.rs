//! Who one Kafka connection is, and the SASL exchange that may change it (KIP-43,
//! KIP-152): a pure state machine the connection's reader drives in request order, so
//! every request runs as the principal the requests before it left.
//!
//! A connection starts as its transport's principal (its client certificate's, else
//! `User:ANONYMOUS`) and keeps it unless it starts SASL. After a SaslHandshake naming
//! an enabled mechanism only ApiVersions and SaslAuthenticate are served; a successful
//! SaslAuthenticate makes the token's principal the connection's for good (it
//! overrides a certificate's, as a bearer token does on gRPC). Every refusal ends the
//! connection after its answer, as Kafka's brokers do; there is no re-authentication
//! (session lifetime 0), so a second handshake is ILLEGAL_SASL_STATE.

use idem_runtime::authn::principal::Principal;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::ResponseError;

use super::sasl_oauthbearer::OAuthBearerError;
use super::sasl_plain::PlainError;

/// The SASL mechanisms served, by the names clients ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    Plain,
    OAuthBearer,
}

impl Mechanism {
    pub const ALL: [Mechanism; 2] = [Mechanism::Plain, Mechanism::OAuthBearer];

    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::OAuthBearer => "OAUTHBEARER",
        }
    }

    /// The mechanism named `name`; exact, as Kafka's brokers compare them.
    pub fn named(name: &str) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// Why a SASL exchange failed; each ends the connection. No variant holds a password
/// or a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SaslError {
    #[error("SASL is not enabled on this broker (it has no --auth-token-file)")]
    NotEnabled,
    #[error("SASL mechanism {0:?} is not enabled; PLAIN and OAUTHBEARER are")]
    UnsupportedMechanism(String),
    #[error("SaslHandshake v0 (raw SASL frames) is not served; v1 is")]
    HandshakeV0,
    #[error("SaslHandshake after a SASL handshake: re-authentication is not supported")]
    HandshakeRepeated,
    #[error("SaslAuthenticate without a SaslHandshake before it")]
    AuthenticateBeforeHandshake,
    #[error("SaslAuthenticate after a successful one: re-authentication is not supported")]
    AuthenticateRepeated,
    #[error("{0:?} request during the SASL exchange: only ApiVersions and SaslAuthenticate are served until it completes")]
    Unauthenticated(ApiKey),
    #[error("Authentication failed: {0}")]
    Plain(#[from] PlainError),
    #[error("Authentication failed: {0}")]
    OAuthBearer(#[from] OAuthBearerError),
    #[error("Authentication failed: invalid credentials (this broker does not know the token)")]
    UnknownToken,
    #[error("Authentication failed: {0:?} is not the name of the token's principal")]
    WrongName(String),
}

impl SaslError {
    /// The Kafka error code answering it.
    pub fn code(&self) -> i16 {
        match self {
            SaslError::NotEnabled | SaslError::UnsupportedMechanism(_) => {
                ResponseError::UnsupportedSaslMechanism.code()
            }
            SaslError::HandshakeV0 => ResponseError::UnsupportedVersion.code(),
            SaslError::HandshakeRepeated
            | SaslError::AuthenticateBeforeHandshake
            | SaslError::AuthenticateRepeated
            | SaslError::Unauthenticated(_) => ResponseError::IllegalSaslState.code(),
            SaslError::Plain(_)
            | SaslError::OAuthBearer(_)
            | SaslError::UnknownToken
            | SaslError::WrongName(_) => ResponseError::SaslAuthenticationFailed.code(),
        }
    }
}

/// Where a connection is in the exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// No SASL asked: the transport's principal.
    Transport,
    /// Handshake done, authentication due with this mechanism.
    Handshaken(Mechanism),
    /// Authenticated: the principal is the token's.
    Authenticated,
}

/// One connection's principal and SASL stage.
#[derive(Debug, Clone)]
pub struct Session {
    principal: Principal,
    stage: Stage,
    /// Set by a refusal: the connection closes once the refusal's answer is written.
    ended: Option<SaslError>,
}

impl Session {
    /// A connection authenticated by its transport as `principal`.
    pub fn new(principal: Principal) -> Session {
        Session {
            principal,
            stage: Stage::Transport,
            ended: None,
        }
    }

    /// Who the next request runs as.
    pub fn principal(&self) -> &Principal {
        &self.principal
    }

    /// Whether a request of `key` may be served now; `Err`: close without an answer
    /// (Kafka's brokers do the same for a request out of the exchange's order).
    pub fn admit(&self, key: ApiKey) -> Result<(), SaslError> {
        let during_exchange = matches!(self.stage, Stage::Handshaken(_));
        let allowed = matches!(key, ApiKey::ApiVersions | ApiKey::SaslAuthenticate);
        if during_exchange && !allowed && key != ApiKey::SaslHandshake {
            return Err(SaslError::Unauthenticated(key));
        }
        Ok(())
    }

    /// SaslHandshake asking for `mechanism`, on a broker whose SASL is `enabled` (it
    /// has a token file). `Err` is answered, then the connection closes.
    pub fn handshake(&mut self, mechanism: &str, enabled: bool) -> Result<Mechanism, SaslError> {
        let outcome = match self.stage {
            Stage::Transport if !enabled => Err(SaslError::NotEnabled),
            Stage::Transport => Mechanism::named(mechanism)
                .ok_or_else(|| SaslError::UnsupportedMechanism(mechanism.to_string())),
            Stage::Handshaken(_) | Stage::Authenticated => Err(SaslError::HandshakeRepeated),
        };
        match &outcome {
            Ok(mechanism) => self.stage = Stage::Handshaken(*mechanism),
            Err(e) => self.ended = Some(e.clone()),
        }
        outcome
    }

    /// SaslAuthenticate: `verify` checks the client's message for the mechanism the
    /// handshake chose and names the principal. `Err` is answered, then the connection
    /// closes.
    pub fn authenticate(
        &mut self,
        verify: impl FnOnce(Mechanism) -> Result<Principal, SaslError>,
    ) -> Result<&Principal, SaslError> {
        let outcome = match self.stage {
            Stage::Transport => Err(SaslError::AuthenticateBeforeHandshake),
            Stage::Authenticated => Err(SaslError::AuthenticateRepeated),
            Stage::Handshaken(mechanism) => verify(mechanism),
        };
        match outcome {
            Ok(principal) => {
                self.principal = principal;
                self.stage = Stage::Authenticated;
                Ok(&self.principal)
            }
            Err(e) => {
                self.ended = Some(e.clone());
                Err(e)
            }
        }
    }

    /// Ends the connection with `error` (answered by the caller), whatever the stage.
    pub fn refuse(&mut self, error: SaslError) -> &SaslError {
        self.ended.insert(error)
    }

    /// The refusal that ends the connection, once its answer is queued.
    pub fn ended(&self) -> Option<&SaslError> {
        self.ended.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alice() -> Principal {
        Principal::user("alice")
    }

    fn authenticated(mechanism: &str) -> Session {
        let mut session = Session::new(Principal::anonymous());
        session.handshake(mechanism, true).expect("handshake");
        session
            .authenticate(|_| Ok(alice()))
            .expect("authenticated");
        session
    }

    #[test]
    fn given_no_sasl_then_the_transports_principal_serves_everything() {
        let session = Session::new(Principal::user("cert-cn"));
        for key in [ApiKey::Produce, ApiKey::Metadata, ApiKey::ApiVersions] {
            assert_eq!(session.admit(key), Ok(()));
        }
        assert_eq!(session.principal(), &Principal::user("cert-cn"));
        assert_eq!(session.ended(), None);
    }

    #[test]
    fn given_a_successful_exchange_then_later_requests_run_as_the_tokens_principal() {
        let mut session = Session::new(Principal::user("cert-cn"));
        assert_eq!(session.handshake("PLAIN", true), Ok(Mechanism::Plain));
        // Until authenticated, still the transport's principal.
        assert_eq!(session.principal(), &Principal::user("cert-cn"));
        let mut asked = None;
        let principal = session.authenticate(|mechanism| {
            asked = Some(mechanism);
            Ok(alice())
        });
        assert_eq!(principal, Ok(&alice()));
        assert_eq!(asked, Some(Mechanism::Plain));
        assert_eq!(session.admit(ApiKey::Produce), Ok(()));
        assert_eq!(session.principal(), &alice());
        assert_eq!(session.ended(), None);
        assert_eq!(
            authenticated("OAUTHBEARER").principal(),
            &alice(),
            "OAUTHBEARER too"
        );
    }

    #[test]
    fn given_a_handshake_then_only_api_versions_and_authenticate_are_served_until_done() {
        let mut session = Session::new(Principal::anonymous());
        session.handshake("PLAIN", true).expect("handshake");
        assert_eq!(session.admit(ApiKey::ApiVersions), Ok(()));
        assert_eq!(session.admit(ApiKey::SaslAuthenticate), Ok(()));
        assert_eq!(
            session.admit(ApiKey::Produce),
            Err(SaslError::Unauthenticated(ApiKey::Produce))
        );
        assert_eq!(
            session.admit(ApiKey::Metadata),
            Err(SaslError::Unauthenticated(ApiKey::Metadata))
        );
    }

    #[test]
    fn given_a_failed_authentication_then_the_principal_stays_and_the_connection_ends() {
        let mut session = Session::new(Principal::anonymous());
        session.handshake("PLAIN", true).expect("handshake");
        assert_eq!(
            session.authenticate(|_| Err(SaslError::UnknownToken)),
            Err(SaslError::UnknownToken)
        );
        assert_eq!(session.principal(), &Principal::anonymous());
        assert_eq!(session.ended(), Some(&SaslError::UnknownToken));
        assert_eq!(
            SaslError::UnknownToken.code(),
            ResponseError::SaslAuthenticationFailed.code()
        );
    }

    #[test]
    fn given_an_authenticated_connection_then_a_second_handshake_or_authenticate_is_illegal() {
        let mut session = authenticated("PLAIN");
        assert_eq!(
            session.handshake("PLAIN", true),
            Err(SaslError::HandshakeRepeated)
        );
        assert_eq!(
            SaslError::HandshakeRepeated.code(),
            ResponseError::IllegalSaslState.code()
        );
        assert_eq!(session.principal(), &alice());
        assert!(session.ended().is_some());

        let mut session = authenticated("PLAIN");
        assert_eq!(
            session
                .authenticate(|_| unreachable!("no second verification"))
                .cloned(),
            Err(SaslError::AuthenticateRepeated)
        );
        assert!(session.ended().is_some());
    }

    #[test]
    fn given_a_bad_start_then_the_exchange_is_refused() {
        let mut session = Session::new(Principal::anonymous());
        assert_eq!(
            session
                .authenticate(|_| unreachable!("no handshake"))
                .cloned(),
            Err(SaslError::AuthenticateBeforeHandshake)
        );

        let mut session = Session::new(Principal::anonymous());
        assert_eq!(
            session.handshake("SCRAM-SHA-256", true),
            Err(SaslError::UnsupportedMechanism("SCRAM-SHA-256".into()))
        );
        assert!(session.ended().is_some());
        assert_eq!(
            Session::new(Principal::anonymous()).handshake("plain", true),
            Err(SaslError::UnsupportedMechanism("plain".into())),
            "names are exact, as Kafka's brokers compare them"
        );

        let mut session = Session::new(Principal::anonymous());
        let refused = session.handshake("PLAIN", false);
        assert_eq!(refused, Err(SaslError::NotEnabled));
        assert_eq!(
            SaslError::NotEnabled.code(),
            ResponseError::UnsupportedSaslMechanism.code()
        );
        assert!(session.ended().is_some());
    }
}
