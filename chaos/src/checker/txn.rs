//! Transactions are all or nothing for read_committed readers. An *aborted_read* (G1a)
//! is a read_committed poll or final read returning a value of a transaction that
//! aborted or failed; a *torn_txn* is a committed or unknown transaction of which the
//! read_committed final read holds some values but not all. (A committed transaction
//! with no value visible is lost or unseen, value by value, not torn.)

use std::collections::BTreeSet;

use serde::Serialize;

use super::model::{Model, Outcome, TopicPartition};
use super::observer::Observer;
use crate::history::Isolation;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AbortedRead {
    pub value: String,
    #[serde(flatten)]
    pub tp: TopicPartition,
    pub offset: i64,
    pub reader: Observer,
    pub transactional_id: String,
    pub writer: Observer,
    /// `aborted` or `failed`.
    pub outcome: Outcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TornTxn {
    pub transactional_id: String,
    pub writer: Observer,
    /// `committed` or `unknown`.
    pub outcome: Outcome,
    pub final_read: Observer,
    pub visible: Vec<TxnValue>,
    pub missing: Vec<TxnValue>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TxnValue {
    pub value: String,
    #[serde(flatten)]
    pub tp: TopicPartition,
}

pub(crate) fn aborted_reads(model: &Model<'_>) -> Vec<AbortedRead> {
    let mut found = Vec::new();
    for (read, record) in model.read_records() {
        if read.isolation != Isolation::ReadCommitted {
            continue;
        }
        let Some(write) = model.writes.get(record.value.as_str()) else {
            continue;
        };
        let Some(txn) = write.txn.map(|t| &model.txns[t]) else {
            continue;
        };
        if !matches!(txn.outcome, Outcome::Aborted | Outcome::Failed) {
            continue;
        }
        found.push(AbortedRead {
            value: record.value.clone(),
            tp: TopicPartition::of_read(record),
            offset: record.offset,
            reader: Observer {
                process: read.process.to_owned(),
                index: read.index,
                f: read.f(),
            },
            transactional_id: txn.transactional_id.clone(),
            writer: Observer {
                process: txn.process.clone(),
                index: txn.index,
                f: "txn",
            },
            outcome: txn.outcome,
        });
    }
    found
}

pub(crate) fn torn(model: &Model<'_>) -> Vec<TornTxn> {
    let mut found = Vec::new();
    let final_reads = model
        .reads
        .iter()
        .filter(|read| read.final_read && read.isolation == Isolation::ReadCommitted);
    for read in final_reads {
        let visible: BTreeSet<(&str, TopicPartition)> = read
            .records
            .iter()
            .map(|record| (record.value.as_str(), TopicPartition::of_read(record)))
            .collect();
        for txn in &model.txns {
            if !matches!(txn.outcome, Outcome::Committed | Outcome::Unknown) {
                continue;
            }
            let (mut present, mut missing) = (Vec::new(), Vec::new());
            for value in &txn.values {
                let Some(write) = model.writes.get(value.as_str()) else {
                    continue;
                };
                let txn_value = TxnValue {
                    value: value.clone(),
                    tp: write.tp.clone(),
                };
                if visible.contains(&(value.as_str(), write.tp.clone())) {
                    present.push(txn_value);
                } else {
                    missing.push(txn_value);
                }
            }
            if !present.is_empty() && !missing.is_empty() {
                found.push(TornTxn {
                    transactional_id: txn.transactional_id.clone(),
                    writer: Observer {
                        process: txn.process.clone(),
                        index: txn.index,
                        f: "txn",
                    },
                    outcome: txn.outcome,
                    final_read: Observer {
                        process: read.process.to_owned(),
                        index: read.index,
                        f: read.f(),
                    },
                    visible: present,
                    missing,
                });
            }
        }
    }
    found
}
