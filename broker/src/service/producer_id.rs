//! InitProducerId for idempotent producers: a fresh producer id from this broker's
//! leased block, or the next epoch of one the producer already has (KIP-360).
//! Transactional ids belong to the transaction coordinator and are refused here. A
//! principal past its cap of new ids per minute is refused (`producer_id_cap.rs`).

use idem_proto::v1::{InitProducerIdRequest, InitProducerIdResponse};
use idem_proto::ErrorCode;

use super::BrokerService;
use crate::error::BrokerError;

impl BrokerService {
    /// The refusal for `principal` when it was handed its cap of new producer ids in
    /// the last minute (`--max-new-producer-ids-per-minute`); `None` counts one more.
    pub(crate) fn over_producer_id_cap(&self, principal: &str) -> Option<InitProducerIdResponse> {
        let cap = self.producer_id_cap.as_ref()?;
        let verdict = cap
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .admit(principal, idem_runtime::clock::now_ms());
        let retry_ms = verdict.err()?;
        metrics::counter!("idem_producer_ids_refused_total").increment(1);
        tracing::warn!(
            principal,
            retry_ms,
            "refused a new producer id over the cap"
        );
        Some(InitProducerIdResponse {
            error_code: ErrorCode::ThrottlingQuotaExceeded as i32,
            error_message: format!(
                "{principal} was handed its cap of new producer ids in the last minute \
                 (--max-new-producer-ids-per-minute); the next in {retry_ms} ms"
            ),
            producer_id: -1,
            producer_epoch: -1,
        })
    }

    pub(crate) async fn serve_init_producer_id(
        &self,
        request: InitProducerIdRequest,
    ) -> InitProducerIdResponse {
        let result = if !request.transactional_id.is_empty() {
            Err(BrokerError::NotCoordinator(
                "transactional ids are served by the transaction coordinator, not by a broker"
                    .into(),
            ))
        } else if let Some(producer_id) = request.producer_id {
            self.bump_epoch(producer_id, request.producer_epoch).await
        } else {
            self.producer_ids
                .next_producer_id()
                .await
                .map(|id| (id, 0))
                .map_err(BrokerError::from)
        };
        match result {
            Ok((producer_id, producer_epoch)) => {
                tracing::debug!(producer_id, producer_epoch, "handed out producer id");
                InitProducerIdResponse {
                    error_code: ErrorCode::None as i32,
                    error_message: String::new(),
                    producer_id,
                    producer_epoch: i32::from(producer_epoch),
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "InitProducerId failed");
                InitProducerIdResponse {
                    error_code: e.code() as i32,
                    error_message: e.to_string(),
                    producer_id: -1,
                    producer_epoch: -1,
                }
            }
        }
    }

    /// KIP-360 for idempotent producers: the same producer id with the next epoch, which
    /// fences every late batch of the old one on every partition. An exhausted epoch
    /// (i16::MAX) moves to a fresh producer id at epoch 0 instead.
    async fn bump_epoch(&self, producer_id: i64, epoch: i32) -> Result<(i64, i16), BrokerError> {
        let epoch = i16::try_from(epoch)
            .ok()
            .filter(|e| *e >= 0)
            .ok_or_else(|| {
                BrokerError::InvalidRequest(format!(
                    "producer epoch {epoch} to bump is not between 0 and {}",
                    i16::MAX
                ))
            })?;
        if producer_id < 0 {
            return Err(BrokerError::InvalidRequest(format!(
                "producer id {producer_id} to bump is negative"
            )));
        }
        match epoch.checked_add(1) {
            Some(next) => Ok((producer_id, next)),
            None => Ok((self.producer_ids.next_producer_id().await?, 0)),
        }
    }
}
