//! ApiVersions: the served table of `versions.rs`, nothing more, so a client never
//! negotiates a version this listener cannot handle.

use kafka_protocol::messages::api_versions_response::{ApiVersion, ApiVersionsResponse};

use super::versions::SERVED;

/// The answer to ApiVersions, with `error_code` (0, or UNSUPPORTED_VERSION for a
/// version not served: then encoded as v0 so any client reads it).
pub fn response(error_code: i16) -> ApiVersionsResponse {
    ApiVersionsResponse::default()
        .with_error_code(error_code)
        .with_api_keys(
            SERVED
                .iter()
                .map(|s| {
                    ApiVersion::default()
                        .with_api_key(s.key as i16)
                        .with_min_version(s.min)
                        .with_max_version(s.max)
                })
                .collect(),
        )
}
