//! The bootstrap list: the brokers a client asks first, given as Kafka's
//! `bootstrap.servers` is (`host:port[,host:port…]`, each optionally a full URI).
//! Contract: the client tries the addresses in the order given and keeps the first that
//! answers; when none does, the error names every address and why it failed. The list
//! only gets a client in: afterwards the metadata says which brokers exist.

use std::future::Future;
use std::time::Duration;

use crate::credentials::AuthChannel;
use idem_proto::v1::broker_client::BrokerClient;
use idem_proto::v1::MetadataRequest;

use crate::error::ClientError;

/// The addresses of a bootstrap list, in order, without duplicates. Blank entries (a
/// trailing comma, spaces) are skipped, as Kafka skips them; a list with no address at
/// all is refused.
pub(crate) fn addresses(bootstrap: &str) -> Result<Vec<String>, ClientError> {
    let mut addresses: Vec<String> = Vec::new();
    for address in bootstrap.split(',').map(str::trim) {
        if !address.is_empty() && !addresses.iter().any(|a| a == address) {
            addresses.push(address.to_string());
        }
    }
    if addresses.is_empty() {
        return Err(ClientError::InvalidConfig(
            "bootstrap address is empty".into(),
        ));
    }
    Ok(addresses)
}

/// Runs `attempt` on each address in turn and returns the first address that succeeded
/// with its value. When every attempt fails, the error is [`ClientError::Connect`]
/// naming each address with its own failure (for one address, exactly that address
/// and failure).
pub(crate) async fn first_answering<T, F, Fut>(
    addresses: &[String],
    mut attempt: F,
) -> Result<(String, T), ClientError>
where
    F: FnMut(String) -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let mut failures = Vec::with_capacity(addresses.len());
    for address in addresses {
        match attempt(address.clone()).await {
            Ok(value) => return Ok((address.clone(), value)),
            Err(why) => {
                tracing::debug!(%address, error = %why, "bootstrap broker did not answer");
                failures.push((address.clone(), why));
            }
        }
    }
    Err(unreachable(failures))
}

/// The error for a list none of whose brokers answered.
fn unreachable(mut failures: Vec<(String, String)>) -> ClientError {
    if failures.len() == 1 {
        if let Some((address, message)) = failures.pop() {
            return ClientError::Connect { address, message };
        }
    }
    let names: Vec<&str> = failures.iter().map(|(a, _)| a.as_str()).collect();
    let reasons: Vec<String> = failures
        .iter()
        .map(|(address, why)| format!("{address}: {why}"))
        .collect();
    ClientError::Connect {
        address: format!("any of {}", names.join(", ")),
        message: reasons.join("; "),
    }
}

/// Whether the broker behind `client` answers a Metadata request within `timeout`: a
/// broker that accepts connections but is paused or wedged does not, and the next
/// address is tried instead.
pub(crate) async fn answers_metadata(
    mut client: BrokerClient<AuthChannel>,
    timeout: Duration,
) -> Result<(), String> {
    let request = MetadataRequest { topics: Vec::new() };
    match tokio::time::timeout(timeout, client.metadata(request)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(status)) => Err(format!("Metadata failed: {status}")),
        Err(_) => Err(format!("no answer to Metadata within {timeout:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_comma_separated_list_keeps_its_order_and_drops_blanks_and_repeats() {
        let parsed = addresses(" 10.0.0.1:9092, ,10.0.0.2:9092,10.0.0.1:9092,").expect("list");
        assert_eq!(parsed, vec!["10.0.0.1:9092", "10.0.0.2:9092"]);
    }

    #[test]
    fn a_list_without_an_address_is_invalid_config() {
        for blank in ["", "  ", ",", " , "] {
            assert!(
                matches!(addresses(blank), Err(ClientError::InvalidConfig(_))),
                "{blank:?}"
            );
        }
    }

    #[tokio::test]
    async fn the_first_address_that_answers_is_kept_and_later_ones_are_not_tried() {
        let list = addresses("a:1,b:2,c:3").expect("list");
        let mut tried = Vec::new();
        let (address, value) = first_answering(&list, |address| {
            tried.push(address.clone());
            async move {
                if address == "a:1" {
                    Err("refused".to_string())
                } else {
                    Ok(address.len())
                }
            }
        })
        .await
        .expect("b answers");
        assert_eq!((address.as_str(), value), ("b:2", 3));
        assert_eq!(tried, vec!["a:1", "b:2"]);
    }

    #[tokio::test]
    async fn when_none_answers_the_error_names_each_address_and_its_failure() {
        let list = addresses("a:1,b:2").expect("list");
        let error = first_answering(&list, |address| async move {
            Err::<(), _>(format!("{address} refused"))
        })
        .await
        .expect_err("none answers");
        assert_eq!(
            error.to_string(),
            "cannot connect to any of a:1, b:2: a:1: a:1 refused; b:2: b:2 refused"
        );
    }

    #[tokio::test]
    async fn a_single_unreachable_address_reads_as_before() {
        let list = addresses("a:1").expect("list");
        let error = first_answering(&list, |_| async { Err::<(), _>("refused".to_string()) })
            .await
            .expect_err("unreachable");
        assert_eq!(error.to_string(), "cannot connect to a:1: refused");
    }
}
