//! SaslAuthenticate v0-v2 (KIP-152): the client's one SASL message, checked for the
//! mechanism the handshake chose. The secret (PLAIN's password, OAUTHBEARER's bearer)
//! is an idem token looked up in the `--auth-token-file` as the gRPC layer looks up a
//! bearer token, so a token names the same principal on both listeners. A name the
//! client gives (PLAIN's username, either mechanism's authorization id) must be that
//! principal's: `alice` or `User:alice` for `User:alice`. A refusal is
//! SASL_AUTHENTICATION_FAILED with a message that never quotes the secret; the
//! connection closes once it is written. Sessions never expire (lifetime 0).

use idem_runtime::authn::principal::Principal;
use idem_runtime::authn::token_file::Tokens;
use kafka_protocol::messages::{SaslAuthenticateRequest, SaslAuthenticateResponse};
use kafka_protocol::protocol::StrBytes;

use super::sasl_oauthbearer;
use super::sasl_plain;
use super::sasl_session::{Mechanism, SaslError, Session};

/// The answer to `request` on a connection in `session`, checked against `tokens`
/// (none: the broker has no token file, and no handshake got this far).
pub fn serve(
    session: &mut Session,
    request: &SaslAuthenticateRequest,
    tokens: Option<&Tokens>,
) -> SaslAuthenticateResponse {
    let outcome = session.authenticate(|mechanism| {
        let tokens = tokens.ok_or(SaslError::NotEnabled)?;
        verify(mechanism, &request.auth_bytes, tokens)
    });
    match outcome {
        Ok(principal) => {
            tracing::debug!(principal = principal.as_str(), "SASL authenticated");
            // The codec's default message is "", Kafka's brokers send null on success.
            SaslAuthenticateResponse::default().with_error_message(None)
        }
        Err(e) => SaslAuthenticateResponse::default()
            .with_error_code(e.code())
            .with_error_message(Some(StrBytes::from_string(e.to_string()))),
    }
}

/// The principal `message` authenticates as under `mechanism`.
pub fn verify(
    mechanism: Mechanism,
    message: &[u8],
    tokens: &Tokens,
) -> Result<Principal, SaslError> {
    let (names, token) = match mechanism {
        Mechanism::Plain => {
            let plain = sasl_plain::parse(message)?;
            ([plain.authzid, plain.username], plain.password)
        }
        Mechanism::OAuthBearer => {
            let bearer = sasl_oauthbearer::parse(message)?;
            ([bearer.authzid, ""], bearer.token)
        }
    };
    let principal = tokens.principal(token).ok_or(SaslError::UnknownToken)?;
    if let Some(wrong) = names
        .into_iter()
        .find(|name| !name.is_empty() && !names_principal(name, principal))
    {
        return Err(SaslError::WrongName(wrong.to_string()));
    }
    Ok(principal.clone())
}

/// Whether a client-given `name` is `principal`'s: `alice` or `User:alice`.
fn names_principal(name: &str, principal: &Principal) -> bool {
    principal.as_str() == name || principal.as_str().strip_prefix("User:") == Some(name)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use bytes::Bytes;
    use kafka_protocol::ResponseError;

    use super::*;

    fn tokens() -> Tokens {
        Tokens::parse("alice t-alice\nbob t-bob\n", Path::new("tokens")).expect("tokens")
    }

    #[test]
    fn given_a_known_token_then_its_principal_is_authenticated() {
        let tokens = tokens();
        for message in [
            &b"\0alice\0t-alice"[..],
            b"alice\0alice\0t-alice",
            b"\0User:alice\0t-alice",
            b"\0\0t-alice",
        ] {
            assert_eq!(
                verify(Mechanism::Plain, message, &tokens),
                Ok(Principal::user("alice")),
                "{message:?}"
            );
        }
        assert_eq!(
            verify(
                Mechanism::OAuthBearer,
                b"n,,\x01auth=Bearer t-bob\x01\x01",
                &tokens
            ),
            Ok(Principal::user("bob"))
        );
    }

    #[test]
    fn given_an_unknown_token_or_another_name_then_it_is_refused() {
        let tokens = tokens();
        assert_eq!(
            verify(Mechanism::Plain, b"\0alice\0t-wrong", &tokens),
            Err(SaslError::UnknownToken)
        );
        assert_eq!(
            verify(Mechanism::Plain, b"\0bob\0t-alice", &tokens),
            Err(SaslError::WrongName("bob".into()))
        );
        assert_eq!(
            verify(Mechanism::Plain, b"bob\0alice\0t-alice", &tokens),
            Err(SaslError::WrongName("bob".into()))
        );
        assert_eq!(
            verify(
                Mechanism::OAuthBearer,
                b"n,a=bob,\x01auth=Bearer t-alice\x01\x01",
                &tokens
            ),
            Err(SaslError::WrongName("bob".into()))
        );
        // A PLAIN message under OAUTHBEARER is malformed, not a token.
        assert!(matches!(
            verify(Mechanism::OAuthBearer, b"\0alice\0t-alice", &tokens),
            Err(SaslError::OAuthBearer(_))
        ));
    }

    #[test]
    fn given_a_refusal_then_the_answer_says_why_without_the_password_and_ends_the_session() {
        let tokens = tokens();
        let mut session = Session::new(Principal::anonymous());
        session.handshake("PLAIN", true).expect("handshake");
        let request = SaslAuthenticateRequest::default()
            .with_auth_bytes(Bytes::from_static(b"\0alice\0t-s3cret"));
        let response = serve(&mut session, &request, Some(&tokens));
        assert_eq!(
            response.error_code,
            ResponseError::SaslAuthenticationFailed.code()
        );
        let message = response.error_message.expect("a message");
        assert!(message.contains("Authentication failed"), "{message}");
        assert!(!message.contains("s3cret"), "{message}");
        assert!(session.ended().is_some());
        assert_eq!(session.principal(), &Principal::anonymous());
    }

    #[test]
    fn given_success_then_the_answer_is_clean_with_lifetime_zero() {
        let tokens = tokens();
        let mut session = Session::new(Principal::anonymous());
        session.handshake("PLAIN", true).expect("handshake");
        let request = SaslAuthenticateRequest::default()
            .with_auth_bytes(Bytes::from_static(b"\0alice\0t-alice"));
        let response = serve(&mut session, &request, Some(&tokens));
        assert_eq!(response.error_code, 0);
        assert_eq!(response.error_message, None);
        assert_eq!(response.session_lifetime_ms, 0);
        assert_eq!(session.principal(), &Principal::user("alice"));
    }
}
