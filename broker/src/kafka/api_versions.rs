//! ApiVersions: the served table of `versions.rs`, nothing more, so a client never
//! negotiates a version this listener cannot handle. The SASL APIs are left out on a
//! broker without a token file: librdkafka then says "SASL Handshake not supported by
//! broker" rather than attempting an exchange that cannot succeed.

use kafka_protocol::messages::api_versions_response::{ApiVersion, ApiVersionsResponse};

use super::versions::{is_sasl, SERVED};

/// The answer to ApiVersions, with `error_code` (0, or UNSUPPORTED_VERSION for a
/// version not served: then encoded as v0 so any client reads it); the SASL APIs only
/// when `sasl` is enabled.
pub fn response(error_code: i16, sasl: bool) -> ApiVersionsResponse {
    ApiVersionsResponse::default()
        .with_error_code(error_code)
        .with_api_keys(
            SERVED
                .iter()
                .filter(|s| sasl || !is_sasl(s.key))
                .map(|s| {
                    ApiVersion::default()
                        .with_api_key(s.key as i16)
                        .with_min_version(s.min)
                        .with_max_version(s.max)
                })
                .collect(),
        )
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::ApiKey;

    use super::*;

    fn advertised(sasl: bool) -> Vec<i16> {
        response(0, sasl)
            .api_keys
            .iter()
            .map(|v| v.api_key)
            .collect()
    }

    #[test]
    fn given_a_token_file_then_and_only_then_the_sasl_apis_are_advertised() {
        let sasl = [
            ApiKey::SaslHandshake as i16,
            ApiKey::SaslAuthenticate as i16,
        ];
        assert!(sasl.iter().all(|key| advertised(true).contains(key)));
        assert!(sasl.iter().all(|key| !advertised(false).contains(key)));
        assert_eq!(advertised(false).len() + 2, advertised(true).len());
    }
}
