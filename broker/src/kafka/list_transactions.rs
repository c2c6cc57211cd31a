//! ListTransactions v0–v1 (KIP-664, KIP-994): every transactional id of the cluster,
//! from every coordinator owning a slice (`fan_out`; one that cannot list is the
//! top-level error, never a shorter list), that the Kafka client (the connection's principal) may
//! describe. Filters as Kafka's coordinator applies them: state names (exact; a name
//! Kafka does not know is answered in `unknown_state_filters` and matches nothing),
//! producer ids, and v1's duration (only transactions open longer than it, by this
//! broker's clock). Dead ids are never listed.

use std::collections::BTreeMap;

use idem_proto::v1::TransactionDescription;
use idem_runtime::acl::{Operation, Resource};
use idem_runtime::clock::now_ms;
use kafka_protocol::messages::list_transactions_request::ListTransactionsRequest;
use kafka_protocol::messages::list_transactions_response::{
    ListTransactionsResponse, TransactionState,
};
use kafka_protocol::messages::{ProducerId, TransactionalId};
use kafka_protocol::protocol::StrBytes;

use super::fan_out;
use super::KafkaContext;

/// Kafka's transaction state names, which idem's coordinator uses too.
const STATES: [&str; 8] = [
    "Empty",
    "Ongoing",
    "PrepareCommit",
    "PrepareAbort",
    "CompleteCommit",
    "CompleteAbort",
    "PrepareEpochFence",
    "Dead",
];

pub async fn serve(
    context: &KafkaContext,
    principal: &str,
    request: ListTransactionsRequest,
) -> ListTransactionsResponse {
    let lists = match fan_out::list_transactions(context).await {
        Ok(lists) => lists,
        Err(refused) => {
            tracing::debug!(code = refused.code, error = %refused, "ListTransactions refused");
            return ListTransactionsResponse::default().with_error_code(refused.code);
        }
    };
    let may_describe = |id: &str| {
        context
            .service
            .check_all(
                principal,
                [(Operation::Describe, Resource::transactional_id(id))],
            )
            .is_ok()
    };
    let (states, unknown) = listed(
        lists.into_iter().flat_map(|l| l.transactions),
        &request,
        now_ms(),
        may_describe,
    );
    ListTransactionsResponse::default()
        .with_transaction_states(states)
        .with_unknown_state_filters(unknown)
}

/// The listing of `transactions` (each id once, sorted) that `request`'s filters and
/// `may_describe` let through at `now_ms`, and the state filters Kafka does not know.
pub fn listed(
    transactions: impl IntoIterator<Item = TransactionDescription>,
    request: &ListTransactionsRequest,
    now_ms: i64,
    may_describe: impl Fn(&str) -> bool,
) -> (Vec<TransactionState>, Vec<StrBytes>) {
    let unknown: Vec<StrBytes> = request
        .state_filters
        .iter()
        .filter(|f| !STATES.contains(&f.as_str()))
        .cloned()
        .collect();
    let included = |t: &TransactionDescription| {
        t.state != "Dead"
            && (request.state_filters.is_empty()
                || request.state_filters.iter().any(|f| f.as_str() == t.state))
            && (request.producer_id_filters.is_empty()
                || request
                    .producer_id_filters
                    .contains(&ProducerId(t.producer_id)))
            && (request.duration_filter < 0
                || (t.txn_start_ms >= 0 && now_ms - t.txn_start_ms > request.duration_filter))
            && may_describe(&t.transactional_id)
    };
    let unique: BTreeMap<String, TransactionDescription> = transactions
        .into_iter()
        .filter(|t| included(t))
        .map(|t| (t.transactional_id.clone(), t))
        .collect();
    let states = unique
        .into_values()
        .map(|t| {
            TransactionState::default()
                .with_transactional_id(TransactionalId(StrBytes::from_string(t.transactional_id)))
                .with_producer_id(ProducerId(t.producer_id))
                .with_transaction_state(StrBytes::from_string(t.state))
        })
        .collect();
    (states, unknown)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn(id: &str, producer_id: i64, state: &str, txn_start_ms: i64) -> TransactionDescription {
        TransactionDescription {
            transactional_id: id.into(),
            producer_id,
            state: state.into(),
            txn_start_ms,
            ..TransactionDescription::default()
        }
    }

    fn txns() -> Vec<TransactionDescription> {
        vec![
            txn("checkout", 7, "Ongoing", 1_000),
            txn("audit", 8, "CompleteCommit", -1),
            txn("billing", 9, "Ongoing", 9_000),
            txn("gone", 10, "Dead", -1),
        ]
    }

    fn ids(states: &[TransactionState]) -> Vec<String> {
        states
            .iter()
            .map(|s| s.transactional_id.0.to_string())
            .collect()
    }

    fn states(names: &[&'static str]) -> Vec<StrBytes> {
        names.iter().map(|n| StrBytes::from_static_str(n)).collect()
    }

    #[test]
    fn given_no_filter_then_every_live_id_sorted() {
        let (listed, unknown) = listed(txns(), &ListTransactionsRequest::default(), 10_000, |_| {
            true
        });
        assert_eq!(ids(&listed), ["audit", "billing", "checkout"]);
        assert_eq!(listed[2].producer_id, ProducerId(7));
        assert_eq!(listed[2].transaction_state.as_str(), "Ongoing");
        assert!(unknown.is_empty());
    }

    #[test]
    fn given_a_state_filter_then_only_those_states_and_unknown_names_reported() {
        let request =
            ListTransactionsRequest::default().with_state_filters(states(&["Ongoing", "Running"]));
        let (listed, unknown) = listed(txns(), &request, 10_000, |_| true);
        assert_eq!(ids(&listed), ["billing", "checkout"]);
        assert_eq!(unknown, states(&["Running"]));
        // Kafka's names are exact.
        let request = ListTransactionsRequest::default().with_state_filters(states(&["ongoing"]));
        assert!(listed_ids(&request).is_empty());
    }

    fn listed_ids(request: &ListTransactionsRequest) -> Vec<String> {
        ids(&listed(txns(), request, 10_000, |_| true).0)
    }

    #[test]
    fn given_a_producer_id_filter_then_only_those_producers() {
        let request =
            ListTransactionsRequest::default().with_producer_id_filters(vec![ProducerId(8)]);
        assert_eq!(listed_ids(&request), ["audit"]);
    }

    #[test]
    fn given_a_duration_filter_then_only_transactions_open_longer() {
        // At 10 s: checkout open 9 s, billing 1 s, audit has none open.
        let request = ListTransactionsRequest::default().with_duration_filter(5_000);
        assert_eq!(listed_ids(&request), ["checkout"]);
        let request = ListTransactionsRequest::default().with_duration_filter(0);
        assert_eq!(listed_ids(&request), ["billing", "checkout"]);
    }

    #[test]
    fn given_ids_the_caller_may_not_describe_then_they_are_left_out() {
        let (listed, _) = listed(txns(), &ListTransactionsRequest::default(), 0, |id| {
            id == "audit"
        });
        assert_eq!(ids(&listed), ["audit"]);
    }
}
