//! The cluster a data dir belongs to (Kafka's `cluster.id` in `meta.properties`). The
//! first broker of a cluster writes a random id under `{prefix}/cluster-id` in etcd; each
//! broker records it in its data dir (`cluster-id`) and refuses to start when the two
//! disagree. Without this a broker pointed at the wrong etcd or `--etcd-prefix`, or at an
//! etcd that lost its data, would find none of its topics in the catalog and delete
//! every partition directory at its first sync.

use std::path::Path;

use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use idem_runtime::etcd_call::{bounded, connect, EtcdCallError};

/// The file in a data dir that names its cluster.
pub const CLUSTER_ID_FILE: &str = "cluster-id";

/// What to do, from the id the data dir records and the one etcd holds (pure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Both agree: start.
    Same,
    /// A new data dir (or one from before cluster ids) joins the cluster etcd names:
    /// record its id, then start.
    Record(String),
    /// Neither has one: a new cluster; create the id in etcd, record it, start.
    Create,
    /// The data dir belongs to another cluster than the one etcd names.
    Mismatch { data_dir: String, etcd: String },
    /// The data dir belongs to a cluster etcd has never heard of.
    UnknownToEtcd { data_dir: String },
}

pub fn verdict(data_dir: Option<&str>, etcd: Option<&str>) -> Verdict {
    match (data_dir, etcd) {
        (Some(d), Some(e)) if d == e => Verdict::Same,
        (Some(d), Some(e)) => Verdict::Mismatch {
            data_dir: d.to_string(),
            etcd: e.to_string(),
        },
        (Some(d), None) => Verdict::UnknownToEtcd {
            data_dir: d.to_string(),
        },
        (None, Some(e)) => Verdict::Record(e.to_string()),
        (None, None) => Verdict::Create,
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ClusterIdError {
    #[error(
        "data dir {dir} belongs to cluster {data_dir}, but etcd under prefix {prefix:?} is cluster {etcd}: \
         wrong --etcd or --etcd-prefix? The broker would delete every partition etcd does not list, so it does not start"
    )]
    Mismatch {
        dir: String,
        prefix: String,
        data_dir: String,
        etcd: String,
    },
    #[error(
        "data dir {dir} belongs to cluster {data_dir}, but etcd under prefix {prefix:?} has no cluster: \
         wrong --etcd or --etcd-prefix, or etcd lost its data? The broker would delete every partition etcd does \
         not list, so it does not start (to start this data dir in a new cluster, delete {dir}/{CLUSTER_ID_FILE})"
    )]
    UnknownToEtcd {
        dir: String,
        prefix: String,
        data_dir: String,
    },
    #[error("cluster id: {0}")]
    Etcd(#[from] EtcdCallError),
    #[error("cluster id file {path}: {source}")]
    File {
        path: String,
        source: std::io::Error,
    },
    #[error("cluster id under {key} is not UTF-8")]
    NotUtf8 { key: String },
    #[error("cluster id under {key} vanished while this broker created it")]
    Vanished { key: String },
}

/// Checks (and on first use records) the cluster id of `data_dir` against etcd's;
/// returns it.
pub async fn ensure(
    data_dir: &Path,
    endpoints: &[String],
    prefix: &str,
) -> Result<String, ClusterIdError> {
    let path = data_dir.join(CLUSTER_ID_FILE);
    let file_error = |source| ClusterIdError::File {
        path: path.display().to_string(),
        source,
    };
    let recorded = match std::fs::read_to_string(&path) {
        Ok(id) if !id.trim().is_empty() => Some(id.trim().to_string()),
        Ok(_) => None,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(file_error(e)),
    };
    let prefix = prefix.trim_end_matches('/');
    let key = format!("{prefix}/cluster-id");
    let mut client = connect(endpoints).await?;
    let in_etcd = read(&mut client, &key).await?;
    let id = match verdict(recorded.as_deref(), in_etcd.as_deref()) {
        Verdict::Same => return Ok(in_etcd.unwrap_or_default()),
        Verdict::Record(id) => id,
        Verdict::Create => create(&mut client, &key).await?,
        Verdict::Mismatch { data_dir: d, etcd } => {
            return Err(ClusterIdError::Mismatch {
                dir: data_dir.display().to_string(),
                prefix: prefix.to_string(),
                data_dir: d,
                etcd,
            })
        }
        Verdict::UnknownToEtcd { data_dir: d } => {
            return Err(ClusterIdError::UnknownToEtcd {
                dir: data_dir.display().to_string(),
                prefix: prefix.to_string(),
                data_dir: d,
            })
        }
    };
    std::fs::create_dir_all(data_dir).map_err(file_error)?;
    crate::fsutil::write_atomically(&path, id.as_bytes()).map_err(file_error)?;
    tracing::info!(cluster_id = %id, dir = %data_dir.display(), "recorded the cluster id in the data dir");
    Ok(id)
}

async fn read(
    client: &mut etcd_client::Client,
    key: &str,
) -> Result<Option<String>, ClusterIdError> {
    let answer = bounded("get cluster id", client.get(key, None)).await?;
    match answer.kvs().first() {
        None => Ok(None),
        Some(kv) => {
            kv.value_str()
                .map(|v| Some(v.to_string()))
                .map_err(|_| ClusterIdError::NotUtf8 {
                    key: key.to_string(),
                })
        }
    }
}

/// Creates the id if no one did; either way returns the one etcd holds after.
async fn create(client: &mut etcd_client::Client, key: &str) -> Result<String, ClusterIdError> {
    let fresh = crate::topic_id::TopicId::random().to_string();
    let txn = Txn::new()
        .when([Compare::version(key, CompareOp::Equal, 0)])
        .and_then([TxnOp::put(key, fresh.clone(), None)]);
    let created = bounded("create cluster id", client.txn(txn)).await?;
    if created.succeeded() {
        tracing::info!(cluster_id = %fresh, key, "created the cluster id");
        return Ok(fresh);
    }
    // Another broker of the new cluster was first.
    read(client, key).await?.ok_or(ClusterIdError::Vanished {
        key: key.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_each_combination_then_the_verdict_protects_the_data_dir() {
        assert_eq!(verdict(Some("a"), Some("a")), Verdict::Same);
        assert_eq!(verdict(None, Some("a")), Verdict::Record("a".into()));
        assert_eq!(verdict(None, None), Verdict::Create);
        assert_eq!(
            verdict(Some("a"), Some("b")),
            Verdict::Mismatch {
                data_dir: "a".into(),
                etcd: "b".into()
            }
        );
        assert_eq!(
            verdict(Some("a"), None),
            Verdict::UnknownToEtcd {
                data_dir: "a".into()
            }
        );
    }
}
