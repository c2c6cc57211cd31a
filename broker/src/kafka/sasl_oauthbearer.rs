//! SASL/OAUTHBEARER's client first message (RFC 7628, section 3.1):
//! `gs2-header ^A *(key=value ^A) ^A`, e.g. `n,,\x01auth=Bearer <token>\x01\x01`, the
//! bearer being an idem token. A pure parser: it accepts exactly that grammar with one
//! `auth` pair of the form `Bearer <token>` and refuses everything else (channel
//! binding `p=` included, which no Kafka client asks for). Other pairs (the client's
//! SASL extensions) are checked for form and ignored. Errors never quote the token.

const KVSEP: char = '\u{1}';

/// The parts of a client first message idem uses, borrowed from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OAuthBearerMessage<'a> {
    /// The gs2 header's `a=` authorization id; empty when not asked.
    pub authzid: &'a str,
    /// The bearer token of the `auth` pair.
    pub token: &'a str,
}

/// Why a client first message was refused. No variant holds the message's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OAuthBearerError {
    #[error("a SASL/OAUTHBEARER message is UTF-8; this one is not")]
    NotUtf8,
    #[error(
        "the SASL/OAUTHBEARER message does not start with a GS2 header `n,,` (or `n,a=<authzid>,`)"
    )]
    Gs2Header,
    #[error("the SASL/OAUTHBEARER key/value pairs are not `key=value` each ended by 0x01, the last followed by 0x01")]
    Pairs,
    #[error("the SASL/OAUTHBEARER message has no `auth` pair, or more than one")]
    Auth,
    #[error("the SASL/OAUTHBEARER `auth` pair is not `Bearer <token>`")]
    NotBearer,
}

/// The authorization id and token of `message`, or why it is not a client first
/// message.
pub fn parse(message: &[u8]) -> Result<OAuthBearerMessage<'_>, OAuthBearerError> {
    let text = std::str::from_utf8(message).map_err(|_| OAuthBearerError::NotUtf8)?;
    let (header, pairs) = text.split_once(KVSEP).ok_or(OAuthBearerError::Gs2Header)?;
    let authzid = gs2_authzid(header)?;
    // What follows the header's separator: the pairs, each ended by ^A, then one ^A.
    let pairs = pairs.strip_suffix(KVSEP).ok_or(OAuthBearerError::Pairs)?;
    let mut token = None;
    if !pairs.is_empty() {
        let pairs = pairs.strip_suffix(KVSEP).ok_or(OAuthBearerError::Pairs)?;
        for pair in pairs.split(KVSEP) {
            let (key, value) = pair.split_once('=').ok_or(OAuthBearerError::Pairs)?;
            let key_ok = !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphabetic());
            // RFC 7628: value = *(VCHAR / SP / HTAB / CR / LF).
            let value_ok = value
                .bytes()
                .all(|b| b.is_ascii_graphic() || matches!(b, b' ' | b'\t' | b'\r' | b'\n'));
            if !key_ok || !value_ok {
                return Err(OAuthBearerError::Pairs);
            }
            if key == "auth" && token.replace(bearer(value)?).is_some() {
                return Err(OAuthBearerError::Auth);
            }
        }
    }
    Ok(OAuthBearerMessage {
        authzid,
        token: token.ok_or(OAuthBearerError::Auth)?,
    })
}

/// The authorization id of a GS2 header `n,[a=<authzid>],` (or `y,...`: the client
/// could bind channels and thinks the server cannot; both are fine without binding).
fn gs2_authzid(header: &str) -> Result<&str, OAuthBearerError> {
    let rest = header
        .strip_prefix("n,")
        .or_else(|| header.strip_prefix("y,"))
        .ok_or(OAuthBearerError::Gs2Header)?;
    let authzid = rest.strip_suffix(',').ok_or(OAuthBearerError::Gs2Header)?;
    if authzid.is_empty() {
        return Ok("");
    }
    let name = authzid
        .strip_prefix("a=")
        .filter(|name| !name.is_empty() && !name.contains(','))
        .ok_or(OAuthBearerError::Gs2Header)?;
    Ok(name)
}

/// The token of an `auth` value `Bearer <token>` (the scheme is case-insensitive,
/// RFC 6750): one word, nothing after it.
fn bearer(value: &str) -> Result<&str, OAuthBearerError> {
    let (scheme, token) = value.split_once(' ').ok_or(OAuthBearerError::NotBearer)?;
    let token = token.trim_start_matches(' ');
    let one_word = !token.is_empty() && !token.bytes().any(|b| b.is_ascii_whitespace());
    if !scheme.eq_ignore_ascii_case("bearer") || !one_word {
        return Err(OAuthBearerError::NotBearer);
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn read(text: &str) -> Result<OAuthBearerMessage<'_>, OAuthBearerError> {
        parse(text.as_bytes())
    }

    #[test]
    fn given_librdkafkas_message_then_the_token_is_read() {
        assert_eq!(
            read("n,,\u{1}auth=Bearer t-alice\u{1}\u{1}"),
            Ok(OAuthBearerMessage {
                authzid: "",
                token: "t-alice",
            })
        );
        // With an authorization id and a SASL extension, as the Java client may send.
        assert_eq!(
            read("n,a=alice,\u{1}host=broker\u{1}auth=bearer  t.a-b_c~+/==\u{1}\u{1}"),
            Ok(OAuthBearerMessage {
                authzid: "alice",
                token: "t.a-b_c~+/==",
            })
        );
    }

    #[test]
    fn given_a_malformed_message_then_it_is_refused_without_quoting_the_token() {
        let cases = [
            ("", OAuthBearerError::Gs2Header),
            ("\u{1}", OAuthBearerError::Gs2Header),
            (
                "p=tls-unique,,\u{1}auth=Bearer s3cret\u{1}\u{1}",
                OAuthBearerError::Gs2Header,
            ),
            (
                "n,a=,\u{1}auth=Bearer s3cret\u{1}\u{1}",
                OAuthBearerError::Gs2Header,
            ),
            ("n,,\u{1}auth=Bearer s3cret\u{1}", OAuthBearerError::Pairs),
            ("n,,\u{1}auth=Bearer s3cret", OAuthBearerError::Pairs),
            ("n,,\u{1}\u{1}", OAuthBearerError::Auth),
            (
                "n,,\u{1}auth=Bearer s3cret\u{1}auth=Bearer s3cret\u{1}\u{1}",
                OAuthBearerError::Auth,
            ),
            (
                "n,,\u{1}auth=Basic s3cret\u{1}\u{1}",
                OAuthBearerError::NotBearer,
            ),
            (
                "n,,\u{1}auth=Bearer s3 cret\u{1}\u{1}",
                OAuthBearerError::NotBearer,
            ),
            (
                "n,,\u{1}auth=Bearer \u{1}\u{1}",
                OAuthBearerError::NotBearer,
            ),
            (
                "n,,\u{1}au th=Bearer s3cret\u{1}\u{1}",
                OAuthBearerError::Pairs,
            ),
            (
                "n,,\u{1}\u{1}auth=Bearer s3cret\u{1}\u{1}",
                OAuthBearerError::Pairs,
            ),
        ];
        for (message, expected) in cases {
            let error = read(message).expect_err(message);
            assert_eq!(error, expected, "{message:?}");
            assert!(!error.to_string().contains("s3"), "{error}");
        }
        assert_eq!(
            parse(b"n,,\x01auth=Bearer \xff\x01\x01"),
            Err(OAuthBearerError::NotUtf8)
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Whatever the bytes, no panic; what is accepted has the grammar's shape and
        /// a token that is one word of the message.
        #[test]
        fn any_bytes_never_panic_and_are_accepted_only_when_well_formed(
            bytes in proptest::collection::vec(
                prop_oneof![Just(1u8), Just(b','), Just(b'='), Just(b' '), any::<u8>()],
                0..48,
            ),
        ) {
            if let Ok(message) = parse(&bytes) {
                let text = std::str::from_utf8(&bytes).expect("accepted means UTF-8");
                prop_assert!(text.starts_with("n,") || text.starts_with("y,"));
                prop_assert!(text.ends_with("\x01\x01"), "ends with two separators");
                prop_assert!(!message.token.is_empty());
                prop_assert!(!message.token.contains(|c: char| c.is_whitespace() || c == KVSEP), "one word");
                let auth = format!(" {}\u{1}", message.token);
                prop_assert!(text.contains(&auth));
            }
        }

        #[test]
        fn well_formed_messages_give_their_token(
            authzid in "([a-z]{1,8})?",
            token in "[A-Za-z0-9._~+/-]{1,32}=*",
            extensions in proptest::collection::vec(("[a-z]{1,6}", "[ -~]{0,8}"), 0..3),
        ) {
            prop_assume!(extensions.iter().all(|(key, _)| key != "auth"));
            let header = if authzid.is_empty() { "n,,".to_string() } else { format!("n,a={authzid},") };
            let mut text = format!("{header}\u{1}");
            for (key, value) in &extensions {
                text.push_str(&format!("{key}={value}\u{1}"));
            }
            text.push_str(&format!("auth=Bearer {token}\u{1}\u{1}"));
            prop_assert_eq!(read(&text), Ok(OAuthBearerMessage { authzid: &authzid, token: &token }));
        }
    }
}
