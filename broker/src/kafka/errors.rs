//! idem's `ErrorCode` on Kafka's wire. idem names its codes as Kafka does and gives
//! them Kafka's numbers, so the mapping is the identity except for codes Kafka does not
//! have: PRODUCER_IDS_EXHAUSTED (idem's 1000: no producer-id block could be leased)
//! becomes COORDINATOR_LOAD_IN_PROGRESS, the retriable code Kafka's own brokers answer
//! InitProducerId with while they wait for a block (KIP-730).

use idem_proto::ErrorCode;
use kafka_protocol::ResponseError;

/// The Kafka error code of idem's `code` (the `i32` of a proto message).
pub fn kafka_code(code: i32) -> i16 {
    match ErrorCode::try_from(code) {
        Ok(ErrorCode::None) => 0,
        Ok(ErrorCode::ProducerIdsExhausted) => ResponseError::CoordinatorLoadInProgress.code(),
        Ok(known) => {
            i16::try_from(known as i32).unwrap_or(ResponseError::UnknownServerError.code())
        }
        Err(_) => ResponseError::UnknownServerError.code(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every idem code lands on a code Kafka clients know, with the same name.
    #[test]
    fn every_idem_code_maps_to_a_known_kafka_code_of_the_same_name() {
        for raw in -1..=1000 {
            let Ok(code) = ErrorCode::try_from(raw) else {
                continue;
            };
            let kafka = kafka_code(raw);
            if code == ErrorCode::None {
                assert_eq!(kafka, 0);
                continue;
            }
            let known = ResponseError::try_from_code(kafka).expect("an error");
            assert!(
                !matches!(known, ResponseError::Unknown(_)),
                "{code:?} -> {kafka} is unknown to Kafka"
            );
            if code != ErrorCode::ProducerIdsExhausted {
                // idem's SCREAMING_CASE name against Kafka's CamelCase one.
                let idem = code.as_str_name().replace('_', "").to_lowercase();
                let kafka_name = format!("{known:?}").to_lowercase();
                let idem = idem.trim_end_matches("exception").to_string();
                assert_eq!(idem, kafka_name.trim_end_matches("exception"), "{code:?}");
            }
        }
    }

    #[test]
    fn given_a_code_idem_does_not_know_then_it_is_unknown_server_error() {
        assert_eq!(kafka_code(123_456), -1);
        assert_eq!(
            kafka_code(ErrorCode::ProducerIdsExhausted as i32),
            ResponseError::CoordinatorLoadInProgress.code()
        );
        assert_eq!(kafka_code(ErrorCode::NotLeaderOrFollower as i32), 6);
    }
}
