//! What every client of a chaos run shares: the workload's topics and the history
//! they write to, with the conversions from what the SDK returns to what the history
//! holds. Apart from the workload, so its clients (`workload.rs`, `pipeline.rs`) and the
//! run (`run.rs`) use it without using each other.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use idem_chaos::history::{Call, Isolation as ReadIsolation, OpKind, ReadRecord};
use idem_chaos::HistoryWriter;
use idem_client::{ConsumerRecord, Isolation};

/// The topics every run writes, each with [`PARTITIONS`] partitions.
pub const TOPICS: [&str; 2] = ["chaos-a", "chaos-b"];
pub const PARTITIONS: i32 = 3;

/// The history, shared by every client of a run.
#[derive(Clone)]
pub struct Recorder(Arc<Mutex<HistoryWriter<BufWriter<File>>>>);

impl Recorder {
    pub fn new(writer: HistoryWriter<BufWriter<File>>) -> Recorder {
        Recorder(Arc::new(Mutex::new(writer)))
    }

    /// A history written to a new file at `path`, its times counted from `started`
    /// (the nemesis log's zero, so the timeline lines both up).
    pub fn create(path: &Path, started: Instant) -> Recorder {
        let file = File::create(path).expect("history file");
        Recorder::new(HistoryWriter::starting_at(BufWriter::new(file), started))
    }

    fn with<T>(
        &self,
        f: impl FnOnce(&mut HistoryWriter<BufWriter<File>>) -> std::io::Result<T>,
    ) -> T {
        let mut writer = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut writer).expect("write the history")
    }

    pub fn invoke(&self, process: &str, call: Call) {
        self.with(|w| w.invoke(process, call));
    }

    pub fn complete(&self, process: &str, kind: OpKind, call: Call) {
        self.with(|w| w.complete(process, kind, call));
    }

    pub fn flush(&self) {
        self.with(|w| w.flush());
    }
}

pub fn read_isolation(isolation: Isolation) -> ReadIsolation {
    match isolation {
        Isolation::ReadCommitted => ReadIsolation::ReadCommitted,
        Isolation::ReadUncommitted => ReadIsolation::ReadUncommitted,
    }
}

/// A record as the history holds what a consumer read.
pub fn read_record(record: &ConsumerRecord) -> ReadRecord {
    ReadRecord {
        topic: record.topic.clone(),
        partition: record.partition,
        offset: record.offset,
        value: crate::sdk::value(record),
    }
}
