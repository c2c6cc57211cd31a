//! A ready topic grows (CreatePartitions): the new partitions' keys are laid out as at
//! creation (`assign_replicas` over the live brokers, the topic's own rotation, each
//! partition's first replica its leader at epoch 0 with every replica in sync), and the
//! topic key's partition count is raised, every write guarded by the topic key's
//! `mod_revision`. Up to [`PARTITIONS_PER_TXN`] new partitions go in one transaction
//! with the count, so readers see them all or none; more are written in chunks first
//! and the count last. Partition keys past the count are never read (the snapshot sizes
//! a topic by its count), so a growth that lost a race leaves nothing anyone sees, and
//! the next attempt writes those keys again.

use etcd_client::{Compare, CompareOp, Txn, TxnOp};

use idem_runtime::etcd_call::bounded;

use super::{
    encode, start_offset, CatalogError, EtcdCatalog, PartitionState, TopicRecord, TopicStatus,
    PARTITIONS_PER_TXN,
};
use crate::cluster::assignment::assign_replicas;
use crate::topic_spec::TopicSpec;

/// The states of partitions `from..spec.partitions` of a topic laid out over
/// `live_brokers` as its creation would have laid them out (pure).
pub fn added_partition_states(
    spec: &TopicSpec,
    from: i32,
    live_brokers: &[i32],
) -> Result<Vec<(i32, PartitionState)>, CatalogError> {
    let factor = spec.replication_factor;
    if factor < 1 || factor as usize > live_brokers.len() {
        return Err(CatalogError::NotEnoughBrokers {
            factor,
            live: live_brokers.len(),
        });
    }
    let start = start_offset(&spec.name, live_brokers.len());
    let layout = assign_replicas(spec.partitions, factor, live_brokers, start);
    Ok(layout
        .into_iter()
        .enumerate()
        .skip(from.max(0) as usize)
        .map(|(p, replicas)| {
            (
                p as i32,
                PartitionState {
                    leader: replicas[0],
                    isr: replicas.clone(),
                    replicas,
                    leader_epoch: 0,
                    partition_epoch: 0,
                    adding_replicas: Vec::new(),
                    removing_replicas: Vec::new(),
                },
            )
        })
        .collect())
}

impl EtcdCatalog {
    /// Grows a ready topic, read at `mod_revision` with `current` partitions, to
    /// `grown.partitions`, spreading the new ones over `live_brokers`. `Ok(false)` when
    /// the topic key changed first: the count is unchanged (re-read and try again).
    pub async fn add_partitions(
        &self,
        mod_revision: i64,
        current: i32,
        grown: &TopicSpec,
        live_brokers: &[i32],
    ) -> Result<bool, CatalogError> {
        let topic_key = self.topic_key(&grown.name);
        let states = added_partition_states(grown, current, live_brokers)?;
        let puts: Vec<(String, String)> = states
            .iter()
            .map(|(p, state)| {
                let key = self.partition_key(&grown.name, *p);
                encode(&key, state).map(|value| (key, value))
            })
            .collect::<Result<_, _>>()?;
        let ready = encode(
            &topic_key,
            &TopicRecord {
                spec: grown.clone(),
                status: TopicStatus::Ready,
            },
        )?;
        let chunks: Vec<&[(String, String)]> = puts.chunks(PARTITIONS_PER_TXN).collect();
        let last = chunks.len().saturating_sub(1);
        let mut client = self.client.clone();
        for (i, chunk) in chunks.iter().enumerate() {
            let mut ops: Vec<TxnOp> = chunk
                .iter()
                .map(|(k, v)| TxnOp::put(k.as_str(), v.as_str(), None))
                .collect();
            if i == last {
                ops.push(TxnOp::put(topic_key.as_str(), ready.as_str(), None));
            }
            let write = Txn::new()
                .when([Compare::mod_revision(
                    topic_key.as_str(),
                    CompareOp::Equal,
                    mod_revision,
                )])
                .and_then(ops);
            if !bounded("add partitions", client.txn(write))
                .await?
                .succeeded()
            {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(partitions: i32, replication_factor: i32) -> TopicSpec {
        TopicSpec {
            name: "orders".into(),
            partitions,
            replication_factor,
            min_insync_replicas: 2,
            unclean_leader_election: false,
            config: Default::default(),
            topic_id: Default::default(),
        }
    }

    #[test]
    fn given_growth_then_the_new_partitions_are_laid_out_as_creation_lays_them() {
        let brokers = [1, 2, 3];
        let created = assign_replicas(5, 3, &brokers, start_offset("orders", 3));
        let added = added_partition_states(&spec(5, 3), 2, &brokers).expect("enough brokers");
        assert_eq!(added.iter().map(|(p, _)| *p).collect::<Vec<_>>(), [2, 3, 4]);
        for (p, state) in &added {
            assert_eq!(state.replicas, created[*p as usize]);
            assert_eq!(state.leader, state.replicas[0]);
            assert_eq!(state.isr, state.replicas);
            assert_eq!((state.leader_epoch, state.partition_epoch), (0, 0));
        }
    }

    #[test]
    fn given_fewer_live_brokers_than_replicas_then_nothing_is_laid_out() {
        let refused = added_partition_states(&spec(4, 3), 2, &[1, 2]);
        assert!(matches!(
            refused,
            Err(CatalogError::NotEnoughBrokers { factor: 3, live: 2 })
        ));
    }
}
