//! SASL/PLAIN's one client message (RFC 4616): `authzid NUL username NUL password`,
//! UTF-8. A pure parser: it accepts exactly the messages of that form with a non-empty
//! password and refuses everything else; its errors never quote a field, so no
//! password reaches a log or an answer. An empty username means "not given" (the
//! token alone names the principal); RFC 4616 asks for one, and librdkafka and the
//! Java client always send it.

/// The fields of a PLAIN message, borrowed from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlainMessage<'a> {
    /// Who the client asks to act as; empty when not asked.
    pub authzid: &'a str,
    /// Who the client says it is; empty when not given.
    pub username: &'a str,
    /// The idem token.
    pub password: &'a str,
}

/// Why a PLAIN message was refused. No variant holds the message's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PlainError {
    #[error("a SASL/PLAIN message is `authzid NUL username NUL password`; this one has {fields} field(s)")]
    Fields { fields: usize },
    #[error("a SASL/PLAIN message is UTF-8; this one is not")]
    NotUtf8,
    #[error("the SASL/PLAIN password (the idem token) is empty")]
    EmptyPassword,
}

/// The fields of `message`, or why it is not a PLAIN message.
pub fn parse(message: &[u8]) -> Result<PlainMessage<'_>, PlainError> {
    let text = std::str::from_utf8(message).map_err(|_| PlainError::NotUtf8)?;
    let mut fields = text.split('\0');
    let (Some(authzid), Some(username), Some(password), None) =
        (fields.next(), fields.next(), fields.next(), fields.next())
    else {
        return Err(PlainError::Fields {
            fields: text.split('\0').count(),
        });
    };
    if password.is_empty() {
        return Err(PlainError::EmptyPassword);
    }
    Ok(PlainMessage {
        authzid,
        username,
        password,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn given_the_three_fields_then_they_are_read() {
        assert_eq!(
            parse(b"\0alice\0t-alice"),
            Ok(PlainMessage {
                authzid: "",
                username: "alice",
                password: "t-alice",
            })
        );
        assert_eq!(
            parse(b"alice\0alice\0t"),
            Ok(PlainMessage {
                authzid: "alice",
                username: "alice",
                password: "t",
            })
        );
        assert_eq!(parse(b"\0\0t").map(|m| m.username), Ok(""));
    }

    #[test]
    fn given_a_malformed_message_then_it_is_refused_without_quoting_it() {
        assert_eq!(parse(b""), Err(PlainError::Fields { fields: 1 }));
        assert_eq!(
            parse(b"alice\0s3cret"),
            Err(PlainError::Fields { fields: 2 })
        );
        assert_eq!(
            parse(b"\0alice\0s3cret\0"),
            Err(PlainError::Fields { fields: 4 })
        );
        assert_eq!(parse(b"\0alice\0"), Err(PlainError::EmptyPassword));
        assert_eq!(parse(b"\0alice\0s3\xffcret"), Err(PlainError::NotUtf8));
        for error in [
            parse(b"alice\0s3cret"),
            parse(b"\0alice\0s3cret\0x"),
            parse(b"\0alice\0s3\xffcret"),
        ] {
            let text = error.expect_err("refused").to_string();
            assert!(!text.contains("s3"), "{text}");
        }
    }

    fn field() -> impl Strategy<Value = String> {
        // Any UTF-8 but NUL, which separates the fields.
        "[^\u{0}]{0,24}"
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Accepted only when the bytes are exactly three UTF-8 fields around two NULs
        /// with a password: what was accepted is what was sent.
        #[test]
        fn any_bytes_never_panic_and_are_accepted_only_when_well_formed(
            bytes in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            if let Ok(message) = parse(&bytes) {
                let again = format!("{}\0{}\0{}", message.authzid, message.username, message.password);
                prop_assert_eq!(again.as_bytes(), &bytes[..]);
                prop_assert!(!message.password.is_empty());
                prop_assert_eq!(bytes.iter().filter(|b| **b == 0).count(), 2);
            }
        }

        #[test]
        fn well_formed_messages_are_read_back(
            authzid in field(), username in field(), password in "[^\u{0}]{1,24}",
        ) {
            let bytes = format!("{authzid}\0{username}\0{password}");
            let message = parse(bytes.as_bytes());
            prop_assert_eq!(message, Ok(PlainMessage {
                authzid: &authzid,
                username: &username,
                password: &password,
            }));
        }

        /// A field with a NUL in it, or one field missing, is never taken for a message.
        #[test]
        fn a_message_with_a_field_too_many_or_too_few_is_refused(
            fields in proptest::collection::vec(field(), 0..6),
        ) {
            prop_assume!(fields.len() != 3);
            let bytes = fields.join("\0");
            prop_assert!(parse(bytes.as_bytes()).is_err());
        }
    }
}
