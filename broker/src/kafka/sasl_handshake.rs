//! SaslHandshake v1 (KIP-152): the client names a mechanism; the answer lists the
//! enabled ones. v0 (raw SASL frames after the handshake, Kafka 0.10) is advertised,
//! since librdkafka takes SaslHandshake v0 in ApiVersions as the sign of SASL support,
//! but answered UNSUPPORTED_VERSION and closed on: every client since Kafka 1.0 sends
//! v1 when SaslAuthenticate is advertised. A broker without a token file advertises
//! neither API and answers a handshake anyway with UNSUPPORTED_SASL_MECHANISM and no
//! mechanisms, then closes.

use kafka_protocol::messages::{SaslHandshakeRequest, SaslHandshakeResponse};
use kafka_protocol::protocol::StrBytes;

use super::sasl_session::{Mechanism, SaslError, Session};

/// The answer to `request` on a connection in `session`, whose broker has SASL
/// `enabled`. A refusal is recorded in the session, which ends the connection.
pub fn serve(
    session: &mut Session,
    request: &SaslHandshakeRequest,
    version: i16,
    enabled: bool,
) -> SaslHandshakeResponse {
    let mechanisms = if enabled {
        Mechanism::ALL
            .iter()
            .map(|m| StrBytes::from_static_str(m.name()))
            .collect()
    } else {
        Vec::new()
    };
    let response = SaslHandshakeResponse::default().with_mechanisms(mechanisms);
    if version == 0 {
        let refusal = session.refuse(SaslError::HandshakeV0);
        return response.with_error_code(refusal.code());
    }
    match session.handshake(request.mechanism.as_str(), enabled) {
        Ok(mechanism) => {
            tracing::debug!(mechanism = mechanism.name(), "SASL handshake");
            response
        }
        Err(e) => response.with_error_code(e.code()),
    }
}

#[cfg(test)]
mod tests {
    use idem_runtime::authn::principal::Principal;
    use kafka_protocol::ResponseError;

    use super::*;

    fn asking(mechanism: &'static str) -> SaslHandshakeRequest {
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism))
    }

    #[test]
    fn given_an_enabled_mechanism_then_the_answer_lists_the_enabled_ones() {
        let mut session = Session::new(Principal::anonymous());
        let response = serve(&mut session, &asking("PLAIN"), 1, true);
        assert_eq!(response.error_code, 0);
        let names: Vec<&str> = response.mechanisms.iter().map(|m| m.as_str()).collect();
        assert_eq!(names, ["PLAIN", "OAUTHBEARER"]);
        assert_eq!(session.ended(), None);
    }

    #[test]
    fn given_no_token_file_then_no_mechanism_is_offered_and_the_connection_ends() {
        let mut session = Session::new(Principal::anonymous());
        let response = serve(&mut session, &asking("PLAIN"), 1, false);
        assert_eq!(
            response.error_code,
            ResponseError::UnsupportedSaslMechanism.code()
        );
        assert!(response.mechanisms.is_empty());
        assert!(session.ended().is_some());
    }

    #[test]
    fn given_handshake_v0_then_it_is_unsupported_and_the_connection_ends() {
        let mut session = Session::new(Principal::anonymous());
        let response = serve(&mut session, &asking("PLAIN"), 0, true);
        assert_eq!(
            response.error_code,
            ResponseError::UnsupportedVersion.code()
        );
        assert_eq!(session.ended(), Some(&SaslError::HandshakeV0));
    }
}
