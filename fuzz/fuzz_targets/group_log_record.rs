//! Group-log records (`__consumer_offsets`, `GroupRecord::decode(key, value, offset)`):
//! what a group coordinator reads when it loads a slice. Any key and value give a record
//! or a `RecordError`; a record read back encodes to one that decodes to itself.
#![no_main]

use idem_coordinator::group::records::GroupRecord;
use libfuzzer_sys::fuzz_target;

/// Where the record is read from: stored in the decoded offsets, not in the bytes.
const RECORD_OFFSET: i64 = 42;

fuzz_target!(|data: &[u8]| {
    let (key, value) = idem_fuzz::split_key_value(data);
    let Ok(record) = GroupRecord::decode(key, value, RECORD_OFFSET) else {
        return;
    };
    let (key, value) = record.encode();
    let again = GroupRecord::decode(Some(&key), value.as_deref(), RECORD_OFFSET)
        .expect("an encoded record reads");
    assert_eq!(again, record);
});
