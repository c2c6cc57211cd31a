//! Record batch decoding (`idem_proto::batch`): the header, the CRC check, the broker's
//! validation of a produced batch (`validate_produced`, the first thing a Produce does
//! with client bytes), the record walk, compaction's rewrite and the iterator over a
//! fetch response. Corrupt bytes must be refused with a `BatchError`, never panic; what
//! is accepted must lie within the input and survive a re-encoding unchanged.
#![no_main]

use idem_proto::batch::{self, Batches, Record, StoredRecord, HEADER_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    check(data);
    if let Some(resealed) = idem_fuzz::reseal_batch(data) {
        check(&resealed);
    }
});

fn check(data: &[u8]) {
    if let Ok(header) = batch::decode_header(data) {
        assert!(header.size() >= HEADER_LEN);
        assert_eq!(header.magic, batch::MAGIC);
        // What readers of a decoded header ask of it, on any header.
        assert_eq!(header.next_offset(), header.last_offset() + 1);
        let _ = (
            header.last_sequence(),
            header.delete_horizon(),
            header.is_filler(),
        );
    }
    if let Ok(header) = batch::verify(data) {
        assert!(header.size() <= data.len(), "verified batch past the input");
        assert_eq!(batch::verify(&data[..header.size()]), Ok(header));
    }
    walk_fetch_response(data);
    if let Ok(header) = batch::validate_produced(data) {
        assert_eq!(header.size(), data.len());
        let records = batch::records(data).expect("a validated batch has readable records");
        assert_eq!(records.len(), header.record_count as usize);
        for (delta, record) in records.iter().enumerate() {
            assert_eq!(record.offset, header.base_offset + delta as i64);
        }
        reencode_matches(&header, &records);
        retain_every_other(data, &records);
    }
    // Reading records and markers does not check the CRC (callers verify first), so the
    // walk must stand on its own against any bytes.
    if let Ok(records) = batch::records(data) {
        let header = batch::decode_header(data).expect("records read a header");
        assert_eq!(records.len(), header.record_count as usize);
    }
}

/// A fetch response is batches back to back: each one the iterator yields lies within
/// the input, in order, and an error ends the iteration.
fn walk_fetch_response(data: &[u8]) {
    let mut consumed = 0usize;
    let mut failed = false;
    for item in Batches::new(data) {
        assert!(!failed, "the iterator went on after an error");
        match item {
            Ok((header, bytes)) => {
                assert_eq!(bytes.len(), header.size());
                assert_eq!(bytes, &data[consumed..consumed + header.size()]);
                consumed += header.size();
            }
            Err(_) => failed = true,
        }
    }
    assert!(consumed <= data.len());
}

/// The records a validated batch holds, encoded again by the producer's encoder and
/// stamped with the same offset and epoch, read back as the same records.
fn reencode_matches(header: &batch::BatchHeader, records: &[StoredRecord]) {
    let again: Vec<Record> = records
        .iter()
        .map(|r| Record {
            key: r.key.clone(),
            value: r.value.clone(),
            headers: r.headers.clone(),
            timestamp_ms: r.timestamp_ms,
        })
        .collect();
    let mut encoded = batch::encode(header.producer(), header.attributes, &again).to_vec();
    batch::assign(
        &mut encoded,
        header.base_offset,
        header.partition_leader_epoch,
    );
    let reheader = batch::validate_produced(&encoded).expect("the encoder's batch is valid");
    assert_eq!(reheader.producer(), header.producer());
    assert_eq!(reheader.attributes, header.attributes);
    assert_eq!(reheader.record_count, header.record_count);
    assert_eq!(
        batch::records(&encoded).expect("the encoder's records read back"),
        records
    );
}

/// Compaction keeps the header and drops records: the rewritten batch passes its CRC
/// and holds exactly the kept records.
fn retain_every_other(data: &[u8], records: &[StoredRecord]) {
    let mut index = 0usize;
    let kept = batch::retain_records(data, |_| {
        index += 1;
        index % 2 == 1
    })
    .expect("a validated batch can be compacted");
    let expected: Vec<&StoredRecord> = records.iter().step_by(2).collect();
    match kept {
        None => assert_eq!(expected.len(), records.len()),
        Some(bytes) => {
            let header = batch::verify(&bytes).expect("a rewritten batch passes its CRC");
            assert_eq!(header.size(), bytes.len());
            let read = batch::records(&bytes).expect("rewritten records read back");
            assert_eq!(read.iter().collect::<Vec<_>>(), expected);
        }
    }
}
